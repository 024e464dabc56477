"""The C extension `store._native` (store/_native.c), or None where it was not built.

`pip install -e .` builds it; without it the store runs the same writes in Python (slower), and
tests hold both to the same bytes.
"""

from __future__ import annotations

__all__ = ["native"]

try:
    import store._native as native
except ImportError:
    native = None  # type: ignore[assignment]  # typed as the module (its stub) where built

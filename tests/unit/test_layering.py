"""Which pyrmq packages a package may import: the client side never reaches into the broker.

Read from the source (every `import` and `from ... import`, at any depth, including those under
TYPE_CHECKING), so a back-edge fails here before it fails anyone's install.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYRMQ_PACKAGES = frozenset({"broker", "ha", "store", "controller_client", "controller", "remoting",
                            "pyrmq_client", "pyspark_rocketmq"})

# package -> the pyrmq packages it may import (besides itself)
ALLOWED = [
    ("remoting", frozenset()),
    ("store", frozenset()),
    ("pyrmq_client", frozenset({"remoting", "store"})),
    ("pyspark_rocketmq", frozenset({"pyrmq_client", "remoting", "store"})),
]


# The broker's side needs neither pyrmq's client nor Spark (issue 10: the `spark` extra is
# optional, and no broker code uses `pyrmq_client`).
SERVER_PACKAGES = ("broker", "ha", "store", "remoting", "controller_client", "controller")
CLIENT_ONLY = frozenset({"pyrmq_client", "pyspark_rocketmq", "pyspark", "pyarrow"})


def imported_packages(package: str, *, tops: frozenset[str] = PYRMQ_PACKAGES
                      ) -> dict[str, set[str]]:
    """Top-level package among `tops` (pyrmq's by default) -> the files of `package`
    importing it."""
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".", 1)[0]
                if top in tops and top != package:
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


@pytest.mark.parametrize(("package", "allowed"), ALLOWED, ids=[p for p, _ in ALLOWED])
def test_package_imports_only_its_layers(package: str, allowed: frozenset[str]) -> None:
    found = imported_packages(package)
    forbidden = {top: files for top, files in found.items() if top not in allowed}
    assert forbidden == {}, f"{package} imports {forbidden}"


def test_the_check_sees_an_import() -> None:
    """The walk finds the client's imports (so an empty result above is not a blind check)."""
    assert "remoting" in imported_packages("pyrmq_client")


@pytest.mark.parametrize("package", SERVER_PACKAGES)
def test_the_server_side_imports_neither_the_client_nor_spark(package: str) -> None:
    assert imported_packages(package, tops=CLIENT_ONLY) == {}


def test_the_client_only_check_sees_an_import() -> None:
    assert "pyspark" in imported_packages("pyspark_rocketmq", tops=CLIENT_ONLY)

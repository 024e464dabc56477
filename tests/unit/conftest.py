"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest

from store import _native, mapped_file


@pytest.fixture(params=["native", "python"])
def mapped_file_calls(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test that takes it runs over `MappedFile`'s native calls (`store._native`) and over
    their Python twins."""
    if request.param == "python":
        monkeypatch.setattr(mapped_file, "_native", None)
    else:
        assert vars(mapped_file)["_native"] is _native  # built by `pip install -e .`
    return str(request.param)

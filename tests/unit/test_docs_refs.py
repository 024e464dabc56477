"""References from the code to docs/: every `docs/<file>.md §N` (and `docs/reliability.md M13`)
names a file, section heading and id that exist; and the repointing rules of
scripts/repoint_docs_refs.py, which move the older references (to files outside the
repository) to docs/, on a table of the forms the code uses."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "repoint_docs_refs", ROOT / "scripts" / "repoint_docs_refs.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


repoint = _load_script()


def test_every_docs_reference_in_the_repository_resolves() -> None:
    # Only references already pointing at docs/ (outside=False): the older ones are repointed by
    # `scripts/repoint_docs_refs.py` once every branch is merged; then `--check` covers both.
    problems = repoint.check_repo(ROOT)
    assert problems == []


def test_the_docs_carry_every_section_and_id_the_code_cites() -> None:
    docs = repoint.load_docs(ROOT)
    assert set(docs) >= {f"{name}.md" for name in repoint.DOC_NAMES} | {"README.md"}
    assert {"3.4", "3.9", "7", "9.3"} <= docs["store-format.md"].sections
    assert {f"M{n}" for n in range(1, 18)} | {"P5", "R1", "R6"} <= docs["reliability.md"].ids


@pytest.mark.parametrize(
    ("path", "before", "after"),
    [
        ("a.py", "(spec/remoting-protocol.md §6.11)", "(docs/remoting-protocol.md §6.11)"),
        ("a.py", "store-format.md §3.4", "docs/store-format.md §3.4"),
        ("a.py", "(ha-protocol.md §7.3, reliability.md M4)",
         "(docs/ha-protocol.md §7.3, docs/reliability.md M4)"),
        ("a.py", "(store-format §3.3, remoting §6.1)",
         "(docs/store-format.md §3.3, docs/remoting-protocol.md §6.1)"),
        ("a.c", "(store-format.md section 3)", "(docs/store-format.md §3)"),
        ("a.py", "the index spec/README.md", "the index docs/README.md"),
        ("remoting/bodies.py", "(spec §6-§7, §11)", "(docs/remoting-protocol.md §6-§7, §11)"),
        # left alone: already in docs/, another path, a bare "spec §" in a file without an owner
        ("a.py", "docs/store-format.md §7", "docs/store-format.md §7"),
        ("a.py", "tests/spec/x.py, my-ha-protocol.md", "tests/spec/x.py, my-ha-protocol.md"),
        ("a.py", "spec §12", "spec §12"),
    ],
)
def test_repoint_rewrites_only_the_path(path: str, before: str, after: str) -> None:
    assert repoint.repoint_text(before, path) == after
    assert repoint.repoint_text(after, path) == after  # idempotent


def test_check_reports_outside_and_broken_references() -> None:
    docs = {"store-format.md": repoint.DocIndex(frozenset({"3", "3.4"}), frozenset()),
            "reliability.md": repoint.DocIndex(frozenset({"7"}), frozenset({"M1"}))}
    text = (
        "ok: docs/store-format.md §3.4, §3 and docs/reliability.md §7, M1\n"
        "x = 1  # spec/ha-protocol.md §6 and reliability.md M2\n"
        "docs/store-format.md §9.9-§3, docs/reliability.md M99, docs/nope.md §1\n"
    )
    assert repoint.check_text(text, docs) == [
        "2: points outside the repository: 'spec/ha-protocol.md'",
        "2: points outside the repository: 'reliability.md'",
        "3: docs/store-format.md has no section §9.9",
        "3: docs/reliability.md has no M99",
        "3: no such file: docs/nope.md",
    ]
    assert repoint.check_text(text, docs, outside=False) == [
        "3: docs/store-format.md has no section §9.9",
        "3: docs/reliability.md has no M99",
        "3: no such file: docs/nope.md",
    ]


def test_rewrap_splits_only_prose_the_repointing_made_too_long() -> None:
    old = (
        '"""Short summary (store-format.md §3).\n'
        "\n"
        "Body.\n"
        '"""\n'
        "# " + "w" * 50 + " (ha-protocol.md §6 step 4) and more words\n"
        "# next line of the same comment\n"
        'x = "' + "y" * 95 + '"\n'
    )
    new = repoint.repoint_text(old, "a.py")
    wrapped, left = repoint.rewrap(old, new, limit=80)
    assert left == []
    assert wrapped.splitlines()[4:6] == [
        "# " + "w" * 50 + " (docs/ha-protocol.md §6",
        "# step 4) and more words next line of the same comment",
    ]
    assert wrapped.splitlines()[6] == old.splitlines()[6]  # unchanged code is never touched
    assert all(len(line) <= 80 for line in wrapped.splitlines()[:6])


def test_rewrap_never_joins_a_closing_docstring_to_the_next_line() -> None:
    old = (
        "def f() -> None:\n"
        '    """One line that the repointing makes too long (store-format.md §3.4) here."""\n'
        "    # a comment after it\n"
        "    return None\n"
    )
    new = repoint.repoint_text(old, "a.py")
    wrapped, left = repoint.rewrap(old, new, limit=80)
    assert left == []
    assert wrapped.splitlines()[1:4] == [
        '    """One line that the repointing makes too long (docs/store-format.md §3.4)',
        '    here."""',
        "    # a comment after it",
    ]
    compile(wrapped, "a.py", "exec")

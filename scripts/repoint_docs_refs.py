#!/usr/bin/env python3
"""Repoint the code's references to the formats and protocols at the repository's own `docs/`.

Comments, docstrings and tests used to cite `spec/store-format.md §3.4`, `ha-protocol.md §7.3`,
`reliability.md M13`, `store-format §7`, `spec §12` ...: files that lived outside the repository.
`docs/` now carries them with the same section numbers and the same M/P/R ids, so only the path
changes: `docs/store-format.md §3.4`, `docs/ha-protocol.md §7.3`, `docs/reliability.md M13`.

    scripts/repoint_docs_refs.py           rewrite in place, print every changed line (idempotent)
    scripts/repoint_docs_refs.py --check   change nothing; exit 1 if a reference still points
                                           outside the repository or a `docs/` reference names a
                                           file, section or id that does not exist

The rules are pure functions (`repoint_text`, `check_text`), tested in tests/unit/test_docs_refs.py.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = "docs"
DOC_NAMES = ("store-format", "remoting-protocol", "ha-protocol", "replicas-manager", "reliability")

# Files scanned, and directories never entered (the docs themselves cite each other by bare name).
SUFFIXES = {".py", ".pyi", ".c", ".h", ".java", ".md", ".toml", ".sh", ".txt", ".cfg", ".ini",
            ".yml", ".yaml", ".conf", ".properties"}
SKIP_DIRS = {".git", ".venv", "build", "dist", "target", "__pycache__", ".mypy_cache",
             ".ruff_cache", ".pytest_cache", ".hypothesis", "node_modules", DOCS}
SELF = {"scripts/repoint_docs_refs.py", "tests/unit/test_docs_refs.py"}

# `spec §N` names no file; in these files it always meant the remoting spec.
SPEC_SECTION_OWNER = {
    "controller_client/errors.py": "remoting-protocol",
    "remoting/bodies.py": "remoting-protocol",
    "tests/controller_client/test_messages.py": "remoting-protocol",
}

_NAMES = "|".join(DOC_NAMES)
_NOT_PATH = r"(?<![\w/.-])"  # not already part of a longer path (`docs/x.md`, `a/spec/x.md`)

# (pattern, replacement), applied in order. Each leaves nothing the next one would match again.
_REWRITES: tuple[tuple[re.Pattern[str], str], ...] = (
    # spec/x.md and spec/README.md (the index) -> docs/x.md, docs/README.md
    (re.compile(_NOT_PATH + rf"spec/({_NAMES}|README)\.md"), r"docs/\1.md"),
    (re.compile(_NOT_PATH + r"spec/README\b"), "docs/README.md"),
    # bare x.md -> docs/x.md
    (re.compile(_NOT_PATH + rf"({_NAMES})\.md"), r"docs/\1.md"),
    # "store-format §7", "remoting §6.1" (no .md) -> docs/<file>.md §7
    (re.compile(_NOT_PATH + rf"({_NAMES})(?= §)"), r"docs/\1.md"),
    (re.compile(_NOT_PATH + r"remoting(?= §)"), "docs/remoting-protocol.md"),
    # "docs/x.md section 7" -> "docs/x.md §7", so the section is checked like every other
    (re.compile(rf"(docs/(?:{_NAMES})\.md) section (\d)"), r"\1 §\2"),
)
_SPEC_SECTION = re.compile(_NOT_PATH + r"spec (?=§)")

# Anything still pointing outside the repository after the rewrites.
_OUTSIDE = re.compile(
    r"/work/shared|" + _NOT_PATH + r"spec/[\w-]+\.md|" + _NOT_PATH + rf"(?:{_NAMES})\.md|"
    + _NOT_PATH + rf"(?:{_NAMES}|remoting) §|" + _NOT_PATH + r"spec §"
)

# A docs reference and what follows it: sections (§6.8-§6.10, §1, §7) and ids (M1, R1-R6).
_SEP = r"(?:[\s,;:()\-\u2013*#/]|and\b|or\b)*"
_ITEM = r"(?:§\d+(?:\.\d+)*|(?:M|P|R)\d+\b)"
_DOC_REF = re.compile(rf"docs/([\w-]+\.md)((?:{_SEP}{_ITEM})*)")
_SECTION = re.compile(r"§(\d+(?:\.\d+)*)")
_ID = re.compile(r"\b([MPR]\d+)\b")
_HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s", re.MULTILINE)
_ID_ROW = re.compile(r"^\|\s*([MPR]\d+)\b", re.MULTILINE)


def repoint_text(text: str, path: str) -> str:
    """`text` with every outside reference repointed at docs/ (idempotent)."""
    for pattern, replacement in _REWRITES:
        text = pattern.sub(replacement, text)
    owner = SPEC_SECTION_OWNER.get(path)
    if owner is not None:
        text = _SPEC_SECTION.sub(f"docs/{owner}.md ", text)
    return text


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


@dataclass(frozen=True)
class DocIndex:
    """What a docs file can be cited by: its numbered headings, and (reliability.md) its ids."""

    sections: frozenset[str]
    ids: frozenset[str]

    @classmethod
    def of(cls, text: str) -> DocIndex:
        return cls(frozenset(_HEADING.findall(text)), frozenset(_ID_ROW.findall(text)))


def load_docs(root: Path = ROOT) -> dict[str, DocIndex]:
    """Every docs/*.md by file name."""
    return {p.name: DocIndex.of(p.read_text(encoding="utf-8"))
            for p in sorted((root / DOCS).glob("*.md"))}


def check_text(text: str, docs: dict[str, DocIndex], *, outside: bool = True) -> list[str]:
    """Problems in `text`: references outside the repository (if `outside`), and docs references
    naming a missing file, section heading or id."""
    problems: list[str] = []
    if outside:
        problems.extend(
            f"{_line_of(text, m.start())}: points outside the repository: {m.group(0)!r}"
            for m in _OUTSIDE.finditer(text))
    for m in _DOC_REF.finditer(text):
        name, tail, line = m.group(1), m.group(2), _line_of(text, m.start())
        index = docs.get(name)
        if index is None:
            problems.append(f"{line}: no such file: docs/{name}")
            continue
        problems.extend(f"{line}: docs/{name} has no section §{s}"
                        for s in _SECTION.findall(tail) if s not in index.sections)
        problems.extend(f"{line}: docs/{name} has no {i}"
                        for i in _ID.findall(tail) if i not in index.ids)
    return problems


def source_files(root: Path = ROOT) -> Iterator[tuple[str, Path]]:
    """(repository-relative path, path) of every scanned file."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.suffix in SUFFIXES and rel not in SELF:
                yield rel, path


def check_repo(root: Path = ROOT, *, outside: bool = True) -> list[str]:
    """Every problem in the repository, as `path:line: problem`."""
    docs = load_docs(root)
    found: list[str] = []
    for rel, path in source_files(root):
        text = path.read_text(encoding="utf-8", errors="replace")
        found.extend(f"{rel}:{problem}" for problem in check_text(text, docs, outside=outside))
    return found


LINE_LIMIT = 100  # ruff's line-length (pyproject.toml)
_CLOSING = ('"""', "'''")
_LIST_ITEM = re.compile(r"^\s*(?:[-*|]|\d+[.)])\s")


def _prose_lines(text: str) -> dict[int, str]:
    """0-based line -> continuation prefix, for lines that are a whole comment or lie inside a
    triple-quoted string (docstrings): the only lines `rewrap` may split."""
    prefixes: dict[int, str] = {}
    lines = text.splitlines()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return prefixes
    for tok in tokens:
        (row, col), (end_row, _) = tok.start, tok.end
        if tok.type == tokenize.COMMENT and not lines[row - 1][:col].strip():
            prefixes[row - 1] = lines[row - 1][:col] + "# "
        elif tok.type == tokenize.STRING and re.match(r"^[A-Za-z]*(\"\"\"|\'\'\')", tok.string):
            prefixes[row - 1] = " " * col
            for r in range(row, end_row):
                line = lines[r]
                prefixes[r] = line[: len(line) - len(line.lstrip())]
    return prefixes


def rewrap(old: str, new: str, limit: int = LINE_LIMIT) -> tuple[str, list[int]]:
    """Split the comment and docstring lines the repointing pushed past `limit` (the overflow
    joins the next line when that is a plain continuation of the same block and fits).
    Returns the text and the 1-based lines (of `new`) that are still too long: fix by hand."""
    old_lines, lines = old.splitlines(), new.splitlines()
    prefixes = _prose_lines(new)
    left: list[int] = []
    # Bottom-up, so that inserted lines never shift a line still to be visited.
    for i in reversed(range(len(lines))):
        if len(lines[i]) <= limit or (i < len(old_lines) and lines[i] == old_lines[i]):
            continue
        prefix = prefixes.get(i)
        if prefix is None:
            left.append(i + 1)
            continue
        j = i
        while len(lines[j]) > limit:
            cut = lines[j].rfind(" ", len(prefix) + 1, limit + 1)
            if cut < 0:
                left.append(i + 1)
                break
            head, tail = lines[j][:cut].rstrip(), lines[j][cut + 1:]
            lines[j] = head
            nxt = lines[j + 1] if j + 1 < len(lines) else ""
            # Join the next line only if it continues the same block: the same prefix (a comment
            # line, or a line of the same docstring, as this one does not close it) and plain
            # prose (not a list item, not the closing quotes).
            plain = (prefixes.get(j + 1) == prefix and nxt.strip()
                     and not any(quotes in tail for quotes in _CLOSING)
                     and not _LIST_ITEM.match(nxt[len(prefix):])
                     and not nxt.strip().startswith(_CLOSING))
            if plain and len(prefix) + len(tail) + 1 + len(nxt) - len(prefix) <= limit:
                lines[j + 1] = prefix + tail + " " + nxt[len(prefix):]
                break
            lines.insert(j + 1, prefix + tail)
            j += 1
    end = "\n" if new.endswith("\n") else ""
    return "\n".join(lines) + end, sorted(left)


def repoint_repo(root: Path = ROOT) -> int:
    """Rewrite every scanned file in place; print each changed line; return the number of files."""
    changed = 0
    for rel, path in source_files(root):
        text = path.read_text(encoding="utf-8")
        new = repoint_text(text, rel)
        if new == text:
            continue
        changed += 1
        for number, (old_line, new_line) in enumerate(
                zip(text.splitlines(), new.splitlines(), strict=True), start=1):
            if old_line != new_line:
                print(f"{rel}:{number}:\n  - {old_line.strip()}\n  + {new_line.strip()}")
        if path.suffix == ".py":
            new, left = rewrap(text, new)
            for number in left:
                print(f"{rel}:{number}: longer than {LINE_LIMIT} characters: rewrap by hand")
        path.write_text(new, encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if any reference is outside or broken")
    args = parser.parse_args(argv)
    if args.check:
        problems = check_repo()
        for problem in problems:
            print(problem)
        print(f"{len(problems)} problem(s)")
        return 1 if problems else 0
    print(f"{repoint_repo()} file(s) changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

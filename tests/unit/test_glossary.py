"""docs/design.md's "Words that mean one thing" held to the code: every identifier of the package (but
``pod_sweeper.demo``, the demo's stand-ins) and of tests/harness that has one of the table's words as a
part of its name (``snake_case`` or ``CamelCase`` parts) is listed in that word's row. A name that uses
the word in another sense is not listed there, and fails; the negative control plants one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "daemon" / "pod_sweeper"

pytestmark = pytest.mark.unit


def glossary() -> dict[tuple[str, ...], set[str]]:
    """Each row's words (its forms, as parts of a name) -> the identifiers its row lists."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("## Words that mean one thing", 1)[1].split("\n## ", 1)[0]
    rows: dict[tuple[str, ...], set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("word", "---"):
            continue
        words = tuple(w.strip() for w in cells[0].split(","))
        rows[words] = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", cells[2]))
    return rows


def forms(word: str) -> set[str]:
    stem = word[:-1] if word.endswith("e") else word  # resume: resumed, resuming
    return {word, word + "s", stem + "ed", stem + "ing", {"held": "hold", "hold": "held"}.get(word, word)}


def parts(name: str) -> list[str]:
    return [p.lower() for p in re.split(r"_|(?<=[a-z0-9])(?=[A-Z])", name) if p]


def identifiers(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        for field in ("name", "id", "attr", "arg"):
            value = getattr(node, field, None)
            if isinstance(value, str):
                names.add(value)
    return names


def strays(sources: dict[str, str]) -> list[tuple[str, str, str]]:
    """(file, identifier, word) for every identifier with a glossary word in its name that its row does not list."""
    found = []
    for words, listed in glossary().items():
        wanted = set().union(*(forms(w) for w in words))
        for path, source in sources.items():
            for name in sorted(identifiers(source)):
                if wanted & set(parts(name)) and name not in listed:
                    found.append((path, name, words[0]))
    return found


def sources() -> dict[str, str]:
    files = [p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "demo"]
    files += list((ROOT / "tests" / "harness").rglob("*.py"))
    return {str(p.relative_to(ROOT)): p.read_text() for p in files}


def test_the_glossary_lists_four_words() -> None:
    assert [words[0] for words in glossary()] == ["held", "answer", "record", "resume"]


def test_every_identifier_with_a_glossary_word_carries_its_one_meaning() -> None:
    assert strays(sources()) == []


def test_a_name_using_a_word_in_another_sense_is_caught() -> None:
    planted = "held_rows = 1\nclaim_answered = True\nrecorded_verdicts = []\nresumed_claims = None\n"
    assert {(name, word) for _, name, word in strays({"planted.py": planted})} == {
        ("held_rows", "held"),
        ("claim_answered", "answer"),
        ("recorded_verdicts", "record"),
        ("resumed_claims", "resume"),
    }

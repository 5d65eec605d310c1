"""Identifiers, keys and subjects match as whole strings: a trailing newline never slips through.

``re.match`` with a ``$`` anchor accepts ``"alice\\n"`` (``$`` matches before a final newline), so
validation uses ``fullmatch`` everywhere; the scan below keeps it that way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from constructs_lib.approval_gate.gate_runtime import decide
from lambdas.shared import keys
from lambdas.shared.tokens import SUBJECT_PATTERN

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("lambdas", "constructs_lib", "stacks")
SESSION = "0b7c5f2e-1d3a-4c8b-9e6f-2a1b3c4d5e6f"


def _prefix_matches(path: Path) -> list[str]:
    """``x.match(...)`` and ``re.match(...)`` calls: a prefix match, never right for validation."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "match":
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_validation_in_the_code_uses_a_prefix_match() -> None:
    offenders = [hit for top in SCANNED for path in sorted((ROOT / top).rglob("*.py")) for hit in _prefix_matches(path)]
    assert offenders == [], "use fullmatch for ids, keys and subjects: " + ", ".join(offenders)


@pytest.mark.parametrize("suffix", ["\n", "\r\n", " ", "\x00"])
def test_ids_keys_and_subjects_with_anything_after_them_are_refused(suffix: str) -> None:
    assert keys.is_session_id(SESSION)
    assert not keys.is_session_id(SESSION + suffix)
    assert keys.is_turn_sk(keys.turn_sk(3))
    assert not keys.is_turn_sk(keys.turn_sk(3) + suffix)
    assert SUBJECT_PATTERN.fullmatch("alice")
    assert not SUBJECT_PATTERN.fullmatch("alice" + suffix)


def test_a_review_link_path_with_a_trailing_newline_is_not_a_link() -> None:
    assert decide._LINK_PATH.search("/prod/reviews/r-1/approve") is not None
    assert decide._LINK_PATH.search("/prod/reviews/r-1/approve\n") is None

"""The message vocabulary, the summary-window rule and the session-id rule are each defined once."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from lambdas.events import messages
from lambdas.shared import keys
from lambdas.shared.records import HandoffStatus, SessionStatus
from lambdas.shared.summaries import closes_window, window

LAMBDAS = Path(__file__).resolve().parents[2] / "lambdas"
VOCABULARY = {
    value for name, value in vars(messages).items() if name.startswith(("EVENT_", "REASON_")) and isinstance(value, str)
}


def _string_literals(path: Path) -> set[str]:
    """String constants in code, docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    }


#: Words that are also a record's status (``handoff``, ``assigned``, ``escalated``) mean that status elsewhere.
STATUS_WORDS = {str(s) for s in (*HandoffStatus, *SessionStatus)}


@pytest.mark.parametrize("word", sorted(VOCABULARY - STATUS_WORDS))
def test_a_message_word_is_spelled_only_in_the_messages_module(word: str) -> None:
    spelled = [
        str(path.relative_to(LAMBDAS))
        for path in LAMBDAS.rglob("*.py")
        if path.name != "messages.py" and word in _string_literals(path)
    ]
    assert spelled == []


def test_the_summary_window_rule_lives_in_one_module() -> None:
    rule = re.compile(r"%\s*interval")
    holders = [str(p.relative_to(LAMBDAS)) for p in LAMBDAS.rglob("*.py") if rule.search(p.read_text())]
    assert holders == ["shared/summaries.py"]
    assert [n for n in range(1, 31) if closes_window(n, 10)] == [10, 20, 30]
    assert window(20, 10) == (2, 11, 20)


@pytest.mark.parametrize(
    ("value", "ok"),
    [("0b7e4c3a-2d1f-4c8e-9a6b-5f3e2d1c0b9a", True), ("0B7E4C3A-2D1F-4C8E-9A6B-5F3E2D1C0B9A", False), ("s-1", False)],
)
def test_one_session_id_rule(value: str, ok: bool) -> None:
    assert keys.is_session_id(value) is ok

"""The WebSocket protocol page names every frame type and every error code the code can send."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "websocket-api.md"
#: Everything that sends frames to a customer's connection, or answers its handshake.
SENDERS = [*sorted((ROOT / "lambdas" / "ws").glob("*.py")), ROOT / "lambdas/events/customer_notifier.py"]
#: Calls whose first string argument is an error code on the wire (connect answers ``_answer(status, code, ...)``).
_CODE_CALLS = {"FrameError": 0, "error_frame": 0, "_answer": 1}


def _sent_words(path: Path) -> tuple[set[str], set[str]]:
    """The frame types (``"type": <literal>``) and error codes a module sends."""
    types: set[str] = set()
    codes: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                    if key.value == "type":
                        types.add(value.value)
                    elif key.value == "code":
                        codes.add(value.value)
        elif isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            position = _CODE_CALLS.get(str(name))
            if position is not None and len(node.args) > position:
                argument = node.args[position]
                if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                    codes.add(argument.value)
    return types, codes


def test_every_frame_type_and_error_code_is_documented() -> None:
    doc = DOC.read_text()
    types: set[str] = set()
    codes: set[str] = set()
    for path in SENDERS:
        found_types, found_codes = _sent_words(path)
        types |= found_types
        codes |= found_codes
    # the scan finds what it must (a scan that finds nothing would pass vacuously)
    assert {"welcome", "message", "ack", "error", "notification", "handoff_closed"} <= types
    assert {"invalid_frame", "rate_limited", "forbidden", "too_many_connections", "session_closed"} <= codes
    undocumented = sorted(w for w in types | codes if f'"{w}"' not in doc and f"`{w}`" not in doc)
    assert undocumented == [], f"docs/websocket-api.md does not name: {undocumented}"

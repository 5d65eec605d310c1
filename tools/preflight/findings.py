"""The preflight's findings: one row each, the table they print as, and the exit code they make."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from botocore.exceptions import ClientError

Status = Literal["OK", "WARN", "BLOCKER"]

#: The repository (paths in findings are shown relative to it).
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Finding:
    """One row of the table: what was checked, how it stands, what was seen, and what to do."""

    check: str
    status: Status
    detail: str
    fix: str = ""


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _message(error: ClientError) -> str:
    found = error.response.get("Error", {})
    return f"{found.get('Code', '?')}: {found.get('Message', '')}".rstrip(": ")


def _day(value: Any) -> str:
    return value.date().isoformat() if isinstance(value, datetime) else str(value)


def _number(value: Any) -> str:
    """A quota as SES reports it (a float; -1 for no limit)."""
    if not isinstance(value, (int, float)):
        return "?"
    return "no limit" if value < 0 else f"{value:g}"


def _guarded(name: str, check: Callable[[], Finding | list[Finding]]) -> list[Finding]:
    """A check's findings; an error it did not expect is a WARN that says it could not check."""
    try:
        found = check()
    except ClientError as error:
        return [Finding(name, "WARN", f"could not check ({_message(error)})", "check it by hand (docs/deploy.md)")]
    return found if isinstance(found, list) else [found]


#: Widths the detail and fix columns wrap at, so a row fits a terminal of about 140 columns.
DETAIL_WIDTH, FIX_WIDTH = 60, 48


def render(findings: Sequence[Finding]) -> str:
    """The findings as a table: check, status, detail, fix (the last two wrapped)."""
    header = ("check", "status", "detail", "fix")
    rows = [header, *((f.check, f.status, f.detail, f.fix or "-") for f in findings)]
    wrapped = [
        [
            [row[0]],
            [row[1]],
            textwrap.wrap(row[2], DETAIL_WIDTH, break_on_hyphens=False) or [""],
            textwrap.wrap(row[3], FIX_WIDTH, break_on_hyphens=False) or [""],
        ]
        for row in rows
    ]
    widths = [max(len(line) for row in wrapped for line in row[column]) for column in range(4)]
    lines = []
    for number, row in enumerate(wrapped):
        for index in range(max(len(cell) for cell in row)):
            cells = [cell[index] if index < len(cell) else "" for cell in row]
            lines.append(" | ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip())
        if number == 0:
            lines.append("-+-".join("-" * width for width in widths))
    return "\n".join(lines)


def exit_code(findings: Sequence[Finding]) -> int:
    """1 when any finding blocks the deploy, else 0."""
    return 1 if any(f.status == "BLOCKER" for f in findings) else 0

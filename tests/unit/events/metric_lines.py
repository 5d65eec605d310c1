"""What the metric functions' tests share: an EventBridge event in, the EMF lines the function printed out."""

from __future__ import annotations

import json
from typing import Any

import pytest


def bus_event(detail_type: str, detail: dict[str, Any]) -> dict[str, Any]:
    """An event of the sessions bus, as EventBridge delivers it to a rule's target."""
    return {
        "version": "0",
        "id": "e-1",
        "detail-type": detail_type,
        "source": "mangaassist.sessions",
        "account": "123456789012",
        "time": "2026-01-01T00:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": detail,
    }


def emf_lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """The embedded-metric-format lines printed since the last read (other output is skipped)."""
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]


def dimension_sets(line: dict[str, Any]) -> list[list[str]]:
    return [sorted(d) for d in line["_aws"]["CloudWatchMetrics"][0]["Dimensions"]]


def values(line: dict[str, Any], name: str) -> list[float]:
    """A metric's values in one line: EMF writes one value bare and several as a list."""
    value = line[name]
    return value if isinstance(value, list) else [value]

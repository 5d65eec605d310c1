"""The store builds the repositories a chat message does not need on first use, their modules with them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lambdas.shared import store as store_package
from lambdas.shared.store import DynamoSessionStore, preload
from lambdas.shared.store.agents import Agents
from lambdas.shared.store.handoffs import HandoffConflict, Handoffs
from lambdas.shared.store.inbox import Inbox
from lambdas.shared.store.sessions import Sessions

ROOT = Path(__file__).resolve().parents[4]
LATER = ["sessions", "handoffs", "agents", "inbox"]

_PROBE = """
import json, sys
from lambdas.shared.store import DynamoSessionStore
store = DynamoSessionStore("t", client=object())
before = [m for m in sys.argv[1:] if "lambdas.shared.store." + m in sys.modules]
store.chat, store.turns, store.limits, store.connections
chat = [m for m in sys.argv[1:] if "lambdas.shared.store." + m in sys.modules]
store.sessions
after = [m for m in sys.argv[1:] if "lambdas.shared.store." + m in sys.modules]
print(json.dumps([before, chat, after]))
"""


def test_a_fresh_store_loads_no_later_repository_until_one_is_used() -> None:
    done = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", _PROBE, *LATER], cwd=ROOT, capture_output=True, text=True, check=True
    )
    before, chat, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert before == []
    assert chat == []
    assert after == ["sessions"]


def test_each_later_repository_is_built_once_over_the_stores_table() -> None:
    store = DynamoSessionStore("t", client=object())
    for name, kind in (("sessions", Sessions), ("handoffs", Handoffs), ("agents", Agents), ("inbox", Inbox)):
        repository = getattr(store, name)
        assert isinstance(repository, kind)
        assert repository.table is store.table
        assert getattr(store, name) is repository


def test_the_later_names_resolve_from_the_package_and_an_unknown_one_is_an_attribute_error() -> None:
    assert store_package.HandoffConflict is HandoffConflict
    assert store_package.Sessions is Sessions
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = store_package.Nothing


def test_preload_imports_the_named_modules_and_refuses_an_unknown_repository() -> None:
    preload(*LATER)
    assert all(f"lambdas.shared.store.{name}" in sys.modules for name in LATER)
    with pytest.raises(ValueError, match="no repository 'turns' is built on first use"):
        preload("turns")

"""What each function's handler module loads when Lambda imports it, against what it may load.

A cold start pays for every module the handler's import loads, so a heavy library that creeps into
a handler through a shared module (a tracer, a router, the token verifier) is a slower cold start
for that function. :data:`ALLOWED` names, per handler module, the heavy modules it may load;
:func:`heavy_imports` reads what a fresh interpreter really loads. Nothing here times anything.

:data:`ALLOWED` holds one entry per module named by a Python function's ``Handler`` in the
synthesized dev and prod templates (``tests/infra/test_invariants.py`` keeps the two equal), so a
new function cannot go unchecked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Final

from bench.cold_imports import lambda_environment

ROOT = Path(__file__).resolve().parents[2]

#: The modules counted as heavy: each costs a cold start a noticeable share of ``import boto3``,
#: or (the token verifier, the store) pulls such modules in. Whatever ``import boto3`` loads
#: itself (botocore, jmespath, urllib3, ...) is not listed: no function that calls AWS avoids it.
HEAVY: Final = (
    "boto3",  # the functions that make no AWS call do without it
    "aws_xray_sdk",  # with wrapt and asyncio: the tracer, for the functions that call AWS
    "sqlite3",  # imported only by the X-Ray SDK's patch_all, which patches what no function uses
    "requests",
    "aws_lambda_powertools.event_handler",
    "aws_lambda_powertools.utilities.batch",
    "aws_lambda_powertools.utilities.idempotency",
    "aws_lambda_powertools.utilities.parser",
    "aws_lambda_powertools.utilities.validation",
    "pydantic",
    "fastjsonschema",
    "jwt",
    "cryptography",
    "lambdas.shared.tokens",  # PyJWT and cryptography: the two authorizers only
    "lambdas.shared.store",  # the data-access layer: its core and the chat's repositories
    # The repositories the store builds on first use: a function loads one at import only when its
    # invocations use it (``preload``), and the chat's functions load none they do not need.
    "lambdas.shared.store.sessions",
    "lambdas.shared.store.handoffs",
    "lambdas.shared.store.agents",
    "lambdas.shared.store.inbox",
    # Loaded by the Message Lambda only when a client is gone (410) or edits the chat.
    "lambdas.ws.disconnect",
    "lambdas.ws.rewind",
)

_TRACED: Final = frozenset({"boto3", "lambdas.shared.store", "aws_xray_sdk"})
_SESSIONS: Final = frozenset({"lambdas.shared.store.sessions"})
#: The handoffs repository loads the sessions and inbox ones it writes through.
_HANDOFFS: Final = _SESSIONS | {"lambdas.shared.store.handoffs", "lambdas.shared.store.inbox"}
_AGENTS: Final = frozenset({"lambdas.shared.store.agents"})
_INBOX: Final = frozenset({"lambdas.shared.store.inbox"})
_ROUTES: Final = _TRACED | {"aws_lambda_powertools.event_handler", "fastjsonschema"}
_BATCHES: Final = _TRACED | {"aws_lambda_powertools.utilities.batch"}
_NOTIFIES: Final = _BATCHES | {"aws_lambda_powertools.utilities.idempotency"}
_VERIFIES: Final = frozenset({"jwt", "cryptography", "lambdas.shared.tokens"})

#: Per handler module, the heavy modules its import may load.
ALLOWED: Final[Mapping[str, frozenset[str]]] = MappingProxyType(
    {
        "lambdas.api.admin_agents": _ROUTES | _AGENTS,
        "lambdas.api.agent": _ROUTES | _HANDOFFS | _AGENTS,
        "lambdas.api.authorizer": _VERIFIES,
        "lambdas.api.customers": _ROUTES | _HANDOFFS,
        "lambdas.api.rest": _ROUTES | _HANDOFFS,
        "lambdas.events.audit_lock": _TRACED,
        "lambdas.events.customer_notifier": _NOTIFIES | _HANDOFFS,
        "lambdas.events.dashboard": _BATCHES | _INBOX,
        "lambdas.events.escalation": _BATCHES | _HANDOFFS,
        "lambdas.events.handoff_metrics": frozenset(),
        "lambdas.events.metrics": frozenset(),
        "lambdas.events.router": _BATCHES,
        "lambdas.events.sessions_gauge": frozenset({"boto3", "lambdas.shared.store"}) | _SESSIONS,
        "lambdas.events.summary": _TRACED,
        "lambdas.orchestration.cleanup_worker": _TRACED | _SESSIONS,
        "lambdas.orchestration.erasure": _TRACED | _HANDOFFS,
        "lambdas.orchestration.export_notifier": _NOTIFIES,
        # Scores facts it is handed: no AWS client, no store.
        "lambdas.orchestration.export_risk": frozenset({"aws_xray_sdk"}),
        "lambdas.orchestration.handoff": _BATCHES | _HANDOFFS | _AGENTS,
        "lambdas.ws.authorizer": _VERIFIES,
        # A new chat needs no session read: the sessions repository loads with a resume's first one.
        "lambdas.ws.connect": _TRACED,
        "lambdas.ws.default": frozenset(),
        # The customer leaves: the session and a handoff in progress (lambdas.usecases.customer_leaves).
        "lambdas.ws.disconnect": _TRACED | _HANDOFFS | {"lambdas.ws.disconnect"},
        # The chat's turns, connections and rate limits only.
        "lambdas.ws.message": _TRACED,
        "lambdas.ws.onboarding": _TRACED | _HANDOFFS | {"lambdas.ws.disconnect"},
        "gate_runtime.decide": frozenset({"boto3"}),
        "gate_runtime.request": frozenset({"boto3"}),
    }
)

#: Where a handler module's package sits, relative to the repository: the root of its code asset.
_ASSET_ROOTS: Final = {"lambdas": ".", "gate_runtime": "constructs_lib/approval_gate"}


def handler_module(handler: str) -> str:
    """``lambdas.ws.message.handler`` -> ``lambdas.ws.message``."""
    return handler.rpartition(".")[0]


def asset_root(module: str) -> Path:
    """The directory Lambda would run ``module`` from (its package's code asset)."""
    return ROOT / _ASSET_ROOTS[module.split(".")[0]]


_PROBE: Final = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
heavy = json.loads(sys.argv[2])
print(json.dumps(sorted(h for h in heavy if h in sys.modules)))
"""


def heavy_imports(module: str) -> frozenset[str]:
    """The :data:`HEAVY` modules a fresh interpreter has loaded once it imported ``module``.

    It runs as ``make bench`` measures a cold import: from the module's asset root, in Lambda's
    environment (tracing on, as deployed; the tests' own ``POWERTOOLS_TRACE_DISABLED`` is dropped).
    """
    root = asset_root(module)
    done = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", _PROBE, module, json.dumps(HEAVY)],
        cwd=root,
        env=lambda_environment(root),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"importing {module} failed:\n{done.stderr[-2000:]}")
    return frozenset(json.loads(done.stdout.strip().splitlines()[-1]))


def unexpected(module: str, loaded: Iterable[str]) -> str | None:
    """What is wrong with ``loaded`` for ``module`` (None when it is exactly what it may load)."""
    allowed = ALLOWED[module]
    extra, missing = sorted(set(loaded) - allowed), sorted(allowed - set(loaded))
    if not extra and not missing:
        return None
    parts = [f"loads {', '.join(extra)} (not allowed)"] if extra else []
    if missing:
        parts.append(f"no longer loads {', '.join(missing)} (tighten ALLOWED)")
    return f"{module}: " + "; ".join(parts)

"""The contracts package: standard library only, and the Lambda side reads its values, never copies."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import contracts
from contracts import environment, keys, messages, requests, workflows
from lambdas.api import access as lambda_access
from lambdas.api import validation
from lambdas.events import messages as lambda_messages
from lambdas.shared import errors, settings, tokens
from lambdas.shared import keys as lambda_keys
from lambdas.shared.records import SessionStatus
from lambdas.ws import frames, onboarding

CONTRACTS = Path(contracts.__file__).parent


def test_contracts_import_only_the_standard_library_and_themselves() -> None:
    imported: set[str] = set()
    for source in CONTRACTS.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)

    foreign = sorted(imported - set(sys.stdlib_module_names) - {"__future__", "contracts"})

    assert foreign == []


def test_the_lambda_side_re_exports_the_contract_values_themselves() -> None:
    assert lambda_keys.SESSION_PREFIX is keys.SESSION_PREFIX
    assert lambda_messages.EVENT_HANDOFF_STARTED is messages.EVENT_HANDOFF_STARTED
    assert lambda_access.ROUTES is contracts.access.ROUTES
    assert tokens.ROLES is contracts.access.ROLES
    assert tokens.ISSUER_VARIABLES is environment.ISSUER_VARIABLES
    assert settings.STAGE_VARIABLES is environment.STAGE_VARIABLES
    assert validation.BODY_MODELS is requests.BODY_MODELS
    assert frames.SEND_MESSAGE is contracts.chat.SEND_MESSAGE


def test_the_lambdas_check_exactly_the_formats_the_request_schemas_may_name() -> None:
    assert set(validation._FORMATS) == requests.FORMATS


def test_the_listable_session_statuses_are_exactly_the_status_machines() -> None:
    assert tuple(str(status) for status in SessionStatus) == requests.SESSION_STATUSES
    assert str(SessionStatus.HANDOFF) == requests.AGENT_LISTABLE_STATUS


def test_every_workflow_error_a_lambda_raises_is_named_by_its_class() -> None:
    # Step Functions names a Lambda's error by the exception's class name.
    assert onboarding.ConnectionNotReady.__name__ == workflows.CONNECTION_NOT_READY == "ConnectionNotReady"
    assert workflows.ConditionalCheckFailed.__name__ == workflows.CONDITIONAL_CHECK_FAILED
    assert workflows.ReassignmentLimitReached.__name__ == workflows.REASSIGNMENT_LIMIT_REACHED
    # The store's own error keeps the name every Task of the app retries.
    assert errors.BatchWriteIncomplete.__name__ == workflows.BATCH_WRITE_INCOMPLETE

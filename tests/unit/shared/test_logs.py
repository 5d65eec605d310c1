"""lambdas.shared.logs: no e-mail address, phone number or message text reaches a function's log line."""

from __future__ import annotations

import ast
import io
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools import Logger

from lambdas.shared import logs
from lambdas.shared.logs import EMAIL_MASK, PHONE_MASK, WITHHELD, masked_formatter, redact, redact_text

LAMBDAS = Path(__file__).resolve().parents[3] / "lambdas"


def logged(emit: Any) -> dict[str, Any]:
    """The one JSON line a fresh masked Logger writes when ``emit(logger)`` runs."""
    stream = io.StringIO()
    logger = Logger(service=f"masking-{uuid.uuid4().hex}", stream=stream, logger_formatter=masked_formatter())
    emit(logger)
    line: dict[str, Any] = json.loads(stream.getvalue().strip())
    return line


@pytest.mark.parametrize(
    "address",
    ["alice@example.com", "Bob.Smith+shop@mail.example.co.uk", "oneil@example.ie", "x_y-z@sub.domain.jp"],
)
def test_e_mail_addresses_are_masked_wherever_they_stand(address: str) -> None:
    assert redact_text(f"write to {address}, thanks") == f"write to {EMAIL_MASK}, thanks"
    assert redact_text(f"<{address}>") == f"<{EMAIL_MASK}>"


@pytest.mark.parametrize(
    "phone",
    [
        "+44 20 7946 0958",  # United Kingdom, international
        "+1-202-555-0173",  # United States, dashes
        "+1 (202) 555-0173",
        "(555) 010-0199",  # national, brackets
        "555-010-0199",
        "555.010.0199",
        "+81 3-1234-5678",  # Japan
        "+49 (0)30 1234567",  # Germany, trunk zero in brackets
        "06 12 34 56 78",  # France, pairs
        "+33612345678",  # no separators, international
        "07700900123",  # United Kingdom mobile, national without separators
        "020 7946 0958",
    ],
)
def test_phone_numbers_in_international_and_national_formats_are_masked(phone: str) -> None:
    assert redact_text(f"call me on {phone} tonight") == f"call me on {PHONE_MASK} tonight"
    assert redact_text(f"tel:{phone}") == f"tel:{PHONE_MASK}"


@pytest.mark.parametrize(
    "kept",
    [
        "epoch 1764281234",
        "sequence 000000000000000000001",
        "2026-11-27 22:25:48,123+0000",
        "2026-11-27T22:25:48Z",
        "SESSION#3f2a9c1e-1234-5678-9abc-def012345678",
        "TURN#0000000001",
        "123e4567-e89b-12d3-4567-426614174000",
        "took 0.12345678 s",
        "127.0.0.1",
        "turn 12 of 40",
    ],
)
def test_ids_times_and_counts_stay_readable(kept: str) -> None:
    assert redact_text(kept) == kept


def test_text_fields_are_withheld_at_any_depth_and_other_values_are_masked() -> None:
    value = {
        "session_id": "s-1",
        "text": "my number is 1234",
        "frame": {"type": "message", "Body": "anything at all", "to": "alice@example.com"},
        "turns": [{"role": "user", "content": "hello"}],
        "recipients": ["bob@example.com", "+44 20 7946 0958"],
        "count": 3,
        "summary": None,
    }
    assert redact(value) == {
        "session_id": "s-1",
        "text": WITHHELD,
        "frame": {"type": "message", "Body": WITHHELD, "to": EMAIL_MASK},
        "turns": WITHHELD,
        "recipients": [EMAIL_MASK, PHONE_MASK],
        "count": 3,
        "summary": None,
    }


def test_every_text_field_the_product_logs_is_in_the_list() -> None:
    assert {"text", "body", "content", "resolution", "summary", "summary_text", "prompt", "reply"} <= logs.TEXT_FIELDS


def test_a_logger_line_masks_its_message_extras_and_appended_keys() -> None:
    def emit(logger: Logger) -> None:
        logger.append_keys(requester="root@example.com")
        logger.info(
            "mailing alice@example.com",
            extra={"customer": {"phone": "+1 202-555-0173", "text": "Frieren volume 3?"}, "turn": 4},
        )

    line = logged(emit)

    assert line["message"] == f"mailing {EMAIL_MASK}"
    assert line["requester"] == EMAIL_MASK
    assert line["customer"] == {"phone": PHONE_MASK, "text": WITHHELD}
    assert line["turn"] == 4
    assert line["level"] == "INFO"


def test_a_line_leaves_out_the_functions_name_arn_and_memory_but_keeps_the_request_and_cold_start() -> None:
    # Given a handler's line, with the Lambda context Powertools injects into every line
    class Context:
        function_name = "MangaAssist-dev-Api-ChatApiWsMessage"
        memory_limit_in_mb = 256
        invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:MangaAssist-dev-Api-ChatApiWsMessage"
        aws_request_id = "f2f11c27-419b-4714-9ecc-acf98bd6c35f"

    def emit(logger: Logger) -> None:
        logger.inject_lambda_context(lambda event, context: logger.info("message handled"))({}, Context())

    line = logged(emit)
    # Then what the log group and Lambda's REPORT line already say is not repeated on the line
    assert not {"function_name", "function_arn", "function_memory_size"} & set(line)
    assert line["function_request_id"] == "f2f11c27-419b-4714-9ecc-acf98bd6c35f"
    assert "cold_start" in line
    assert line["message"] == "message handled"


def test_an_exceptions_message_and_traceback_are_masked() -> None:
    def emit(logger: Logger) -> None:
        try:
            raise ValueError("bad address alice@example.com for +44 20 7946 0958")
        except ValueError:
            logger.exception("request refused")

    line = logged(emit)

    dumped = json.dumps(line)
    assert "alice@example.com" not in dumped
    assert "7946" not in dumped
    assert f"bad address {EMAIL_MASK} for {PHONE_MASK}" in line["exception"]
    assert line["exception_name"] == "ValueError"


def test_every_functions_logger_is_built_with_the_masking_formatter() -> None:
    # Powertools configures a service's logger once: one site without the formatter would log raw lines.
    unmasked = []
    for path in LAMBDAS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Logger":
                keywords = {k.arg: k.value for k in node.keywords}
                child = isinstance(keywords.get("child"), ast.Constant) and keywords["child"].value is True
                formatter = keywords.get("logger_formatter")
                masked = isinstance(formatter, ast.Call) and getattr(formatter.func, "id", None) == "masked_formatter"
                if not (child or masked):
                    unmasked.append(f"{path.relative_to(LAMBDAS.parent)}:{node.lineno}")
    assert unmasked == []

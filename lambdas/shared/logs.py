"""The functions' one Logger formatter: no e-mail address, phone number or message text in a log line.

Every function's ``Logger`` is built with :func:`masked_formatter` (``Logger(logger_formatter=
masked_formatter())``), so whatever a handler logs passes through :func:`redact` just before it
is written: the message, every ``extra`` value at any depth, the appended keys, and an
exception's message and traceback (a validation error may echo what the caller sent).

- Values under a key of :data:`TEXT_FIELDS` (what a customer, an agent or the model wrote) are
  replaced by :data:`WITHHELD`, whatever they hold.
- In every other string, e-mail addresses become :data:`EMAIL_MASK` and phone numbers
  :data:`PHONE_MASK`. A phone number is a run of 8 to 15 digits that starts with ``+``, or is
  grouped by spaces, dots, dashes or brackets, or is a national number with its leading ``0``;
  a bare run of digits that is none of these (an epoch second, a stream sequence number) and an
  ISO date or time stay as they are, so the ids and times that make a log line useful survive.

Lines leave out three keys Powertools' ``inject_lambda_context`` adds to every one of them:
:data:`DROPPED_KEYS`, the function's name, ARN and memory size. Each function logs to its own
log group, named after it, and Lambda's own ``REPORT`` line of each invocation states the
memory; CloudWatch Logs bills every byte ingested, and these were about 230 bytes of each line.

Powertools configures a logger once per service name and process: the first ``Logger`` of a
service sets its formatter, so every construction site uses this one, and child loggers
(``Logger(child=True)``) write through their parent's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter
from aws_lambda_powertools.logging.types import LogRecord

#: Keys whose values are message text: replaced whole, at any depth (compared in lower case).
TEXT_FIELDS: Final = frozenset(
    {
        "text",
        "body",
        "content",
        "message_text",
        "prompt",
        "reply",
        "answer",
        "resolution",
        "summary",
        "summary_text",
        "transcript",
        "turns",
        "note",
        "notes",
        "greeting",
    }
)

#: Keys of Powertools' Lambda context that a line does not repeat (see the module docstring).
DROPPED_KEYS: Final = frozenset({"function_name", "function_arn", "function_memory_size"})

WITHHELD: Final = "[withheld]"
EMAIL_MASK: Final = "[email]"
PHONE_MASK: Final = "[phone]"

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
# A candidate: digits with the separators phone numbers are written with, not inside a word or id.
_PHONE_CANDIDATE = re.compile(r"(?<![\w+\-/#.])\+?\(?\d[\d ().\-/]{5,}\d\)?(?![\w\-/#])")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_SEPARATORS = re.compile(r"[ ().\-/]")
_MIN_DIGITS, _MAX_DIGITS = 8, 15


def _phone_or_not(match: re.Match[str]) -> str:
    candidate = match.group(0)
    digits = sum(c.isdigit() for c in candidate)
    if not _MIN_DIGITS <= digits <= _MAX_DIGITS or _ISO_DATE.search(candidate):
        return candidate
    if candidate.startswith("+"):
        return PHONE_MASK
    separators = _SEPARATORS.findall(candidate)
    if separators and separators != ["."]:  # one dot alone is a decimal number
        return PHONE_MASK
    if not separators and candidate.startswith("0") and digits in (10, 11):
        return PHONE_MASK  # a national number written without spaces: 07700900123
    return candidate


def redact_text(value: str) -> str:
    """``value`` with its e-mail addresses and phone numbers masked."""
    return _PHONE_CANDIDATE.sub(_phone_or_not, _EMAIL.sub(EMAIL_MASK, value))


def redact(value: Any) -> Any:
    """A copy of ``value`` safe to log: text fields withheld, e-mail addresses and phone numbers masked."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {
            key: WITHHELD if str(key).lower() in TEXT_FIELDS and item is not None else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple, set, frozenset)):
        return [redact(item) for item in value]
    if isinstance(value, (bytes, bytearray)):
        return WITHHELD
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return redact_text(str(value))  # what the JSON serialiser would write (an exception: its message)


class MaskingFormatter(LambdaPowertoolsFormatter):
    """Powertools' JSON formatter, writing :func:`redact` of each log line, without :data:`DROPPED_KEYS`."""

    def serialize(self, log: LogRecord) -> str:
        kept = {key: value for key, value in log.items() if key not in DROPPED_KEYS}
        return super().serialize(log=redact(kept))


def masked_formatter() -> MaskingFormatter:
    """A new formatter for a function's ``Logger`` (each Logger owns its formatter's appended keys)."""
    return MaskingFormatter()

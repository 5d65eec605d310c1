"""Bedrock guardrails on the embedded stage: the sensitive-information policy of a deployed ``AWS::Bedrock::Guardrail``.

A Converse or ConverseStream call that names a guardrail (``guardrailConfig``) is screened the way
Bedrock screens it, by the guardrail the stage deployed from its template (the loader in
``embedded.cloudformation.loaders.bedrock`` builds a :class:`GuardrailPolicy` from the resource's
properties):

- the guardrail must exist and the version must be ``DRAFT`` or a published one, else the call
  fails with Bedrock's ``ValidationException`` (``bedrock:ApplyGuardrail`` on the guardrail is
  checked before, by ``embedded.iam``, like every permission);
- in what the model reads, each entity whose input action is ``ANONYMIZE`` is replaced by its
  type in braces (``{EMAIL}``), as Bedrock masks it; one whose input action is ``BLOCK`` blocks
  the call: the answer is the guardrail's blocked input message, the model is never asked;
- in what the model writes, an entity whose output action is ``BLOCK`` replaces the whole reply
  by the blocked output message, ``ANONYMIZE`` masks it; either way a block ends the reply with
  ``stopReason: guardrail_intervened``.

Detected here: e-mail addresses, phone numbers and card numbers (13-19 digits passing the Luhn
check). Bedrock's other entity types (addresses, names, bank accounts, ...) are kept in the policy
and asserted by the template tests, but not detected offline.

Usage::

    policy = GuardrailPolicy.of("gr0abc", "arn:aws:bedrock:...:guardrail/gr0abc", properties)
    masked, blocked = policy.screen_input("mail me at a@b.example")   # "mail me at {EMAIL}", False
    reply, blocked = policy.screen_output("card 4111 1111 1111 1111")  # the blocked message, True
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

#: The stop reason of a call the guardrail blocked.
INTERVENED: Final = "guardrail_intervened"

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_CARD = re.compile(r"(?<![\w-])\d(?:[ -]?\d){12,18}(?![\w-])")
_PHONE = re.compile(r"(?<![\w+])\+?\(?\d[\d ().-]{5,18}\d(?![\w-])")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _luhn(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char) * (2 if position % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


def _is_card(match: str) -> bool:
    digits = re.sub(r"\D", "", match)
    return 13 <= len(digits) <= 19 and _luhn(digits)


def _is_phone(match: str) -> bool:
    digits = re.sub(r"\D", "", match)
    return 8 <= len(digits) <= 15 and not _DATE.match(match.strip())


#: The entity types detected offline, in the order they are looked for (a card before a phone number).
DETECTORS: Final[tuple[tuple[str, re.Pattern[str], Callable[[str], bool]], ...]] = (
    ("EMAIL", _EMAIL, lambda _: True),
    ("CREDIT_DEBIT_CARD_NUMBER", _CARD, _is_card),
    ("PHONE", _PHONE, _is_phone),
)


class GuardrailRefused(Exception):
    """A call Bedrock refuses because of its ``guardrailConfig`` (the error code and message it returns)."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


@dataclass
class GuardrailPolicy:
    """A deployed guardrail: its id, ARN, blocked messages, entity actions and published versions."""

    guardrail_id: str
    arn: str
    blocked_input: str
    blocked_output: str
    #: entity type -> (input action, output action); ``NONE`` where that side is not evaluated
    entities: dict[str, tuple[str, str]]
    versions: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, guardrail_id: str, arn: str, properties: Mapping[str, Any]) -> GuardrailPolicy:
        """The policy of an ``AWS::Bedrock::Guardrail`` from its resolved template properties."""
        entities: dict[str, tuple[str, str]] = {}
        config = properties.get("SensitiveInformationPolicyConfig") or {}
        for entity in config.get("PiiEntitiesConfig") or []:
            action = str(entity["Action"])
            sides = []
            for side in ("Input", "Output"):
                enabled = entity.get(f"{side}Enabled", True) not in (False, "false")
                sides.append(str(entity.get(f"{side}Action", action)) if enabled else "NONE")
            entities[str(entity["Type"])] = (sides[0], sides[1])
        return cls(
            guardrail_id=guardrail_id,
            arn=arn,
            blocked_input=str(properties["BlockedInputMessaging"]),
            blocked_output=str(properties["BlockedOutputsMessaging"]),
            entities=entities,
        )

    def publish(self) -> str:
        """A new published version (CreateGuardrailVersion): "1", then "2", ..."""
        self.versions.append(str(len(self.versions) + 1))
        return self.versions[-1]

    def _screen(self, text: str, side: int) -> tuple[str, bool]:
        blocked = False
        for kind, pattern, accept in DETECTORS:
            action = self.entities.get(kind, ("NONE", "NONE"))[side]
            if action == "NONE":
                continue

            def replace(
                match: re.Match[str], kind: str = kind, action: str = action, accept: Callable[[str], bool] = accept
            ) -> str:
                nonlocal blocked
                if not accept(match.group(0)):
                    return match.group(0)
                if action == "BLOCK":
                    blocked = True
                return "{" + kind + "}"

            text = pattern.sub(replace, text)
        return text, blocked

    def screen_input(self, text: str) -> tuple[str, bool]:
        """``text`` as the model reads it (anonymized), and whether an input ``BLOCK`` entity is in it."""
        return self._screen(text, 0)

    def screen_output(self, text: str) -> tuple[str, bool]:
        """The reply as the caller gets it (masked, or the blocked output message), and whether it was blocked."""
        masked, blocked = self._screen(text, 1)
        return (self.blocked_output, True) if blocked else (masked, False)


def find(guardrails: Mapping[str, GuardrailPolicy], config: Mapping[str, Any]) -> GuardrailPolicy:
    """The guardrail a ``guardrailConfig`` names (by id or ARN, at an existing version), as Bedrock finds it."""
    identifier = str(config.get("guardrailIdentifier", ""))
    version = str(config.get("guardrailVersion", ""))
    policy = next((p for p in guardrails.values() if identifier in (p.guardrail_id, p.arn)), None)
    if policy is None or (version != "DRAFT" and version not in policy.versions):
        raise GuardrailRefused(
            "ValidationException",
            f"The guardrail identifier or version provided in the request does not exist "
            f"(guardrail {identifier!r}, version {version!r}).",
        )
    return policy


def screen_request(policy: GuardrailPolicy, request: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The request as the model gets it (every message's text anonymized), and whether the input is blocked."""
    blocked = False
    messages = []
    for message in request.get("messages", []):
        content = []
        for block in message.get("content", []):
            if "text" in block:
                text, hit = policy.screen_input(str(block["text"]))
                blocked = blocked or hit
                block = {**block, "text": text}
            content.append(block)
        messages.append({**message, "content": content})
    return {**request, "messages": messages}, blocked

"""Customer pseudonyms: HMAC-SHA256 of the customer id under the stage's secret pseudonym key.

Analytics lines carry a customer's pseudonym, never the id: the same customer has the same
pseudonym in every line of a stage, so analytics can count and follow customers, while nobody
without the key can go back to the id or compute the pseudonym of a given id. The key is the
stage's generated secret (``stacks/pseudonyms.py``), read from Secrets Manager once per container.
Another key (another stage, or a replaced secret) gives other pseudonyms.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any, Final

from lambdas.shared.env import MissingSetting

#: The shortest key accepted: the generated secret has 64 characters.
MIN_KEY_LENGTH: Final = 32


@dataclass(frozen=True)
class Pseudonymiser:
    """Turns customer ids into their pseudonyms under one key."""

    key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.key) < MIN_KEY_LENGTH:
            raise ValueError(f"a pseudonym key needs at least {MIN_KEY_LENGTH} bytes (given {len(self.key)})")

    def __call__(self, customer_id: str) -> str:
        """The customer's pseudonym: 64 hex characters."""
        return hmac.new(self.key, customer_id.encode("utf-8"), hashlib.sha256).hexdigest()


def from_secret(secrets_manager: Any, secret_id: str) -> Pseudonymiser:
    """The pseudonymiser keyed with the string value of the secret ``secret_id``."""
    value = secrets_manager.get_secret_value(SecretId=secret_id).get("SecretString")
    if not isinstance(value, str) or not value:
        raise MissingSetting(f"the pseudonym secret {secret_id} holds no string value")
    return Pseudonymiser(value.encode("utf-8"))

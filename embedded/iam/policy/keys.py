"""The condition keys the evaluator knows, their lookup form, and the values a request gives them.

A key is single-valued or multivalued ("Single-valued vs. multivalued context keys"): a multivalued key's
request value is a set, and a condition on it needs a set operator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

#: A value of a condition key in a request: a sequence (not a str) is a multivalued key's set of values.
ContextValue: TypeAlias = str | bool | int | float | Sequence[str]
Scalar: TypeAlias = str | bool | int | float

_SINGLE_VALUED_KEYS = (
    "aws:SourceArn",
    "aws:SourceAccount",
    "aws:SourceOwner",
    "aws:SecureTransport",
    "aws:PrincipalArn",
    "aws:PrincipalAccount",
    "aws:PrincipalServiceName",
    "aws:PrincipalType",
    "aws:SourceIp",
    "aws:CurrentTime",
    "aws:EpochTime",
    "aws:RequestedRegion",
    "aws:CalledViaFirst",
    "aws:CalledViaLast",
    "aws:ViaAWSService",
    "kms:ViaService",
    "kms:CallerAccount",
    "kms:GrantIsForAWSResource",
    "s3:TlsVersion",
    "s3:x-amz-server-side-encryption",
    "s3:x-amz-server-side-encryption-aws-kms-key-id",
    "s3:prefix",
    "iam:PassedToService",
    "sns:Protocol",
    "sns:Endpoint",
)
#: Keys whose request value is a set ("Single-valued vs. multivalued context keys"): they need a set operator.
_MULTIVALUED_KEYS = ("aws:CalledVia", "kms:EncryptionContextKeys", "kms:GrantOperations")
_ENCRYPTION_CONTEXT_PREFIX = "kms:EncryptionContext:"
#: Every condition key the evaluator knows, plus every ``kms:EncryptionContext:<name>``.
SUPPORTED_CONDITION_KEYS: frozenset[str] = frozenset(_SINGLE_VALUED_KEYS + _MULTIVALUED_KEYS)

_CANONICAL_KEYS = {key.lower(): key for key in SUPPORTED_CONDITION_KEYS}
_MULTIVALUED_LOOKUP = frozenset(key.lower() for key in _MULTIVALUED_KEYS)


def lookup_key(key: str) -> str | None:
    """The context lookup form of a condition key, or None if the key is not supported.

    Key names are case-insensitive, except the ``<name>`` of ``kms:EncryptionContext:<name>``, which AWS
    matches case-sensitively: it is kept as written.
    """
    prefix = _ENCRYPTION_CONTEXT_PREFIX
    if key[: len(prefix)].lower() == prefix.lower() and len(key) > len(prefix):
        return prefix.lower() + key[len(prefix) :]
    lowered = key.lower()
    return lowered if lowered in _CANONICAL_KEYS else None


def is_multivalued(lookup: str) -> bool:
    return lookup in _MULTIVALUED_LOOKUP


def context_values(key: str, lookup: str, value: object) -> tuple[Scalar, ...]:
    if is_multivalued(lookup):
        if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{key} is multivalued: give it a list of strings, not {value!r}")
        return tuple(value)
    if not isinstance(value, str | bool | int | float):
        raise ValueError(f"{key} is single-valued: give it a string, a number or a boolean, not {value!r}")
    return (value,)

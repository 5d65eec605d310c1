"""IAM for the embedded AWS: a standalone, typed evaluator of identity, resource, KMS key and role trust policies.

``decide`` applies the same-account rule, ``decide_kms`` KMS's key-policy rule and ``decide_assume_role`` a role's
trust policy. The evaluator follows AWS's documented rules and never allows by default: what it does not
understand raises ``PolicyError`` (a malformed document) or ``UnsupportedCondition`` (an unknown operator or
condition key, or a policy variable).
"""

from embedded.iam.policy import (
    SUPPORTED_CONDITION_KEYS,
    Condition,
    ContextValue,
    Decision,
    Outcome,
    Policy,
    PolicyError,
    Principal,
    PrincipalSet,
    Request,
    Statement,
    UnsupportedCondition,
    decide,
    decide_assume_role,
    decide_kms,
    principal_context,
)

__all__ = [
    "SUPPORTED_CONDITION_KEYS",
    "Condition",
    "ContextValue",
    "Decision",
    "Outcome",
    "Policy",
    "PolicyError",
    "Principal",
    "PrincipalSet",
    "Request",
    "Statement",
    "UnsupportedCondition",
    "decide",
    "decide_assume_role",
    "decide_kms",
    "principal_context",
]

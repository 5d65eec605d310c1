"""A typed IAM policy evaluator for the embedded AWS: identity, resource, KMS key and role trust policies.

It follows AWS's documented rules (IAM User Guide: the "IAM JSON policy elements" reference, "Condition
operators", "Single-valued vs. multivalued context keys", "Policy evaluation for requests within a single
account"; AWS KMS Developer Guide: "Key policies in AWS KMS") and never allows by default: a document, an
operator, a condition key or a request value it does not understand raises an error instead of deciding.

Deliberately out of scope (each raises rather than being guessed at): cross-account requests, policy
variables, condition keys outside ``SUPPORTED_CONDITION_KEYS``, plain operators on multivalued keys, and
ARN condition values with fewer than six segments. Permissions boundaries, session policies, SCPs, RCPs and
KMS grants are not evaluated: the callers pass none.

This package's face is the evaluator's public surface; its modules, by concern:

- ``document``: the policy document model (``Policy``, ``Statement``) and its parsing;
- ``principals``: who makes a request (``Principal``) and the Principal / NotPrincipal elements;
- ``conditions``: the condition operators, how a Condition block is read and whether it holds;
- ``keys``: the supported condition keys and the values a request gives them;
- ``matching``: wildcards in actions, resources and ARNs;
- ``request``: one request to decide;
- ``decisions``: the rules (``decide``, ``decide_kms``, ``decide_assume_role``) and their ``Decision``;
- ``errors``: ``PolicyError`` and ``UnsupportedCondition``.
"""

from embedded.iam.policy.conditions import Condition
from embedded.iam.policy.decisions import Decision, Outcome, decide, decide_assume_role, decide_kms
from embedded.iam.policy.document import Policy, Statement
from embedded.iam.policy.errors import PolicyError, UnsupportedCondition
from embedded.iam.policy.keys import SUPPORTED_CONDITION_KEYS, ContextValue
from embedded.iam.policy.principals import Principal, PrincipalSet, principal_context
from embedded.iam.policy.request import Request

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

"""The stage's own Bedrock guardrail: personal data out of what the model reads, card numbers out of its replies.

Example::

    guardrail = compose_guardrail(storage, config, encryption_key=storage.key)  # None unless guardrail.create
    function = functions(scope, "Chat", handler, {**env, **guardrail_environment(guardrail)})
    grant_guardrail(function, guardrail)

What it screens (docs/guardrail.md): e-mail addresses, phone numbers and postal addresses are
masked (``{EMAIL}``, ``{PHONE}``, ``{ADDRESS}``) in what the model reads and writes; payment and
account secrets (card numbers, CVVs and expiry dates, bank account numbers, IBANs, PINs and
passwords) are masked in what it reads and block a reply that holds one. Names are left alone:
a manga shop's chat is full of authors' and characters' names, which a name filter would mask
too. The stored turns keep the customer's own words: Bedrock masks its copy of the request.

Its configuration is encrypted with the stage's data key, whose key policy leaves access to IAM
(the account's root principal), so the deploying role may create it and a caller needs only
``kms:Decrypt`` on the key beside ``bedrock:ApplyGuardrail`` on the guardrail, both granted by
:func:`grant_guardrail` ("Set up permissions to use Amazon Bedrock Guardrails", Amazon Bedrock
User Guide: Converse and ConverseStream with a ``guardrailConfig`` need ``bedrock:ApplyGuardrail``
on the guardrail's ARN, and ``kms:Decrypt`` on a customer managed key that encrypts it).
"""

from __future__ import annotations

from typing import Final

from aws_cdk import aws_bedrock as bedrock
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from stacks.config import StageConfig

#: Masked in what the model reads and in what it writes: the customer's contact details.
MASKED: Final = ("EMAIL", "PHONE", "ADDRESS")
#: Masked in what the model reads; a reply that holds one is blocked.
BLOCKED_IN_REPLIES: Final = (
    "CREDIT_DEBIT_CARD_NUMBER",
    "CREDIT_DEBIT_CARD_CVV",
    "CREDIT_DEBIT_CARD_EXPIRY",
    "US_BANK_ACCOUNT_NUMBER",
    "INTERNATIONAL_BANK_ACCOUNT_NUMBER",
    "PIN",
    "PASSWORD",
)


def _entity(kind: str, output_action: str) -> bedrock.CfnGuardrail.PiiEntityConfigProperty:
    return bedrock.CfnGuardrail.PiiEntityConfigProperty(
        type=kind,
        action=output_action,
        input_action="ANONYMIZE",
        input_enabled=True,
        output_action=output_action,
        output_enabled=True,
    )


class ChatGuardrail(Construct):
    """A guardrail (``Resource``) with a sensitive-information policy, and a published version (``Version``).

    The version is what the functions name: a published version never changes, so what a reply
    was screened with is known; an edit of the policy publishes a new one on the next deployment.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str,
        blocked_input_message: str,
        blocked_output_message: str,
        encryption_key: kms.IKey,
    ) -> None:
        super().__init__(scope, construct_id)
        self.encryption_key = encryption_key
        entities = [_entity(kind, "ANONYMIZE") for kind in MASKED]
        entities += [_entity(kind, "BLOCK") for kind in BLOCKED_IN_REPLIES]
        self.guardrail = bedrock.CfnGuardrail(
            self,
            "Resource",
            name=name,
            description="Masks customers' personal data in what the model reads; blocks payment details in replies",
            blocked_input_messaging=blocked_input_message,
            blocked_outputs_messaging=blocked_output_message,
            kms_key_arn=encryption_key.key_arn,
            sensitive_information_policy_config=bedrock.CfnGuardrail.SensitiveInformationPolicyConfigProperty(
                pii_entities_config=entities
            ),
        )
        self.version = bedrock.CfnGuardrailVersion(
            self,
            "Version",
            guardrail_identifier=self.guardrail.attr_guardrail_id,
            description="The version the stage's functions name",
        )

    @property
    def guardrail_arn(self) -> str:
        return self.guardrail.attr_guardrail_arn

    @property
    def environment(self) -> dict[str, str]:
        """What a function that calls the model reads (lambdas/shared/settings.py): the id and the version."""
        return {
            "BEDROCK_GUARDRAIL_ID": self.guardrail.attr_guardrail_id,
            "BEDROCK_GUARDRAIL_VERSION": self.version.attr_version,
        }

    def grant_apply(self, grantee: iam.IGrantable) -> iam.Grant:
        """Naming the guardrail in a model call: ``bedrock:ApplyGuardrail`` on it, ``kms:Decrypt`` on its key."""
        grant = iam.Grant.add_to_principal(
            grantee=grantee, actions=["bedrock:ApplyGuardrail"], resource_arns=[self.guardrail_arn]
        )
        return grant.combine(self.encryption_key.grant_decrypt(grantee))


def compose_guardrail(scope: Construct, config: StageConfig, *, encryption_key: kms.IKey) -> ChatGuardrail | None:
    """The stage's own guardrail when ``guardrail.create`` is on, else None (an existing one, or none).

    None too on a stage without a model: the echo responder makes no model call to screen.
    """
    if not config.guardrail.create or config.bedrock_model_id is None:
        return None
    return ChatGuardrail(
        scope,
        "Guardrail",
        name=f"MangaAssist-{config.name}-chat",
        blocked_input_message=config.guardrail.blocked_input_message,
        blocked_output_message=config.guardrail.blocked_output_message,
        encryption_key=encryption_key,
    )


def guardrail_environment(guardrail: ChatGuardrail | None) -> dict[str, str]:
    """The created guardrail's variables for a function's environment; none without one.

    An existing guardrail's id and version reach every function as stage variables
    (stacks/functions.py), so they are not repeated here.
    """
    return {} if guardrail is None else guardrail.environment


def grant_guardrail(grantee: iam.IGrantable, guardrail: ChatGuardrail | None) -> None:
    """Let ``grantee`` apply the created guardrail (nothing without one; an existing one's grant is
    ``grant_invoke_model(..., guardrail_id=...)``)."""
    if guardrail is not None:
        guardrail.grant_apply(grantee)

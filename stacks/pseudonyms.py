"""The stage's pseudonym key: the secret the analytics lines' customer pseudonyms are keyed with.

One per stage, in the Events stack (``EventsStack.pseudonyms``), beside the stream router, the
one function that reads it. CloudFormation generates the value (nobody ever sees it) and Secrets
Manager keeps it encrypted with the stage's key. The router turns a customer id into
HMAC-SHA256(key, id) (``lambdas/shared/pseudonyms.py``): analytics can count and follow a
customer without learning who they are, and without the key nobody can go back from the
pseudonym to the id, nor compute one for a given id.

Replacing the secret starts new pseudonyms: lines written before and after no longer join on the
customer (docs/security.md, "Personal data in logs and analytics").
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, RemovalPolicy, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

#: The function environment variable that names the secret.
PSEUDONYM_KEY_VARIABLE = "PSEUDONYM_SECRET_ARN"


class PseudonymKey(Construct):
    """A generated 64-character secret encrypted with ``encryption_key``.

    Example::

        pseudonyms = PseudonymKey(self, "Pseudonyms", encryption_key=storage.key, removal_policy=policy)
        pseudonyms.grant_read(router)  # and give the function pseudonyms.environment

    ``removal_policy`` is what deleting the stack does to the secret (a retained stage keeps its
    pseudonyms stable across a re-created stack).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, encryption_key: kms.IKey, removal_policy: RemovalPolicy
    ) -> None:
        super().__init__(scope, construct_id)
        self.encryption_key = encryption_key
        self.secret = secretsmanager.Secret(
            self,
            "Resource",
            description="Keys the customer pseudonyms of the analytics lines (HMAC-SHA256)",
            encryption_key=encryption_key,
            generate_secret_string=secretsmanager.SecretStringGenerator(password_length=64, exclude_punctuation=True),
            removal_policy=removal_policy,
        )
        Validations.of(self.secret).acknowledge(
            Acknowledgment(
                id="AwsSolutions-SMG4",
                reason="Rotating the pseudonym key would split every customer's analytics history in two "
                "(old and new pseudonyms no longer join); it is replaced on purpose, never on a schedule.",
            )
        )
        self.environment: dict[str, str] = {PSEUDONYM_KEY_VARIABLE: self.secret.secret_arn}

    def grant_read(self, grantee: iam.IGrantable) -> None:
        """Read the secret: its value, and Decrypt with its key through Secrets Manager only.

        Granted on the principal's side: ``Secret.grant_read`` would also name the grantee's role
        in the key policy of the stage's key, which lives in the Storage stack (a dependency cycle);
        that key policy already lets the account's IAM policies decrypt through Secrets Manager.
        (The router also decrypts with that key to read the table's stream, which this grant does
        not rely on.)
        """
        iam.Grant.add_to_principal(
            grantee=grantee, actions=["secretsmanager:GetSecretValue"], resource_arns=[self.secret.secret_arn]
        )
        via = f"secretsmanager.{Stack.of(self).region}.amazonaws.com"
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["kms:Decrypt"],
            resource_arns=[self.encryption_key.key_arn],
            conditions={"StringEquals": {"kms:ViaService": via}},
        )

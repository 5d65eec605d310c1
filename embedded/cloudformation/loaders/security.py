"""Loaders of KMS keys and aliases, IAM roles, the policy resources (identity, resource and key policies,
Lambda permissions), and Secrets Manager secrets.
"""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Callable
from typing import Any

from embedded.cloudformation.intrinsics import Deployed, Pseudo
from embedded.cloudformation.loaders.base import LOADERS, Cloud, Loader, json_text, loader, physical_name
from embedded.services.kms import key_id_of


@loader("AWS::KMS::Key")
def _kms_key(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    kms = cloud.client("kms")
    args: dict[str, Any] = {"Description": str(props.get("Description", lid))}
    for prop, arg in (("KeyUsage", "KeyUsage"), ("KeySpec", "KeySpec")):
        if prop in props:
            args[arg] = props[prop]
    if "KeyPolicy" in props:
        args["Policy"] = json_text(props["KeyPolicy"])
    # The same id at every deploy, like the stage's physical names (embedded.services.kms).
    with key_id_of(f"{pseudo.account}/{pseudo.region}/{pseudo.stack_name}/{lid}"):
        meta = kms.create_key(**args)["KeyMetadata"]
    if props.get("EnableKeyRotation"):
        kms.enable_key_rotation(KeyId=meta["KeyId"])
    return Deployed(lid, "AWS::KMS::Key", meta["KeyId"], {"Arn": meta["Arn"], "KeyId": meta["KeyId"]})


@loader("AWS::IAM::Role")
def _iam_role(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("RoleName") or physical_name(pseudo.stack_name, lid, max_length=64))
    role = cloud.client("iam").create_role(
        RoleName=name,
        Path=str(props.get("Path", "/")),
        AssumeRolePolicyDocument=json_text(props["AssumeRolePolicyDocument"]),
    )["Role"]
    return Deployed(lid, "AWS::IAM::Role", name, {"Arn": role["Arn"], "RoleId": role["RoleId"]})


def _policy_only(resource_type: str, ref: Callable[[Cloud, Pseudo, str, dict[str, Any]], str]) -> Loader:
    """A policy resource: nothing to create on moto (whose IAM does not enforce), its id for ``Ref``.

    ``embedded.iam.authority`` reads every policy of the deployed stacks and enforces them.
    """

    def load(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
        return Deployed(lid, resource_type, ref(cloud, pseudo, lid, props), {}, dict(props))

    return load


def _managed_policy_arn(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> str:
    name = str(props.get("ManagedPolicyName") or physical_name(pseudo.stack_name, lid, max_length=128))
    return f"arn:aws:iam::{cloud.account}:policy{props.get('Path', '/')}{name}"


def _generated_id(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> str:
    return physical_name(pseudo.stack_name, lid)


LOADERS["AWS::IAM::Policy"] = _policy_only(
    "AWS::IAM::Policy", lambda c, p, lid, props: str(props.get("PolicyName") or physical_name(p.stack_name, lid))
)
LOADERS["AWS::IAM::ManagedPolicy"] = _policy_only("AWS::IAM::ManagedPolicy", _managed_policy_arn)
LOADERS["AWS::KMS::Alias"] = _policy_only("AWS::KMS::Alias", lambda c, p, lid, props: str(props["AliasName"]))
for _policy_type in (
    "AWS::S3::BucketPolicy",
    "AWS::SQS::QueuePolicy",
    "AWS::SNS::TopicPolicy",
    "AWS::Events::EventBusPolicy",
    "AWS::Lambda::Permission",
    "AWS::Logs::ResourcePolicy",
):
    LOADERS[_policy_type] = _policy_only(_policy_type, _generated_id)


@loader("AWS::SecretsManager::Secret")
def _secret(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("Name") or physical_name(pseudo.stack_name, lid, max_length=256))
    value = props.get("SecretString")
    spec = props.get("GenerateSecretString")
    if value is None and spec is not None:
        value = _generate_secret(spec)
    args: dict[str, Any] = {"Name": name, "SecretString": str(value if value is not None else "")}
    if "KmsKeyId" in props:
        args["KmsKeyId"] = str(props["KmsKeyId"])
    arn = cloud.client("secretsmanager").create_secret(**args)["ARN"]
    return Deployed(lid, "AWS::SecretsManager::Secret", arn, {"Id": arn, "Arn": arn})


def _generate_secret(spec: dict[str, Any]) -> str:
    alphabet = string.ascii_letters + string.digits
    if not spec.get("ExcludePunctuation") and not spec.get("ExcludeCharacters"):
        alphabet += "!#$%&()*+,-.:;<=>?[]^_{|}~"
    excluded = str(spec.get("ExcludeCharacters", ""))
    alphabet = "".join(c for c in alphabet if c not in excluded)
    if spec.get("ExcludeUppercase"):
        alphabet = "".join(c for c in alphabet if not c.isupper())
    if spec.get("ExcludeLowercase"):
        alphabet = "".join(c for c in alphabet if not c.islower())
    if spec.get("ExcludeNumbers"):
        alphabet = "".join(c for c in alphabet if not c.isdigit())
    generated = "".join(secrets.choice(alphabet) for _ in range(int(spec.get("PasswordLength", 32))))
    if "SecretStringTemplate" in spec and "GenerateStringKey" in spec:
        document = json.loads(str(spec["SecretStringTemplate"]))
        document[str(spec["GenerateStringKey"])] = generated
        return json.dumps(document)
    return generated

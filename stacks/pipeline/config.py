"""The delivery pipeline's settings: cdk.json's ``context.pipeline``, validated into a frozen object.

``load_pipeline_config`` checks every key against the stages it promotes (their own settings come
from ``context.stages`` through ``stacks.config``) and fails with the key, the rule and the value
given, as ``StageConfig`` does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

from stacks.config import ConfigError, StageConfig

_ACCOUNT = re.compile(r"^\d{12}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
#: A CodeConnections connection (``codeconnections``, or ``codestar-connections`` for one created
#: before the service's rename): partition, region, account, id.
_CONNECTION_ARN = re.compile(
    r"^arn:aws(-[a-z]+)*:(codeconnections|codestar-connections):([a-z]{2}(-[a-z]+)+-\d):(\d{12}):connection/[0-9a-f-]{36}$"
)
#: ``owner/name`` as GitHub, GitLab and Bitbucket spell a repository.
_REPOSITORY = re.compile(r"^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")
#: A branch name git accepts, kept to the characters a CodePipeline trigger filter takes literally.
_BRANCH = re.compile(r"^(?!.*\.\.)(?!/)(?!.*/$)[A-Za-z0-9._/-]{1,200}$")
_OIDC_PROVIDER_ARN = re.compile(r"^arn:aws(-[a-z]+)*:iam::\d{12}:oidc-provider/token\.actions\.githubusercontent\.com$")


@dataclass(frozen=True)
class PipelineConfig:
    """Where the pipeline runs, what it watches, whom it tells, and the two stages it promotes.

    ``dev_stage`` is deployed first and proven by the smoke story, which creates users and
    sessions, so it must be a stage that does not retain data; ``prod_stage`` follows a manual
    approval and must be one that does. A stage that pins no account or region in
    ``context.stages`` is deployed to the pipeline's own.
    """

    account: str
    region: str
    #: The CodeConnections connection to the repository, in the pipeline's account and region.
    connection_arn: str
    #: ``owner/name`` of the repository the connection reads, and of the GitHub repository whose
    #: pull requests may read the dev stage's deployed templates (docs/delivery.md).
    repository: str
    branch: str = "main"
    #: Who hears of a failed run and of an approval waiting: an e-mail subscription on the
    #: pipeline's operations topic. Defaults to nobody (subscribe on-call tooling to the topic).
    alarm_email: str | None = None
    dev_stage: str = "dev"
    prod_stage: str = "prod"
    #: The dev account's existing IAM OIDC provider for GitHub Actions. Defaults to none: the dev
    #: access stack creates it (an account holds one provider per issuer URL).
    github_oidc_provider_arn: str | None = None


def _fail(key: str, rule: str, given: Any) -> ConfigError:
    return ConfigError(f"pipeline: {key} {rule} (given {given!r})")


def load_pipeline_config(raw: Any, stages: Mapping[str, StageConfig]) -> PipelineConfig:
    """Validate cdk.json's ``pipeline`` block against the stages it promotes."""
    if not isinstance(raw, dict):
        raise ConfigError(
            "cdk.json context 'pipeline' must be an object with the pipeline's account, region, "
            f"connection_arn and repository (given {type(raw).__name__})"
        )
    known = {f.name for f in fields(PipelineConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"pipeline: unknown keys {unknown}; allowed keys are {sorted(known)}")
    missing = sorted(f.name for f in fields(PipelineConfig) if f.default is MISSING and f.name not in raw)
    if missing:
        raise ConfigError(f"pipeline: missing keys {missing}")
    for key, value in raw.items():
        if value is not None and not isinstance(value, str):
            raise _fail(key, "must be a string", value)
    config = PipelineConfig(**raw)
    _validate(config, stages)
    return config


def _validate(c: PipelineConfig, stages: Mapping[str, StageConfig]) -> None:
    if not _ACCOUNT.fullmatch(c.account):
        raise _fail("account", "must be a 12-digit AWS account id", c.account)
    if not _REGION.fullmatch(c.region):
        raise _fail("region", "must be an AWS region such as eu-west-1", c.region)
    match = _CONNECTION_ARN.fullmatch(c.connection_arn)
    if match is None:
        raise _fail(
            "connection_arn",
            "must be a CodeConnections ARN like arn:aws:codeconnections:<region>:<account>:connection/<uuid>",
            c.connection_arn,
        )
    if (match.group(3), match.group(5)) != (c.region, c.account):
        raise _fail(
            "connection_arn",
            f"must be a connection in the pipeline's account and region ({c.account}, {c.region})",
            c.connection_arn,
        )
    if not _REPOSITORY.fullmatch(c.repository):
        raise _fail("repository", "must be owner/name", c.repository)
    if not _BRANCH.fullmatch(c.branch):
        raise _fail("branch", "must be a branch name such as main", c.branch)
    if c.alarm_email is not None and not _EMAIL.fullmatch(c.alarm_email):
        raise _fail("alarm_email", "must be an e-mail address", c.alarm_email)
    if c.github_oidc_provider_arn is not None and not _OIDC_PROVIDER_ARN.fullmatch(c.github_oidc_provider_arn):
        raise _fail(
            "github_oidc_provider_arn",
            "must be the ARN of an IAM OIDC provider for token.actions.githubusercontent.com",
            c.github_oidc_provider_arn,
        )
    if c.dev_stage == c.prod_stage:
        raise _fail("dev_stage/prod_stage", "must name two different stages", (c.dev_stage, c.prod_stage))
    for key in ("dev_stage", "prod_stage"):
        name = getattr(c, key)
        if name not in stages:
            raise _fail(key, f"must name a stage of cdk.json's context.stages ({sorted(stages)})", name)
    if stages[c.dev_stage].is_production:
        raise _fail(
            "dev_stage",
            "must be a stage that does not retain data: the smoke story creates users and sessions in it",
            c.dev_stage,
        )
    if not stages[c.prod_stage].is_production:
        raise _fail(
            "prod_stage",
            "must be a stage that retains its data (removal_policy retain): it is what the approval guards",
            c.prod_stage,
        )
    for name in (c.dev_stage, c.prod_stage):
        region = stages[name].region
        if region is not None and region != c.region:
            raise _fail(
                "region",
                f"must be the region stage '{name}' pins ({region}): the pipeline deploys across accounts, "
                "not across regions",
                c.region,
            )


def stage_account(config: PipelineConfig, stage: StageConfig) -> str:
    """The account the pipeline deploys ``stage`` to: the one it pins, else the pipeline's."""
    return stage.account or config.account

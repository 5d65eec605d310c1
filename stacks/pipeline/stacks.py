"""The delivery stage's two stacks: the pipeline (pipeline account) and the dev account's access roles."""

from __future__ import annotations

from aws_cdk import Stack, pipelines
from constructs import Construct

from stacks.pipeline.config import PipelineConfig, stage_account
from stacks.pipeline.pipeline import DeliveryPipeline, TargetRole
from stacks.pipeline.roles import PullRequestDiffRole, SmokeRole, lookup_role_arn, smoke_role_name
from stacks.stage import MangaAssistStage


class AccessStack(Stack):
    """Deployed by hand into the dev stage's account: the smoke role and the pull requests' diff role."""

    def __init__(self, scope: Construct, construct_id: str, *, config: PipelineConfig, **kwargs: object) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.smoke: SmokeRole = SmokeRole(self, "SmokeRole", stage=config.dev_stage, trusted_account=config.account)
        self.pull_request_diff: PullRequestDiffRole = PullRequestDiffRole(
            self, "PullRequestDiff", repository=config.repository, provider_arn=config.github_oidc_provider_arn
        )


class PipelineStack(Stack):
    """Deployed by hand once into the pipeline's account; the pipeline updates it from then on."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PipelineConfig,
        dev: MangaAssistStage,
        prod: MangaAssistStage,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        dev_account, prod_account = stage_account(config, dev.config), stage_account(config, prod.config)
        self.delivery: DeliveryPipeline = DeliveryPipeline(
            self,
            "Pipeline",
            source=pipelines.CodePipelineSource.connection(
                config.repository, config.branch, connection_arn=config.connection_arn
            ),
            dev_stage=dev,
            prod_stage=prod,
            dev_smoke_role=TargetRole(
                f"arn:{self.partition}:iam::{dev_account}:role/{smoke_role_name(dev.config.name)}", config.region
            ),
            prod_lookup_role=TargetRole(lookup_role_arn(prod_account, config.region, self.partition), config.region),
            alarm_email=config.alarm_email,
        )

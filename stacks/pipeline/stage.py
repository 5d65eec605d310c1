"""The delivery stage, ``MangaAssist-delivery``: what runs the stages rather than what they run.

It holds the pipeline's stack (``MangaAssist-delivery-Pipeline``, in the pipeline's account) and
the access stack (``MangaAssist-delivery-Access``, in the dev stage's account), both deployed by
hand once (docs/delivery.md), and is checked by cdk-nag, cfn-lint and checkov as the app's own
stages are: ``make synth-all`` synthesizes it next to them.
"""

from __future__ import annotations

from aws_cdk import Environment, Stage, Tags, Validations
from constructs import Construct

from stacks.config import ConfigError
from stacks.pipeline.config import PipelineConfig, stage_account
from stacks.pipeline.stacks import AccessStack, PipelineStack
from stacks.stage import MangaAssistStage, nag_checks

DELIVERY_STAGE = "delivery"


class DeliveryStage(Stage):
    """The pipeline that promotes ``config.dev_stage`` to ``config.prod_stage``, and the roles it needs."""

    def __init__(
        self,
        scope: Construct,
        config: PipelineConfig,
        *,
        stages: list[MangaAssistStage],
        nag: bool = True,
    ) -> None:
        super().__init__(scope, f"MangaAssist-{DELIVERY_STAGE}")
        by_name = {stage.config.name: stage for stage in stages}
        missing = [name for name in (config.dev_stage, config.prod_stage) if name not in by_name]
        if missing:
            raise ConfigError(
                f"the pipeline deploys {config.dev_stage} and {config.prod_stage}: select both "
                f"(-c stage={config.dev_stage},{config.prod_stage}; missing {missing})"
            )
        dev, prod = by_name[config.dev_stage], by_name[config.prod_stage]
        prefix = f"MangaAssist-{DELIVERY_STAGE}"
        self.access: AccessStack = AccessStack(
            self,
            "Access",
            stack_name=f"{prefix}-Access",
            description="MangaAssist delivery: the dev account's roles for the pipeline's smoke step and pull requests",
            env=Environment(account=stage_account(config, dev.config), region=config.region),
            config=config,
        )
        self.pipeline: PipelineStack = PipelineStack(
            self,
            "Pipeline",
            stack_name=f"{prefix}-Pipeline",
            description="MangaAssist delivery: the pipeline from the repository to dev and, once approved, prod",
            env=Environment(account=config.account, region=config.region),
            config=config,
            dev=dev,
            prod=prod,
        )
        Tags.of(self).add("Project", "MangaAssist")
        Tags.of(self).add("Stage", DELIVERY_STAGE)
        if nag:
            Validations.of(self).add_plugins(*nag_checks(self))

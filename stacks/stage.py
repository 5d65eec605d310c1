"""One deployable stage of MangaAssist: the four stacks, wired, tagged and checked by cdk-nag."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from aws_cdk import App, Environment, IPolicyValidationPlugin, Stage, Tags, Validations
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from stacks.api_stack import ApiStack
from stacks.config import StageConfig
from stacks.events_stack import EventsStack
from stacks.orchestration_stack import OrchestrationStack
from stacks.outputs import add_stage_outputs
from stacks.storage_stack import StorageStack

#: CDK's built-in "CloudFormation Validate" plugin checks each template against the resource
#: schemas. cfn-lint checks the same schemas (and more) over every template of both stages in
#: `make cfn-lint`, at zero findings; the built-in engine adds about 5 s of CPU to every synth
#: of one stage (2-3 s to start, 2-3 s to check the four templates), half of the app's own
#: synth cost. cdk-nag stays on in every synth (:class:`MangaAssistStage`).
BUILTIN_CLOUDFORMATION_VALIDATION: Final = False


def stage_app(*, context: Mapping[str, Any] | None = None, outdir: str | None = None) -> App:
    """An App for the stages, made as ``app.py`` makes it for ``cdk synth``.

    Whatever synthesizes stages in-process (the tests' stages, among them the one their local
    servers run, the tools and the benchmarks) builds its App here, so it synthesizes what the CLI
    synthesizes and pays what the CLI pays: CDK's built-in template validation stays off
    (:data:`BUILTIN_CLOUDFORMATION_VALIDATION`).
    """
    return App(
        context=dict(context) if context is not None else None,
        outdir=outdir,
        builtin_cloud_formation_validation=BUILTIN_CLOUDFORMATION_VALIDATION,
    )


def nag_checks(stage: Stage) -> list[IPolicyValidationPlugin]:
    """The cdk-nag rule packs a stage runs at synthesis (bench/synth_breakdown.py times them)."""
    return [AwsSolutionsChecks(stage, verbose=True)]


class MangaAssistStage(Stage):
    """Storage <- Events <- Orchestration <- Api, named MangaAssist-<stage>-<Part>.

    ``nag`` runs the AwsSolutions checks on the stage (synth fails on any unacknowledged
    finding); tests that only read templates may turn it off to save time.
    """

    def __init__(self, scope: Construct, config: StageConfig, *, nag: bool = True) -> None:
        env = Environment(account=config.account, region=config.region) if config.account else None
        super().__init__(scope, f"MangaAssist-{config.name}", env=env)
        self.config = config
        prefix = f"MangaAssist-{config.name}"

        self.storage = StorageStack(self, "Storage", stack_name=f"{prefix}-Storage", config=config)
        self.events = EventsStack(self, "Events", stack_name=f"{prefix}-Events", config=config, storage=self.storage)
        self.orchestration = OrchestrationStack(
            self,
            "Orchestration",
            stack_name=f"{prefix}-Orchestration",
            config=config,
            storage=self.storage,
            events=self.events,
        )
        self.api = ApiStack(
            self,
            "Api",
            stack_name=f"{prefix}-Api",
            config=config,
            storage=self.storage,
            events=self.events,
            orchestration=self.orchestration,
        )

        add_stage_outputs(self)

        Tags.of(self).add("Project", "MangaAssist")
        Tags.of(self).add("Stage", config.name)
        for key, value in config.tags.items():
            Tags.of(self).add(key, value)
        if nag:
            Validations.of(self).add_plugins(*nag_checks(self))

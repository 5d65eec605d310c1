"""The delivery pipeline: one commit tested once, deployed to dev, proven, approved, deployed to prod.

Waves, in order (CDK Pipelines adds Source, Build, UpdatePipeline and Assets before them):

1. ``MangaAssist-<dev>``: the dev stage's four stacks, then ``make smoke STAGE=<dev>`` against
   them, as the dev account's smoke role (``roles.SmokeRole``).
2. ``MangaAssist-<prod>``: a manual approval, then ``make preflight STAGE=<prod>`` with the
   prod account's CDK lookup role (read-only), then the four stacks, then the read-only smoke
   ``make smoke STAGE=<prod> READ_ONLY=1`` with the same read-only role.

The synth step installs exactly as the README does (``make install``: the pinned Python and Node
dependencies into the repository), runs ``make test`` and then ``make synth-pipeline`` (every
stage and this pipeline, into ``cdk.out``). Every CodeBuild step runs on Ubuntu 24.04
(``aws/codebuild/standard:8.0``) with Node.js :data:`NODE_VERSION` and Python
:data:`PYTHON_VERSION`. Failed runs and approvals waiting reach the pipeline's operations topic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Duration, Stack, pipelines
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_codepipeline as codepipeline
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from constructs import Construct

from constructs_lib import AlarmTopic, EncryptionKey, SecureBucket
from stacks.pipeline.nag import Rule, acknowledge_wildcards
from stacks.stage import MangaAssistStage

ROOT = Path(__file__).resolve().parents[2]
#: The runtimes of every CodeBuild step (``runtime-versions`` of the standard:8.0 image):
#: Node 20 is end of life for the jsii runtime; Python is the version the code is checked for.
NODE_VERSION = "22"
PYTHON_VERSION = "3.11"
BUILD_IMAGE = codebuild.LinuxBuildImage.STANDARD_8_0
#: Days a run's artifacts (source, cloud assembly) stay in the artifact bucket.
ARTIFACT_RETENTION_DAYS = 90
_LOGS = r"arn:[a-z-]+:logs:[a-z0-9-]+:\d{12}:log-group:/aws/codebuild/"
_REPORTS = r"arn:[a-z-]+:codebuild:[a-z0-9-]+:\d{12}:report-group/"
#: Why each wildcard CDK Pipelines writes into its roles' policies is acceptable (stacks/pipeline/nag.py).
CDK_PIPELINES_WILDCARDS = (
    Rule(
        r"Action::s3:(Abort|DeleteObject|GetBucket|GetObject|List)\*",
        "CDK's grant on the pipeline's own artifact bucket (grantRead, grantReadWrite): the variants of "
        "reading, writing and cleaning up artifacts; the statement names that one bucket and its objects.",
    ),
    Rule(
        r"Resource::<\w*Artifacts\w*\.Arn>/\*",
        "Objects of the pipeline's own artifact bucket, which CodePipeline names per execution: no narrower "
        "key is known at synth.",
    ),
    Rule(
        r"Action::kms:(GenerateDataKey|ReEncrypt)\*",
        "CDK's grant on the pipeline's own key (the statement names that one key): the variants of "
        "GenerateDataKey and ReEncrypt S3 uses for encrypted artifacts.",
    ),
    Rule(
        rf"Resource::{_LOGS}<\w+>:\*",
        "The log streams of this CodeBuild project's own log group (/aws/codebuild/<project>), one per build.",
    ),
    Rule(
        rf"Resource::{_REPORTS}<\w+>-\*",
        "Report groups named after this CodeBuild project, which CodeBuild creates per report.",
    ),
    Rule(
        r"Resource::arn:\*:iam::\d{12}:role/\*",
        "CDK Pipelines' self-mutation (cdk deploy of this stack) may assume only the pipeline account's CDK "
        "bootstrap roles: the statement's condition requires iam:ResourceTag/aws-cdk:bootstrap-role to be "
        "deploy, file-publishing or image-publishing.",
        path=r".*/UpdatePipeline/SelfMutation/Role/.*",
    ),
    Rule(
        r"Resource::\*",
        "CDK Pipelines' self-mutation reads the bootstrap stack and lists its staging bucket "
        "(cloudformation:DescribeStacks, s3:ListBucket), found by name at run time; read-only.",
        path=r".*/UpdatePipeline/SelfMutation/Role/.*",
    ),
    Rule(
        r"Resource::\*",
        "CDK Pipelines' asset role starts, watches and stops the asset builds (codebuild:StartBuild, "
        "BatchGetBuilds, StopBuild); what a build may do is the file-publishing bootstrap role's, the one "
        "role it may assume.",
        path=r".*/Assets/FileRole/.*",
    ),
    Rule(
        rf"Resource::({_LOGS}|{_REPORTS})\*",
        "CDK Pipelines' asset role is shared by the asset projects, whose names CloudFormation generates: "
        "CodeBuild logs and report groups of this account and region only.",
        path=r".*/Assets/FileRole/.*",
    ),
)
#: Where the steps' AWS profile points (``aws configure set``): the role of the target account.
TARGET_PROFILE = "target"


def pinned_cdk_cli_version() -> str:
    """The CDK CLI version package.json pins: the self-mutation step installs the same one."""
    return str(json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"])


@dataclass(frozen=True)
class TargetRole:
    """A role in a stage's account that a verification step assumes, and where it is."""

    arn: str
    region: str


def target_profile_commands() -> list[str]:
    """Shell lines that point the ``target`` AWS profile at ``$TARGET_ROLE_ARN`` in ``$TARGET_REGION``.

    CodeBuild hands the step's own credentials to the container (``EcsContainer``); boto3 and the
    AWS CLI then assume the target role from them for every command run with ``AWS_PROFILE=target``.
    """
    return [
        f'aws configure set profile.{TARGET_PROFILE}.role_arn "$TARGET_ROLE_ARN"',
        f"aws configure set profile.{TARGET_PROFILE}.credential_source EcsContainer",
        f'aws configure set profile.{TARGET_PROFILE}.region "$TARGET_REGION"',
        f"aws configure set profile.{TARGET_PROFILE}.role_session_name mangaassist-pipeline",
    ]


class DeliveryPipeline(Construct):
    """A self-mutating CDK pipeline that promotes ``dev_stage`` to ``prod_stage`` behind an approval.

    Example::

        DeliveryPipeline(self, "Delivery", source=pipelines.CodePipelineSource.connection(...),
                         dev_stage=dev, prod_stage=prod,
                         dev_smoke_role=TargetRole(smoke_arn, "eu-west-1"),
                         prod_lookup_role=TargetRole(lookup_arn, "eu-west-1"),
                         alarm_email="oncall@example.com")

    Args:
        source: where the commits come from (a CodeConnections connection).
        dev_stage: deployed first, then proven by ``make smoke``.
        prod_stage: deployed after the approval and ``make preflight``, then smoke-tested read-only.
        dev_smoke_role: what the dev smoke step assumes in the dev account.
        prod_lookup_role: what the prod preflight and smoke steps assume in the prod account: CDK's
            lookup role (read-only), so neither can change production whatever it runs.
        alarm_email: subscribed to the operations topic. Defaults to no subscription.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        source: pipelines.CodePipelineSource,
        dev_stage: MangaAssistStage,
        prod_stage: MangaAssistStage,
        dev_smoke_role: TargetRole,
        prod_lookup_role: TargetRole,
        alarm_email: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.key: kms.Key = EncryptionKey(
            self, "Key", description="MangaAssist delivery pipeline: artifacts and notifications"
        ).key
        self.artifacts: SecureBucket = self._artifact_bucket()
        self.topic: sns.Topic = AlarmTopic(self, "OpsTopic", encryption_key=self.key, email=alarm_email).topic
        _allow_notifications(self.key)
        synth = pipelines.CodeBuildStep(
            "Synth",
            input=source,
            install_commands=["make install"],
            commands=["make test", "make synth-pipeline"],
            primary_output_directory="cdk.out",
        )
        self.pipeline: pipelines.CodePipeline = self._code_pipeline(synth)
        dev_name, prod_name = dev_stage.config.name, prod_stage.config.name
        self.smoke_dev: pipelines.CodeBuildStep = self._verification_step(
            "Smoke", source, dev_smoke_role, f"make smoke STAGE={dev_name}"
        )
        self.approval: pipelines.ManualApprovalStep = pipelines.ManualApprovalStep(
            "PromoteToProduction",
            comment=f"{dev_name} is deployed and its smoke story passed. Approve to deploy this commit to {prod_name}.",
        )
        self.preflight: pipelines.CodeBuildStep = self._verification_step(
            "Preflight",
            source,
            prod_lookup_role,
            f"make preflight STAGE={prod_name} REGION={prod_lookup_role.region}",
            # The preflight reads the bootstrap version the synthesized stage asks for.
            cloud_assembly=synth,
        )
        self.preflight.add_step_dependency(self.approval)
        self.smoke_prod: pipelines.CodeBuildStep = self._verification_step(
            "ReadOnlySmoke", source, prod_lookup_role, f"make smoke STAGE={prod_name} READ_ONLY=1"
        )
        self.pipeline.add_stage(dev_stage, post=[self.smoke_dev])
        self.pipeline.add_stage(prod_stage, pre=[self.approval, self.preflight], post=[self.smoke_prod])
        self.pipeline.build_pipeline()
        self.pipeline.pipeline.notify_on(
            "Notifications",
            self.topic,
            events=[
                codepipeline.PipelineNotificationEvents.PIPELINE_EXECUTION_FAILED,
                codepipeline.PipelineNotificationEvents.MANUAL_APPROVAL_NEEDED,
            ],
        )
        self._encrypt_build_output()
        acknowledge_wildcards(self, CDK_PIPELINES_WILDCARDS)

    def _artifact_bucket(self) -> SecureBucket:
        """The artifacts, under the pipeline's key, with access logs of their own."""
        logs = SecureBucket(
            self,
            "AccessLogs",
            access_log_target=True,
            lifecycle_rules=[s3.LifecycleRule(id="ExpireAccessLogs", expiration=Duration.days(365))],
        )
        return SecureBucket(
            self,
            "Artifacts",
            encryption_key=self.key,
            server_access_logs=logs.bucket,
            # A run needs its artifacts while it runs, and CodePipeline's stage rollback those of the
            # last successful run; a rollback older than that is a revert through the pipeline.
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireArtifacts",
                    expiration=Duration.days(ARTIFACT_RETENTION_DAYS),
                    noncurrent_version_expiration=Duration.days(7),
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                )
            ],
        )

    def _code_pipeline(self, synth: pipelines.CodeBuildStep) -> pipelines.CodePipeline:
        """CDK Pipelines' pipeline: self-mutating, V2, its builds on the pinned runtimes."""
        return pipelines.CodePipeline(
            self,
            "Resource",
            synth=synth,
            artifact_bucket=self.artifacts.bucket,
            pipeline_type=codepipeline.PipelineType.V2,
            self_mutation=True,
            cli_version=pinned_cdk_cli_version(),
            publish_assets_in_parallel=False,
            docker_enabled_for_synth=False,
            code_build_defaults=pipelines.CodeBuildOptions(
                build_environment=codebuild.BuildEnvironment(
                    build_image=BUILD_IMAGE, compute_type=codebuild.ComputeType.SMALL, privileged=False
                ),
                partial_build_spec=codebuild.BuildSpec.from_object(
                    {"phases": {"install": {"runtime-versions": {"nodejs": NODE_VERSION, "python": PYTHON_VERSION}}}}
                ),
                timeout=Duration.minutes(30),
            ),
            # make test runs every check over both stages: the most memory and time of any step.
            synth_code_build_defaults=pipelines.CodeBuildOptions(
                build_environment=codebuild.BuildEnvironment(compute_type=codebuild.ComputeType.MEDIUM),
                timeout=Duration.minutes(90),
            ),
        )

    def _verification_step(
        self,
        step_id: str,
        source: pipelines.CodePipelineSource,
        target: TargetRole,
        command: str,
        *,
        cloud_assembly: pipelines.CodeBuildStep | None = None,
    ) -> pipelines.CodeBuildStep:
        """A step that installs as the README does, then runs ``command`` as ``target``'s role."""
        return pipelines.CodeBuildStep(
            step_id,
            input=source,
            additional_inputs={"cdk.out": cloud_assembly} if cloud_assembly is not None else None,
            install_commands=["make install"],
            commands=[*target_profile_commands(), f"AWS_PROFILE={TARGET_PROFILE} {command}"],
            env={"TARGET_ROLE_ARN": target.arn, "TARGET_REGION": target.region},
            role_policy_statements=[iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[target.arn])],
        )

    def _encrypt_build_output(self) -> None:
        """Every CodeBuild project encrypts what it writes with the pipeline's key, not S3's default key."""
        for construct in self.node.find_all():
            if isinstance(construct, codebuild.CfnProject):
                construct.encryption_key = self.key.key_arn


def _allow_notifications(key: kms.IKey) -> None:
    """CodeStar Notifications publishes to the encrypted topic through SNS, which needs the key."""
    stack = Stack.of(key)
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid="AllowCodeStarNotifications",
            principals=[iam.ServicePrincipal("codestar-notifications.amazonaws.com")],
            actions=["kms:Decrypt", "kms:GenerateDataKey*"],
            resources=["*"],
            conditions={"StringEquals": {"kms:ViaService": f"sns.{stack.region}.amazonaws.com"}},
        )
    )

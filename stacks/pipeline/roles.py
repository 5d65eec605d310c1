"""The two roles delivery needs in the dev account besides CDK's bootstrap roles.

- :class:`SmokeRole`: the pipeline's smoke step runs the story against the deployed dev stage,
  which reads the stage's stack outputs and signs in users it creates in the stage's user pool.
  No bootstrap role may do that (the lookup role only reads), so this role may, and nothing more.
- :class:`PullRequestDiffRole`: GitHub Actions assumes it with the workflow's OIDC token (no
  stored keys) for a pull request of one repository, and may only assume the account's CDK
  lookup role, which is what ``cdk diff`` reads the deployed templates with.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Aws, DefaultStackSynthesizer, Duration, Stack, Validations
from aws_cdk import aws_iam as iam
from constructs import Construct

from constructs_lib.nag_findings import resource_finding

GITHUB_ISSUER = "token.actions.githubusercontent.com"
#: The audience ``aws-actions/configure-aws-credentials`` requests for its token.
GITHUB_AUDIENCE = "sts.amazonaws.com"
#: The stage tags every resource of a stage carries (stacks/stage.py).
PROJECT_TAG = "MangaAssist"

#: What the smoke story does with the stage's user pool: the calls ``make mint-token`` makes
#: (tools/mint_token.py), and deleting the users it created.
SMOKE_USER_POOL_ACTIONS = (
    "cognito-idp:AdminAddUserToGroup",
    "cognito-idp:AdminCreateUser",
    "cognito-idp:AdminDeleteUser",
    "cognito-idp:AdminGetUser",
    "cognito-idp:AdminInitiateAuth",
    "cognito-idp:AdminListGroupsForUser",
    "cognito-idp:AdminSetUserPassword",
)


def smoke_role_name(stage: str) -> str:
    """The smoke role's name: fixed, so the pipeline in another account can name its ARN."""
    return f"MangaAssist-{stage}-pipeline-smoke"


PULL_REQUEST_DIFF_ROLE_NAME = "MangaAssist-pull-request-diff"


def lookup_role_arn(account: str, region: str, partition: str = Aws.PARTITION) -> str:
    """The ARN of CDK's bootstrap lookup role (ReadOnlyAccess, no kms:Decrypt) in an environment."""
    return (
        DefaultStackSynthesizer.DEFAULT_LOOKUP_ROLE_ARN.replace("${AWS::Partition}", partition)
        .replace("${Qualifier}", DefaultStackSynthesizer.DEFAULT_QUALIFIER)
        .replace("${AWS::AccountId}", account)
        .replace("${AWS::Region}", region)
    )


class SmokeRole(Construct):
    """The role the pipeline's smoke step assumes in a development stage's account.

    Example::

        SmokeRole(self, "SmokeRole", stage="dev", trusted_account="111111111111")

    Args:
        stage: the stage whose stacks (``MangaAssist-<stage>-*``) and user pool (tagged
            ``Project=MangaAssist``, ``Stage=<stage>``) the role may use.
        trusted_account: the pipeline's account; its principals may assume the role when their
            own policy allows it (the pipeline grants that to its smoke step only).
    """

    def __init__(self, scope: Construct, construct_id: str, *, stage: str, trusted_account: str) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.role: iam.Role = iam.Role(
            self,
            "Resource",
            role_name=smoke_role_name(stage),
            description=f"MangaAssist {stage}: the delivery pipeline's smoke story (stack outputs, test users)",
            assumed_by=iam.AccountPrincipal(trusted_account),
            max_session_duration=Duration.hours(1),
        )
        stage_stacks = stack.format_arn(
            service="cloudformation", resource="stack", resource_name=f"MangaAssist-{stage}-*"
        )
        user_pools = stack.format_arn(service="cognito-idp", resource="userpool", resource_name="*")
        self.policy: iam.Policy = iam.Policy(
            self,
            "Policy",
            roles=[self.role],
            statements=[
                iam.PolicyStatement(
                    sid="ReadStageOutputs", actions=["cloudformation:DescribeStacks"], resources=[stage_stacks]
                ),
                iam.PolicyStatement(
                    sid="ManageStageTestUsers",
                    actions=list(SMOKE_USER_POOL_ACTIONS),
                    resources=[user_pools],
                    conditions={
                        "StringEquals": {"aws:ResourceTag/Project": PROJECT_TAG, "aws:ResourceTag/Stage": stage}
                    },
                ),
            ],
        )
        validations = Validations.of(self.policy)
        validations.acknowledge(
            Acknowledgment(
                id=f"AwsSolutions-IAM5[{resource_finding(self, stage_stacks)}]",
                reason=f"The stage's own stacks, MangaAssist-{stage}-<Part>, whose stack ids CloudFormation assigns.",
            )
        )
        validations.acknowledge(
            Acknowledgment(
                id=f"AwsSolutions-IAM5[{resource_finding(self, user_pools)}]",
                reason=f"The stage's user pool, whose id Cognito assigns at deploy: the statement's condition "
                f"admits only a pool tagged Project={PROJECT_TAG} and Stage={stage}.",
            )
        )


class PullRequestDiffRole(Construct):
    """A role GitHub Actions assumes for pull requests of one repository to run ``cdk diff``.

    Example::

        PullRequestDiffRole(self, "PullRequestDiff", repository="acme/backend")

    Args:
        repository: ``owner/name``; only tokens GitHub issues to this repository's
            ``pull_request`` workflows (subject ``repo:<owner>/<name>:pull_request``) may assume it.
        provider_arn: the account's IAM OIDC provider for GitHub Actions. Defaults to a new one
            (an account holds one per issuer URL: pass the existing one's ARN if it has it).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, repository: str, provider_arn: str | None = None
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        if provider_arn is None:
            provider = iam.OidcProviderNative(
                self, "GitHubProvider", url=f"https://{GITHUB_ISSUER}", client_ids=[GITHUB_AUDIENCE]
            )
            provider_arn = provider.oidc_provider_arn
        self.role: iam.Role = iam.Role(
            self,
            "Resource",
            role_name=PULL_REQUEST_DIFF_ROLE_NAME,
            description=f"GitHub Actions, pull requests of {repository}: cdk diff through the CDK lookup role",
            assumed_by=iam.WebIdentityPrincipal(
                provider_arn,
                conditions={
                    "StringEquals": {
                        f"{GITHUB_ISSUER}:aud": GITHUB_AUDIENCE,
                        f"{GITHUB_ISSUER}:sub": f"repo:{repository}:pull_request",
                    }
                },
            ),
            max_session_duration=Duration.hours(1),
        )
        self.policy: iam.Policy = iam.Policy(
            self,
            "Policy",
            roles=[self.role],
            statements=[
                iam.PolicyStatement(
                    sid="AssumeCdkLookupRole",
                    actions=["sts:AssumeRole"],
                    resources=[lookup_role_arn(stack.account, stack.region, stack.partition)],
                )
            ],
        )

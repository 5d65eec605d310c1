"""A regional WAFv2 web ACL: managed IP reputation, common and known-bad-inputs rule sets, a per-IP rate limit, logs.

Example::

    acl = RegionalWebAcl(self, "WebAcl", rate_limit=1000, log_encryption_key=key)
    acl.associate("RestApi", api.deployment_stage.stage_arn)
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import ArnFormat, Names, RemovalPolicy, Stack
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from constructs_lib.encryption_key import EncryptionKey
from constructs_lib.validation import PropErrors, is_unresolved

_MIN_RATE_LIMIT = 10  # WAFv2's lower bound for a rate-based rule (requests per evaluation window)
_MAX_RATE_LIMIT = 2_000_000_000
_WINDOWS = (60, 120, 300, 600)
#: WAF delivers only to a log group whose name starts with this (WAF developer guide, "CloudWatch Logs").
LOG_GROUP_PREFIX = "aws-waf-logs-"


def _visibility(metric_name: str) -> wafv2.CfnWebACL.VisibilityConfigProperty:
    return wafv2.CfnWebACL.VisibilityConfigProperty(
        cloud_watch_metrics_enabled=True, metric_name=metric_name, sampled_requests_enabled=True
    )


class RegionalWebAcl(Construct):
    """A REGIONAL web ACL that allows by default and blocks what its rules match.

    Rules, in priority order: ``AWSManagedRulesAmazonIpReputationList`` (addresses Amazon threat
    intelligence knows for bots and attacks, blocked), ``AWSManagedRulesCommonRuleSet``
    (OWASP-style protections, every rule in block mode), a rate-based rule that blocks a source
    IP sending more than ``rate_limit`` requests within ``evaluation_window_seconds``, and
    ``AWSManagedRulesKnownBadInputsRuleSet`` (request patterns of known exploits, such as Log4j
    JNDI lookups, every rule in block mode). Capacity: 25 + 700 + 2 + 200 of a web ACL's 1,500 WCUs.

    Every request WAF evaluates is logged to a KMS-encrypted log group named
    ``aws-waf-logs-<unique id>`` (WAF requires the prefix), with the ``redacted_headers`` left out.

    Args:
        rate_limit: requests per IP and window before blocking, 10..2e9. Defaults to 1000. Size
            it for one client: a limit close to the protected API's own throttle lets a handful
            of addresses use all of it.
        evaluation_window_seconds: 60, 120, 300 or 600. Defaults to 300.
        metric_prefix: CloudWatch metric name prefix. Defaults to the construct id.
        log_encryption_key: key of the log group; its key policy must let CloudWatch Logs use it.
            Defaults to a new key, rotated yearly, that only CloudWatch Logs may use as a service.
        log_retention: retention of the log group. Defaults to one week.
        log_removal_policy: of the log group. Defaults to DESTROY (logs age out by retention anyway).
        redacted_headers: request headers WAF writes as ``REDACTED``. Defaults to ``authorization``
            (bearer tokens never reach the logs).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        rate_limit: int = 1000,
        evaluation_window_seconds: int = 300,
        metric_prefix: str | None = None,
        log_encryption_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_WEEK,
        log_removal_policy: RemovalPolicy = RemovalPolicy.DESTROY,
        redacted_headers: Sequence[str] = ("authorization",),
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        errors.check(
            is_unresolved(rate_limit) or _MIN_RATE_LIMIT <= rate_limit <= _MAX_RATE_LIMIT,
            f"rate_limit must be {_MIN_RATE_LIMIT}..{_MAX_RATE_LIMIT} (given {rate_limit})",
        )
        errors.check(
            is_unresolved(evaluation_window_seconds) or evaluation_window_seconds in _WINDOWS,
            f"evaluation_window_seconds must be one of {_WINDOWS} (given {evaluation_window_seconds})",
        )
        prefix = metric_prefix or construct_id
        self.web_acl: wafv2.CfnWebACL = wafv2.CfnWebACL(
            self,
            "Resource",
            scope="REGIONAL",
            default_action=wafv2.CfnWebACL.DefaultActionProperty(allow={}),
            visibility_config=_visibility(prefix),
            rules=[
                wafv2.CfnWebACL.RuleProperty(
                    name="AWSManagedRulesAmazonIpReputationList",
                    priority=0,
                    override_action=wafv2.CfnWebACL.OverrideActionProperty(none={}),
                    statement=wafv2.CfnWebACL.StatementProperty(
                        managed_rule_group_statement=wafv2.CfnWebACL.ManagedRuleGroupStatementProperty(
                            vendor_name="AWS", name="AWSManagedRulesAmazonIpReputationList"
                        )
                    ),
                    visibility_config=_visibility(f"{prefix}IpReputation"),
                ),
                wafv2.CfnWebACL.RuleProperty(
                    name="AWSManagedRulesCommonRuleSet",
                    priority=1,
                    override_action=wafv2.CfnWebACL.OverrideActionProperty(none={}),
                    statement=wafv2.CfnWebACL.StatementProperty(
                        managed_rule_group_statement=wafv2.CfnWebACL.ManagedRuleGroupStatementProperty(
                            vendor_name="AWS", name="AWSManagedRulesCommonRuleSet"
                        )
                    ),
                    visibility_config=_visibility(f"{prefix}CommonRuleSet"),
                ),
                wafv2.CfnWebACL.RuleProperty(
                    name="RateLimitPerIp",
                    priority=2,
                    action=wafv2.CfnWebACL.RuleActionProperty(block={}),
                    statement=wafv2.CfnWebACL.StatementProperty(
                        rate_based_statement=wafv2.CfnWebACL.RateBasedStatementProperty(
                            limit=rate_limit,
                            aggregate_key_type="IP",
                            evaluation_window_sec=evaluation_window_seconds,
                        )
                    ),
                    visibility_config=_visibility(f"{prefix}RateLimit"),
                ),
                wafv2.CfnWebACL.RuleProperty(
                    name="AWSManagedRulesKnownBadInputsRuleSet",
                    priority=3,
                    override_action=wafv2.CfnWebACL.OverrideActionProperty(none={}),
                    statement=wafv2.CfnWebACL.StatementProperty(
                        managed_rule_group_statement=wafv2.CfnWebACL.ManagedRuleGroupStatementProperty(
                            vendor_name="AWS", name="AWSManagedRulesKnownBadInputsRuleSet"
                        )
                    ),
                    visibility_config=_visibility(f"{prefix}KnownBadInputs"),
                ),
            ],
        )
        self._log(log_encryption_key, log_retention, log_removal_policy, redacted_headers)

    def _log(
        self,
        key: kms.IKey | None,
        retention: logs.RetentionDays,
        removal_policy: RemovalPolicy,
        redacted_headers: Sequence[str],
    ) -> None:
        if key is None:
            key = EncryptionKey(self, "LogKey", description="WAF logs", service_principals=["logs"]).key
        name = LOG_GROUP_PREFIX + Names.unique_resource_name(self, max_length=200, separator="-")
        self.log_group: logs.LogGroup = logs.LogGroup(
            self,
            "Logs",
            log_group_name=name,
            encryption_key=key,
            retention=retention,
            removal_policy=removal_policy,
        )
        # WAF takes the group's ARN without the ":*" of the LogGroup Arn attribute.
        group_arn = Stack.of(self).format_arn(
            service="logs",
            resource="log-group",
            resource_name=self.log_group.log_group_name,
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        self.logging: wafv2.CfnLoggingConfiguration = wafv2.CfnLoggingConfiguration(
            self,
            "Logging",
            resource_arn=self.web_acl.attr_arn,
            log_destination_configs=[group_arn],
            redacted_fields=[
                wafv2.CfnLoggingConfiguration.FieldToMatchProperty(single_header={"Name": header.lower()})
                for header in redacted_headers
            ],
        )

    @property
    def arn(self) -> str:
        return self.web_acl.attr_arn

    def associate(self, association_id: str, resource_arn: str) -> wafv2.CfnWebACLAssociation:
        """Attach the ACL to a regional resource (an API Gateway stage ARN, an ALB, ...)."""
        return wafv2.CfnWebACLAssociation(self, association_id, resource_arn=resource_arn, web_acl_arn=self.arn)

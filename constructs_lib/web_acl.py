"""A regional WAFv2 web ACL: AWS managed common and known-bad-inputs rule sets plus a per-IP rate limit.

Example::

    acl = RegionalWebAcl(self, "WebAcl", rate_limit=1000)
    acl.associate("RestApi", api.deployment_stage.stage_arn)
"""

from __future__ import annotations

from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from constructs_lib.validation import PropErrors, is_unresolved

_MIN_RATE_LIMIT = 10  # WAFv2's lower bound for a rate-based rule (requests per evaluation window)
_MAX_RATE_LIMIT = 2_000_000_000
_WINDOWS = (60, 120, 300, 600)


def _visibility(metric_name: str) -> wafv2.CfnWebACL.VisibilityConfigProperty:
    return wafv2.CfnWebACL.VisibilityConfigProperty(
        cloud_watch_metrics_enabled=True, metric_name=metric_name, sampled_requests_enabled=True
    )


class RegionalWebAcl(Construct):
    """A REGIONAL web ACL that allows by default and blocks what its rules match.

    Rules, in priority order: ``AWSManagedRulesCommonRuleSet`` (OWASP-style protections,
    every rule in block mode), a rate-based rule that blocks a source IP sending more than
    ``rate_limit`` requests within ``evaluation_window_seconds``, and
    ``AWSManagedRulesKnownBadInputsRuleSet`` (request patterns of known exploits, such as Log4j
    JNDI lookups, every rule in block mode). Capacity: 700 + 2 + 200 of a web ACL's 1,500 WCUs.

    Args:
        rate_limit: requests per IP and window before blocking, 10..2e9. Defaults to 1000.
        evaluation_window_seconds: 60, 120, 300 or 600. Defaults to 300.
        metric_prefix: CloudWatch metric name prefix. Defaults to the construct id.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        rate_limit: int = 1000,
        evaluation_window_seconds: int = 300,
        metric_prefix: str | None = None,
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
                    name="AWSManagedRulesCommonRuleSet",
                    priority=0,
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
                    priority=1,
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
                    priority=2,
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

    @property
    def arn(self) -> str:
        return self.web_acl.attr_arn

    def associate(self, association_id: str, resource_arn: str) -> wafv2.CfnWebACLAssociation:
        """Attach the ACL to a regional resource (an API Gateway stage ARN, an ALB, ...)."""
        return wafv2.CfnWebACLAssociation(self, association_id, resource_arn=resource_arn, web_acl_arn=self.arn)

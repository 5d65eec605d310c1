"""The workflow options of a stage: one place turns ``StageConfig`` into ``WorkflowOptions``."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs

from constructs_lib.workflow_defaults import TRANSIENT_ERRORS, RetryPolicy, WorkflowOptions
from contracts.workflows import BATCH_WRITE_INCOMPLETE
from stacks.config import StageConfig

#: The retry of every Task of the app's workflows: the library's transient errors and ours.
APP_RETRY = RetryPolicy(errors=(*TRANSIENT_ERRORS, BATCH_WRITE_INCOMPLETE))


def app_workflow_options(config: StageConfig, key: kms.IKey, retention: logs.RetentionDays) -> WorkflowOptions:
    """Encryption, logging, removal, retry and timeout of every workflow of ``config``'s stage."""
    return WorkflowOptions(
        encryption_key=key,
        log_retention=retention,
        include_execution_data=config.log_execution_data,
        removal_policy=config.resource_removal_policy,
        retry=APP_RETRY,
        timeout=Duration.minutes(config.workflow_timeout_minutes),
    )

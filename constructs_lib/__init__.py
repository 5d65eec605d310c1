"""Reusable, typed, hardened L3 constructs that any team can use: no application logic lives here.

Each construct has its own module; this index only re-exports them.
"""

from constructs_lib.alarm_topic import AlarmTopic
from constructs_lib.approval_gate import HumanApprovalGate
from constructs_lib.athena_workgroup import AthenaWorkgroup
from constructs_lib.catalog_database import CatalogDatabase
from constructs_lib.delivery_stream import S3DeliveryStream
from constructs_lib.email_subscription import subscribe_email
from constructs_lib.encryption_key import EncryptionKey
from constructs_lib.event_bus import SecureEventBus
from constructs_lib.fanout_topic import FanoutTopic, Subscriber
from constructs_lib.json_table import Column, JsonTable, Partition
from constructs_lib.ops_dashboard import OpsDashboard
from constructs_lib.rest_api import HardenedRestApi
from constructs_lib.secure_bucket import SecureBucket
from constructs_lib.secure_queue import SecureQueue
from constructs_lib.service_alarms import ServiceAlarms
from constructs_lib.sfn_start_integration import InputField, StepFunctionsStartExecution
from constructs_lib.shared_function import LambdaCode, SharedFunction
from constructs_lib.single_table import GlobalIndex, SingleTable
from constructs_lib.stream_consumer import StreamConsumer
from constructs_lib.token_authorizer import JwtTokenAuthorizer
from constructs_lib.user_pool import HardenedUserPool
from constructs_lib.web_acl import RegionalWebAcl
from constructs_lib.websocket_api import SecureWebSocketApi
from constructs_lib.workflow_defaults import RetryPolicy, WorkflowOptions, WorkflowStateMachine, callback_input

__all__ = [
    "AlarmTopic",
    "AthenaWorkgroup",
    "CatalogDatabase",
    "Column",
    "EncryptionKey",
    "FanoutTopic",
    "GlobalIndex",
    "HardenedRestApi",
    "HardenedUserPool",
    "HumanApprovalGate",
    "InputField",
    "JsonTable",
    "JwtTokenAuthorizer",
    "LambdaCode",
    "OpsDashboard",
    "Partition",
    "RegionalWebAcl",
    "RetryPolicy",
    "S3DeliveryStream",
    "SecureBucket",
    "SecureEventBus",
    "SecureQueue",
    "SecureWebSocketApi",
    "ServiceAlarms",
    "SharedFunction",
    "SingleTable",
    "StepFunctionsStartExecution",
    "StreamConsumer",
    "Subscriber",
    "WorkflowOptions",
    "WorkflowStateMachine",
    "callback_input",
    "subscribe_email",
]

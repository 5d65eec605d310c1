"""Reusable, typed, hardened L3 constructs. No MangaAssist business logic lives here.

Each construct has its own module; this index only re-exports them.
"""

from constructs_lib.delivery_stream import S3DeliveryStream
from constructs_lib.encryption_key import EncryptionKey
from constructs_lib.event_bus import SecureEventBus
from constructs_lib.fanout_topic import FanoutTopic, Subscriber
from constructs_lib.secure_bucket import SecureBucket
from constructs_lib.secure_queue import SecureQueue
from constructs_lib.shared_function import LambdaCode, SharedFunction
from constructs_lib.single_table import GlobalIndex, SingleTable
from constructs_lib.stream_consumer import StreamConsumer

__all__ = [
    "EncryptionKey",
    "FanoutTopic",
    "GlobalIndex",
    "LambdaCode",
    "S3DeliveryStream",
    "SecureBucket",
    "SecureEventBus",
    "SecureQueue",
    "SharedFunction",
    "SingleTable",
    "StreamConsumer",
    "Subscriber",
]

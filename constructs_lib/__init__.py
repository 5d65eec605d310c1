"""Reusable, typed, hardened L3 constructs. No MangaAssist business logic lives here.

Each construct has its own module; this index only re-exports them.
"""

from constructs_lib.encryption_key import EncryptionKey
from constructs_lib.secure_bucket import SecureBucket
from constructs_lib.shared_function import LambdaCode, SharedFunction
from constructs_lib.single_table import GlobalIndex, SingleTable

__all__ = [
    "EncryptionKey",
    "GlobalIndex",
    "LambdaCode",
    "SecureBucket",
    "SharedFunction",
    "SingleTable",
]

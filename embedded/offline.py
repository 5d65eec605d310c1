"""The process environment of a run on embedded AWS outside pytest (``make demo``, the load run's CLI).

No AWS account, no credentials, no Docker: fake credentials and a fixed region for moto, no
instance metadata lookups, tracing and metrics off. Set it before a handler module is imported:
Powertools reads its settings then.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

from embedded.heap import collect_less_often

OFFLINE_ENVIRONMENT: Final[Mapping[str, str]] = {
    "AWS_ACCESS_KEY_ID": "offline",
    "AWS_SECRET_ACCESS_KEY": "offline",
    "AWS_SESSION_TOKEN": "offline",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "POWERTOOLS_TRACE_DISABLED": "1",
    "POWERTOOLS_METRICS_DISABLED": "true",
    "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
}


def go_offline(**extra: str) -> None:
    """Put :data:`OFFLINE_ENVIRONMENT` (and ``extra``) into this process's environment; drop AWS_PROFILE.

    Also collect cycles as a process with a stage on embedded AWS should (:mod:`embedded.heap`).
    """
    os.environ.update({**OFFLINE_ENVIRONMENT, **extra})
    os.environ.pop("AWS_PROFILE", None)
    collect_less_often()

"""The ``analytics_search`` block of a stage: the analytics records, searchable in OpenSearch Serverless.

Off unless a stage turns it on. On, the stage creates a TIMESERIES collection, its encryption,
network and data-access policies, and a second delivery stream the stream router feeds the same
analytics records as the analytics bucket's (docs/events.md says what it costs and why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from stacks.errors import ConfigError

#: An index name Firehose and OpenSearch both accept: lowercase, starting with a letter.
_INDEX = re.compile(r"^[a-z][a-z0-9_-]{0,79}$")
_VPC_ENDPOINT = re.compile(r"^vpce-[0-9a-z]{8,32}$")
_SUBNET = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_SECURITY_GROUP = re.compile(r"^sg-[0-9a-f]{8,17}$")

#: The numeric settings and their ranges (Firehose's for an OpenSearch Serverless destination).
_BOUNDS: dict[str, tuple[int, int]] = {
    "buffer_seconds": (0, 900),
    "buffer_mb": (1, 100),
    "retry_seconds": (0, 7200),
}


@dataclass(frozen=True)
class AnalyticsSearchConfig:
    """Whether, and how, the analytics records also go to an OpenSearch Serverless collection.

    The collection is private by default: its network policy admits only ``vpc_endpoint_id`` (an
    OpenSearch Serverless VPC endpoint), and the delivery stream reaches it through the VPC
    (``subnet_ids``, ``security_group_ids``). ``public_access`` true admits public networks
    instead (still behind IAM and the data-access policy) and takes no VPC settings.
    """

    enabled: bool = False
    # The index the delivery stream writes (created on first write).
    index: str = "sessions"
    public_access: bool = False
    vpc_endpoint_id: str | None = None
    subnet_ids: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    # Standby replicas in a second Availability Zone: twice the minimum OCUs (docs/events.md).
    standby_replicas: bool = True
    buffer_seconds: int = 60
    buffer_mb: int = 5
    # How long Firehose retries a document the collection refuses before it goes to the bucket.
    retry_seconds: int = 300

    @property
    def private(self) -> bool:
        return self.enabled and not self.public_access

    def validate(self, stage: str) -> None:
        """Raise ConfigError naming ``analytics_search.<key>`` when anything is off."""
        for key in ("enabled", "public_access", "standby_replicas"):
            if not isinstance(getattr(self, key), bool):
                raise _fail(stage, key, "must be true or false", getattr(self, key))
        if not isinstance(self.index, str) or not _INDEX.fullmatch(self.index):
            raise _fail(
                stage, "index", "must be 1-80 lowercase letters, digits, '_' or '-', starting with a letter", self.index
            )
        for key, (low, high) in _BOUNDS.items():
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise _fail(stage, key, f"must be a whole number in {low}..{high}", value)
        self._validate_network(stage)

    def _validate_network(self, stage: str) -> None:
        if self.vpc_endpoint_id is not None and not (
            isinstance(self.vpc_endpoint_id, str) and _VPC_ENDPOINT.fullmatch(self.vpc_endpoint_id)
        ):
            raise _fail(
                stage,
                "vpc_endpoint_id",
                "must be an OpenSearch Serverless VPC endpoint id (vpce-...)",
                self.vpc_endpoint_id,
            )
        for key, pattern, most, example in (
            ("subnet_ids", _SUBNET, 16, "subnet-0abc1234"),
            ("security_group_ids", _SECURITY_GROUP, 5, "sg-0abc1234"),
        ):
            ids = getattr(self, key)
            if len(ids) > most or not all(isinstance(i, str) and pattern.fullmatch(i) for i in ids):
                raise _fail(stage, key, f"must list at most {most} ids like {example}", list(ids))
        vpc = {
            "vpc_endpoint_id": self.vpc_endpoint_id,
            "subnet_ids": self.subnet_ids,
            "security_group_ids": self.security_group_ids,
        }
        given = sorted(key for key, value in vpc.items() if value)
        if self.public_access and given:
            raise _fail(
                stage, "public_access", f"is true, so the collection takes no VPC settings: remove {given}", True
            )
        missing = sorted(key for key, value in vpc.items() if not value)
        if self.private and missing:
            raise _fail(
                stage,
                "enabled",
                f"needs {missing} for a private collection (an OpenSearch Serverless VPC endpoint, and the "
                "subnets and security groups Firehose delivers from), or public_access true",
                True,
            )


def _fail(stage: str, key: str, rule: str, given: Any) -> ConfigError:
    return ConfigError(f"stage '{stage}': analytics_search.{key} {rule} (given {given!r})")


def analytics_search(stage: str, raw: Any) -> AnalyticsSearchConfig:
    """The ``analytics_search`` block of a stage entry as an AnalyticsSearchConfig (validated with the stage)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"stage '{stage}': analytics_search must be an object (given {raw!r})")
    known = {f.name for f in fields(AnalyticsSearchConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"stage {stage!r}: unknown analytics_search keys {unknown}; allowed keys are {sorted(known)}")
    values = dict(raw)
    for key in ("subnet_ids", "security_group_ids"):
        if key in values:
            if not isinstance(values[key], list) or not all(isinstance(v, str) for v in values[key]):
                raise _fail(stage, key, "must be a list of strings", values[key])
            values[key] = tuple(values[key])
    return AnalyticsSearchConfig(**values)

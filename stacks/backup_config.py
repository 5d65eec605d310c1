"""The ``backup`` block of a stage: AWS Backup's daily copies of the single table, beyond point-in-time recovery.

Point-in-time recovery restores the table to any second of the last 35 days, but it lives with the
table, in the table's account and region. The backup plan keeps daily recovery points in a vault of
their own (encrypted with the stage's key, locked in prod), optionally copied to a vault in another
account or region (docs/operations.md, Backup and restore).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from stacks.errors import ConfigError

#: The fewest days a recovery point is kept: less would not outlast a long weekend's unnoticed damage.
MIN_RETENTION_DAYS = 7
#: AWS Backup's longest retention (100 years).
MAX_RETENTION_DAYS = 36500
#: AWS Backup refuses a vault lock whose grace time is under 3 days.
MIN_LOCK_CHANGEABLE_DAYS = 3
#: A backup vault's ARN: arn:<partition>:backup:<region>:<account>:backup-vault:<name>.
_VAULT_ARN = re.compile(
    r"^arn:aws(?:-cn|-us-gov)?:backup:(?P<region>[a-z]{2}(?:-[a-z]+)+-\d):(?P<account>\d{12}):"
    r"backup-vault:[A-Za-z0-9_.-]{2,50}$"
)


@dataclass(frozen=True)
class BackupConfig:
    """The table's backup plan: daily recovery points kept ``retention_days``, a vault lock, an optional copy.

    ``vault_lock`` locks the vault in compliance mode: no one, the account's root included, can
    delete a recovery point before its retention ends or shorten the retention. For
    ``lock_changeable_days`` after the deploy the lock can still be removed, so a mistaken setting
    can be corrected; after that it is permanent. ``copy_vault_arn`` copies each recovery point to
    a vault in another account or region, kept ``copy_retention_days`` (default: ``retention_days``).
    """

    enabled: bool = True
    retention_days: int = 7
    vault_lock: bool = False
    lock_changeable_days: int = 7
    copy_vault_arn: str | None = None
    copy_retention_days: int | None = None

    def validate(self, stage: str, region: str | None = None, account: str | None = None) -> None:
        """Raise ConfigError naming ``backup.<key>`` when anything is off.

        ``region``/``account`` are the stage's: a copy in the stage's own region and account
        would be lost with it, so it must be elsewhere.
        """
        for key in ("enabled", "vault_lock"):
            if not isinstance(getattr(self, key), bool):
                raise _fail(stage, key, "must be true or false", getattr(self, key))
        _check_days(stage, "retention_days", self.retention_days, MIN_RETENTION_DAYS)
        _check_days(stage, "lock_changeable_days", self.lock_changeable_days, MIN_LOCK_CHANGEABLE_DAYS)
        if self.copy_retention_days is not None:
            _check_days(stage, "copy_retention_days", self.copy_retention_days, MIN_RETENTION_DAYS)
            if self.copy_vault_arn is None:
                raise _fail(
                    stage, "copy_retention_days", "needs copy_vault_arn (there is no copy)", self.copy_retention_days
                )
        if self.copy_vault_arn is not None:
            self._validate_copy(stage, region, account)

    def _validate_copy(self, stage: str, region: str | None, account: str | None) -> None:
        arn = self.copy_vault_arn
        match = _VAULT_ARN.fullmatch(arn) if isinstance(arn, str) else None
        if match is None:
            raise _fail(
                stage,
                "copy_vault_arn",
                "must be a backup vault ARN such as arn:aws:backup:eu-central-1:123456789012:backup-vault:copies",
                arn,
            )
        if region is None:
            raise _fail(
                stage,
                "copy_vault_arn",
                "needs the stage's region (and account): a copy is only worth having outside them",
                arn,
            )
        if match["region"] == region and account in (None, match["account"]):
            raise _fail(
                stage,
                "copy_vault_arn",
                f"is in the stage's own region {region} and account: copy to another region or account",
                arn,
            )

    @property
    def copy_days(self) -> int:
        """How long a copied recovery point is kept."""
        return self.copy_retention_days if self.copy_retention_days is not None else self.retention_days


def _check_days(stage: str, key: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_RETENTION_DAYS:
        raise _fail(stage, key, f"must be a whole number of days in {low}..{MAX_RETENTION_DAYS}", value)


def _fail(stage: str, key: str, rule: str, given: Any) -> ConfigError:
    return ConfigError(f"stage '{stage}': backup.{key} {rule} (given {given!r})")


def backup(stage: str, raw: Any) -> BackupConfig:
    """The ``backup`` block of a stage entry as a BackupConfig (validated with the stage)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"stage '{stage}': backup must be an object (given {raw!r})")
    known = {f.name for f in fields(BackupConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"stage {stage!r}: unknown backup keys {unknown}; allowed keys are {sorted(known)}")
    return BackupConfig(**raw)

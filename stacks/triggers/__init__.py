"""The app's triggers: what makes a workflow or a function run when something happens."""

from stacks.triggers.audit_lock import AuditLocker
from stacks.triggers.cleanup import CleanupTriggers
from stacks.triggers.export_notices import ExportNotices
from stacks.triggers.handoff_metrics import HandoffMetrics

__all__ = ["AuditLocker", "CleanupTriggers", "ExportNotices", "HandoffMetrics"]

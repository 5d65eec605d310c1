"""The app's own Step Functions workflows, each built from the library's generic workflow pieces."""

from stacks.workflows.cleanup import CleanupWorkflow
from stacks.workflows.export import ExportWorkflow
from stacks.workflows.handoff import HandoffWorkflow
from stacks.workflows.handoff_functions import HandoffFunctions
from stacks.workflows.onboarding import OnboardingWorkflow
from stacks.workflows.options import APP_RETRY, app_workflow_options

__all__ = [
    "APP_RETRY",
    "CleanupWorkflow",
    "ExportWorkflow",
    "HandoffFunctions",
    "HandoffWorkflow",
    "OnboardingWorkflow",
    "app_workflow_options",
]

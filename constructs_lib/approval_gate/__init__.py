"""HumanApprovalGate: a Step Functions fragment that waits for a person's signed-link decision.

The construct (:mod:`.gate`) and its Lambda code (:mod:`.gate_runtime`, packaged as the gate's
own code asset) ship together.
"""

from constructs_lib.approval_gate.gate import (
    DECISION_HANDLER,
    REJECTED_ERROR,
    REQUEST_HANDLER,
    RUNTIME_DIR,
    RUNTIME_PACKAGE,
    WINDOW_CLOSED_ERROR,
    HumanApprovalGate,
)

__all__ = [
    "DECISION_HANDLER",
    "REJECTED_ERROR",
    "REQUEST_HANDLER",
    "RUNTIME_DIR",
    "RUNTIME_PACKAGE",
    "WINDOW_CLOSED_ERROR",
    "HumanApprovalGate",
]

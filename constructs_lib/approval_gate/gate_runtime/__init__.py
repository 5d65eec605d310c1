"""The approval gate's Lambda code: request a review, decide it from a signed link, its records.

This package is the gate's own code asset (``HumanApprovalGate`` packages this directory and
nothing else), so it uses only the Python standard library and boto3, which the Lambda runtime
provides. Inside Lambda it is the top-level package ``gate_runtime``; inside the library it is
``constructs_lib.approval_gate.gate_runtime``. Every import within it is relative, so both work.
"""

from __future__ import annotations

from .environment import reset

__all__ = ["reset"]

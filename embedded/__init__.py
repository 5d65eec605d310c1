"""Embedded AWS: a synthesized stage stood up on moto, driven like the real thing.

``embedded_stage(assembly_dir)`` reads the cloud assembly, deploys every stack with typed
loaders (``cloudformation/loaders/``) after resolving intrinsics (``intrinsics.py``), and returns an
``EmbeddedStage`` with the pumps (stream, SQS), EventBridge delivery, the REST and WebSocket
routers, an injectable clock and Bedrock Converse stubbed at the client (``bedrock.py``).
"""

from embedded.clock import Clock
from embedded.cloudformation.intrinsics import Deployed, Unresolvable
from embedded.stage import EmbeddedStage, embedded_stage

__all__ = ["Clock", "Deployed", "EmbeddedStage", "Unresolvable", "embedded_stage"]

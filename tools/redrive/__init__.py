"""Move the messages of a dead-letter queue back to the queue they failed in; a dry run unless --apply.

Usage (``make redrive`` lists the dev stage's DLQs, ``make redrive QUEUE=... [APPLY=1]`` redrives one)::

    python -m tools.redrive --stage dev        # the stage's dead-letter queues and what waits in each
    python -m tools.redrive QUEUE              # dry run: depth, a sample, where the messages would go
    python -m tools.redrive QUEUE --apply [--max N] [--rate N] [--to QUEUE]
    python -m tools.redrive QUEUE --status     # the DLQ's recent message move tasks

QUEUE is the dead-letter queue's name, URL or ARN. Where its messages go is found, not typed: the
SQS queue whose redrive policy names it (``ListDeadLetterSourceQueues``). With several such
queues the tool refuses and lists them, and ``--to`` picks one. A DLQ that no SQS queue feeds (a
stream consumer's or a function's failure destination, an EventBridge target's, an SNS
subscription's) has no queue to go back to: the tool says what its messages are and what to do
instead. ``--to`` then moves the ones that are messages to a queue you name; failure records stay,
and a stream consumer's DLQ is refused outright.

``--apply`` on a standard DLQ starts SQS's own message move task (``StartMessageMoveTask``;
``--rate`` is its ``MaxNumberOfMessagesPerSecond``) and reports its handle and status. A FIFO DLQ,
``--max``, a ``--to`` queue that is no source of the DLQ, or an endpoint without move tasks (moto)
move by hand instead: batches of ten received from the DLQ, sent to the destination with the same
body and message attributes (FIFO: the same group, in order), and deleted from the DLQ only once
sent. A message that fails stays in the DLQ, is named in the report, and is visible again when
the run ends.

Exit status: 0 done or nothing to do; 1 some messages were not moved (the report names them);
2 refused or could not start (bad arguments, unknown queue, no credentials, a DLQ that cannot be
redriven as asked).

A general tool: it redrives any SQS dead-letter queue, FIFO ones too, though the app has none (the
construct library gives a FIFO queue a FIFO DLQ). ``tests/unit/test_redrive.py`` runs every path,
the FIFO ones included (each group moved in order; a failed message holds back the rest of its
group only; FIFO and standard queues never mixed).

The package: :mod:`.queues` (what the operator names and what SQS answers), :mod:`.aws` (the
clients), :mod:`.plan` (where the messages go, the dry run), :mod:`.move` (moving them, by hand or
with a message move task), :mod:`.stage` (a stage's DLQs) and :mod:`.cli` (the command line).
"""

from tools.redrive.cli import main
from tools.redrive.plan import choose_destination, use_task
from tools.redrive.queues import Kind, Message, Queue, QueueRef, Refused, kind_of, parse_queue
from tools.redrive.stage import dead_letter_queues

__all__ = [
    "Kind",
    "Message",
    "Queue",
    "QueueRef",
    "Refused",
    "choose_destination",
    "dead_letter_queues",
    "kind_of",
    "main",
    "parse_queue",
    "use_task",
]

"""What the stacks and the Lambda handlers must agree on, written once and imported by both sides.

Standard library only, and nothing of ours: the deploy side (``stacks``, ``app.py``) imports it
without loading the Lambda runtime (boto3, the store), and the Lambda code asset ships it beside
``lambdas``. A value here is never written again on either side; each module says who reads it.

* :mod:`contracts.schema`: the single table's key attributes, indexes and TTL attribute.
* :mod:`contracts.keys`: the key prefixes and fixed sort keys of every record.
* :mod:`contracts.messages`: the handoff and session-event vocabulary (topic attributes, bus events).
* :mod:`contracts.chat`: the WebSocket chat's route keys.
* :mod:`contracts.access`: who may call which REST route.
* :mod:`contracts.bodies`: the REST request body schemas.
* :mod:`contracts.environment`: the stage variables every function gets, and the issuer variables.
* :mod:`contracts.trail`: the fields of the audit and analytics lines (the trail's Glue tables).
* :mod:`contracts.priorities`: the handoff priorities and their rank (the inboxes' order).
* :mod:`contracts.workflows`: the error names the workflows catch and the Lambdas raise.
"""

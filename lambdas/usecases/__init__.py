"""Use cases: the writes that span aggregates, which handlers call.

Each moves several records of :mod:`lambdas.shared.store` together: the aggregates add their own
actions to one :class:`~lambdas.shared.store.table.Transaction`, and the use case commits it and
says what a refusal means. :mod:`.assign_agent` (a handoff given to an agent), :mod:`.close_handoff`
(the handoff completed, its agent released, the session moved), :mod:`.customer_leaves` (a
customer's connection ends, ending a handoff with it), :mod:`.send_message` (a customer's chat
message admitted and stored, before the model answers).
"""

"""The read services over NATS request-reply: exact reads (get, list), stats and browsing
on FastStream, and recall's responder (a plain nats-py subscription, for latency), each
admitted and given its tenant's turn (``admission``, ``gate``). What recall computes is
``zeromem.recall``'s."""

"""The read services over NATS request-reply: one responder (``responder``, a plain
nats-py subscription per kind) answers info, get, list, stats, owners, archived and
recall, each request admitted and given its tenant's turn (``admission``, ``gate``).
What recall computes is ``zeromem.recall``'s."""

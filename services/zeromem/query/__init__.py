"""The read path: exact reads (get, list) over NATS request-reply."""

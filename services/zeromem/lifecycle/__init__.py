"""Memory lifecycle: expiry, the archive tier, forgetting, the audit trail, the change
feed and rebuilding Redis from the command log."""

"""The write path: shard workers that apply memory commands to Redis."""

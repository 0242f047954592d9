"""`make demo`: a planner and two workers serving several users, with memory instead of
history. See ``fleet.py``."""

"""Adapters between zeromem and agent frameworks (LangGraph), shadow mode, and a local stack
for examples. Each module imports its framework lazily, so none is needed to import this."""

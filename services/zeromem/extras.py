"""Optional features and the extra that installs each: ``pip install 'zeromem[mcp]'``.

A plain ``pip install zeromem`` runs the stack, the SDK and the CLI; the MCP server, the
LangGraph store and the PNG charts need packages of their own. Importing one without
them raises ``MissingExtraError``, whose message is the one line to act on (and the CLI
prints just that line).
"""

from __future__ import annotations

import importlib
from types import ModuleType

# feature extra -> the packages it installs (pyproject.toml's optional-dependencies)
EXTRAS = {
    "mcp": ("mcp",),
    "langgraph": ("langgraph",),
    "charts": ("matplotlib",),
}


class MissingExtraError(ImportError):
    def __init__(self, module: str, extra: str, feature: str) -> None:
        self.module = module
        self.extra = extra
        self.feature = feature
        super().__init__(
            f"{feature} needs the optional package {module!r}; "
            f"pip install 'zeromem[{extra}]' (or 'zeromem[all]')",
            name=module,
        )


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module``, or raise MissingExtraError naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(module.split(".")[0], extra, feature) from None

"""Terminal views of replies (rich tables)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from zeromem.schemas import RecallReply


def print_recall(reply: RecallReply, explain: bool, console: Console | None = None) -> None:
    console = console or Console()
    console.print(reply.context.rstrip() or "(nothing recalled)", markup=False, highlight=False)
    estimate = " (estimated)" if reply.baseline_estimated else ""
    console.print(
        f"\n{len(reply.memories)} memories, {reply.tokens} tokens; injecting every memory "
        f"in scope would cost {reply.baseline_tokens}{estimate}: {reply.saved_tokens} saved",
        style="dim",
    )
    if not explain:
        return
    table = Table(title="candidates, best first", show_lines=False)
    for column, justify in (("key", "left"), ("score", "right"), ("relevance", "right"),
                            ("decay", "right"), ("feedback", "right"), ("tokens", "right"),
                            ("decision", "left")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for c in reply.candidates:
        style = "green" if c.decision.startswith("kept") else None
        table.add_row(c.key, f"{c.score:.4f}", f"{c.relevance:.3f}", f"{c.decay:.3f}",
                      f"{c.feedback:.2f}", str(c.tokens), c.decision, style=style)  # fmt: skip
    console.print(table)

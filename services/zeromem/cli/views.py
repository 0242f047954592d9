"""Terminal views of replies (rich tables)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table

from zeromem.schemas import RecallReply, UsageRow
from zeromem.store.usage import usage_totals


def print_recall(reply: RecallReply, explain: bool, console: Console | None = None) -> None:
    console = console or Console()
    console.print(reply.context.rstrip() or "(nothing recalled)", markup=False, highlight=False)
    from zeromem.store.tokens import DEFAULT_ENCODING, token_counter

    estimate = " (estimated)" if reply.baseline_estimated else ""
    # Content against content, as `zeromem stats` counts (the baseline is content only).
    count = token_counter(DEFAULT_ENCODING)
    content = sum(count(m.content) for m in reply.memories)
    console.print(
        f"\n{len(reply.memories)} memories, {reply.tokens} tokens with their headers, "
        f"{content} of content; every memory in scope is {reply.baseline_tokens} tokens of "
        f"content{estimate}: {reply.baseline_tokens - content} saved",
        style="dim",
        highlight=False,
    )
    if not explain:
        return
    table = Table(title="candidates, best first", show_lines=False)
    for column, justify in (
        ("key", "left"),
        ("score", "right"),
        ("relevance", "right"),
        ("decay", "right"),
        ("feedback", "right"),
        ("tokens", "right"),
        ("decision", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for c in reply.candidates:
        style = "green" if c.decision.startswith("kept") else None
        table.add_row(
            c.key,
            f"{c.score:.4f}",
            f"{c.relevance:.3f}",
            f"{c.decay:.3f}",
            f"{c.feedback:.2f}",
            str(c.tokens),
            c.decision,
            style=style,
        )
    console.print(table)


def usage_series(rows: Sequence[UsageRow]) -> tuple[list[float], dict[str, list[int]]]:
    """Per minute, summed over agents: injected, baseline and history tokens."""
    minutes = sorted({r.minute for r in rows})
    index = {m: i for i, m in enumerate(minutes)}
    series = {name: [0] * len(minutes) for name in ("injected", "baseline", "history")}
    for row in rows:
        for name in series:
            series[name][index[row.minute]] += getattr(row, name)
    return minutes, series


def print_stats(tenant: str, rows: Sequence[UsageRow], console: Console | None = None) -> None:
    console = console or Console()
    if not rows:
        console.print(f"no recalls recorded for tenant {tenant!r} in this period")
        return
    table = Table(title=f"token savings of tenant {tenant!r}")
    for column in (
        "agent",
        "recalls",
        "injected",
        "baseline",
        "saved vs baseline",
        "history",
        "saved vs history",
    ):
        table.add_column(column, justify="left" if column == "agent" else "right")
    totals = usage_totals(rows)
    grand = dict.fromkeys(("recalls", "injected", "baseline", "history"), 0)
    for agent, t in sorted(totals.items()):
        for k in grand:
            grand[k] += t[k]
        table.add_row(agent, *_usage_cells(t))
    table.add_row("all", *_usage_cells(grand), style="bold")
    table.caption = (
        "injected and baseline: memory content tokens (cl100k_base); the \\[date type key] "
        "header of each line is left out of both"
    )
    console.print(table)
    print_stats_chart(rows, grand, console)


def print_stats_chart(
    rows: Sequence[UsageRow], totals: dict[str, int], console: Console | None = None
) -> None:
    """Tokens per minute over the period; with fewer than two minutes of recalls (a first
    try, a demo), the period's totals as bars instead, so there is always a chart."""
    import plotext as plt

    console = console or Console()
    plt.clear_figure()
    plt.plotsize(min(console.width, 100), 18)
    colour = console.is_terminal
    minutes, series = usage_series(rows)
    if len(minutes) >= 2:
        labels = [datetime.fromtimestamp(m, UTC).strftime("%H:%M") for m in minutes]
        for name, color in (("history", "red"), ("baseline", "orange"), ("injected", "green")):
            if any(series[name]):
                plt.plot(
                    list(range(len(minutes))), series[name], label=f"{name} tokens", color=color
                )
        step = max(1, len(labels) // 8)
        plt.xticks(list(range(0, len(labels), step)), labels[::step])
        plt.title("tokens per minute (UTC)")
    else:
        names = [n for n in ("injected", "baseline", "history") if totals[n] or n != "history"]
        plt.bar(names, [totals[n] for n in names], color="orange")
        plt.title("tokens over the period")
    chart = plt.build()
    if not colour:  # no colour codes in a file or a pipe
        chart = plt.uncolorize(chart)
    print(chart, file=console.file, flush=True)


def _usage_cells(t: dict[str, int]) -> list[str]:
    def pct(saved: int, of: int) -> str:
        return f"{saved} ({100 * saved / of:.0f}%)" if of else "-"

    return [
        str(t["recalls"]),
        str(t["injected"]),
        str(t["baseline"]),
        pct(t["baseline"] - t["injected"], t["baseline"]),
        str(t["history"] or "-"),
        pct(t["history"] - t["injected"], t["history"]) if t["history"] else "-",
    ]


def save_stats_png(tenant: str, rows: Sequence[UsageRow], path: str) -> None:
    from zeromem.extras import require

    matplotlib = require("matplotlib", "charts", "`zeromem stats --png`")
    matplotlib.use("Agg")  # no display here, and none needed
    import matplotlib.pyplot as plt

    minutes, series = usage_series(rows)
    times = [datetime.fromtimestamp(m, UTC) for m in minutes]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name, color in (
        ("history", "tab:red"),
        ("baseline", "tab:orange"),
        ("injected", "tab:green"),
    ):
        if any(series[name]):
            # matplotlib plots datetimes on a date axis; its stubs list numbers only
            ax.plot(times, series[name], label=f"{name} tokens", color=color, marker="o", ms=3)  # type: ignore[arg-type]
    ax.set_title(f"zeromem token usage, tenant {tenant}")
    ax.set_ylabel("tokens per minute")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

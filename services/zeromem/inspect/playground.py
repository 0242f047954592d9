"""The recall playground: a form in, the explain view out.

The recall runs through the viewer's client with ``explain=True``, exactly as an agent's
would (it is recorded in the usage ledger under the viewer's agent). The view model keeps
every figure of the reply as it came (the bars' widths are derived from them, never the
other way round), so the page and the API's explain reply can be compared value by value.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from zeromem.inspect.memories import Masker
from zeromem.schemas import REDACTED, MemoryType, RecallReply, owner_of
from zeromem.schemas.strategies import (
    FeedbackWeightStrategy,
    NoDecayStrategy,
    RecallStrategy,
    RecencyStrategy,
    StrategyError,
    TimeWindowStrategy,
    parse_strategy,
)
from zeromem.sdk.client import MemoryClient

# Named strategies the form offers; "custom" takes a JSON spec (zeromem.schemas.strategies).
STRATEGIES: dict[str, RecallStrategy | None] = {
    "default": None,
    "no_decay": NoDecayStrategy(),
    "recency": RecencyStrategy(half_life_s=3600),
    "time_window_7d": TimeWindowStrategy(seconds=7 * 86400),
    # feedback counts for more: a like x10 (default x5), a dislike x0.01 (default x0.1)
    "feedback_weight": FeedbackWeightStrategy(liked=10.0, disliked=0.01),
}
MAX_K = 100  # RecallRequest's own bounds: refused here with a reason, before a round trip
MAX_BUDGET = 200_000
TYPES = tuple(t.value for t in MemoryType)


class FormError(ValueError):
    """A playground field that cannot be used as given."""


def _words(text: str) -> tuple[str, ...]:
    return tuple(w for w in text.replace(",", " ").split() if w)


def _bounded(params: Mapping[str, str], name: str, default: int, high: int) -> int:
    raw = params.get(name) or str(default)
    try:
        value = int(raw)
    except ValueError:
        raise FormError(f"{name} must be a whole number, not {raw!r}") from None
    if not 1 <= value <= high:
        raise FormError(f"{name} must be between 1 and {high}, not {value}")
    return value


@dataclass(frozen=True)
class RecallForm:
    query: str = ""
    owners: tuple[str, ...] = ()
    prefix: str = ""
    types: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    strategy_name: str = "default"
    strategy_json: str = ""
    k: int = 5
    budget: int = 1500
    include_archived: bool = False
    values: dict[str, Any] = field(default_factory=dict)  # as typed, to fill the form again

    @classmethod
    def parse(cls, params: Any) -> RecallForm:
        """From query parameters (a Starlette ``QueryParams`` or a plain mapping)."""
        get_list = getattr(params, "getlist", lambda name: [params[name]] if name in params else [])
        types = tuple(get_list("type"))
        unknown = [t for t in types if t not in TYPES]
        if unknown:
            raise FormError(
                f"unknown memory type(s) {', '.join(unknown)}; known: {', '.join(TYPES)}"
            )
        strategy_name = params.get("strategy") or "default"
        if strategy_name not in STRATEGIES and strategy_name != "custom":
            raise FormError(f"unknown strategy {strategy_name!r}")
        form = cls(
            query=params.get("q", ""),
            owners=_words(params.get("owners", "")),
            prefix=params.get("prefix", "").strip(),
            types=types,
            tags=_words(params.get("tags", "")),
            strategy_name=strategy_name,
            strategy_json=params.get("strategy_json", ""),
            k=_bounded(params, "k", 5, MAX_K),
            budget=_bounded(params, "budget", 1500, MAX_BUDGET),
            include_archived=params.get("include_archived") in ("1", "on", "true"),
            values={
                name: params.get(name, "")
                for name in (
                    "q",
                    "owners",
                    "prefix",
                    "tags",
                    "strategy",
                    "strategy_json",
                    "k",
                    "budget",
                    "include_archived",
                )
            },
        )
        form.strategy()  # a bad custom spec is refused now
        return form

    @property
    def ready(self) -> bool:
        """A recall is always within owners: some owner, or a prefix naming one."""
        return bool(self.owners or self.prefix.count(":") >= 1)

    def strategy(self) -> RecallStrategy | None:
        if self.strategy_name != "custom":
            return STRATEGIES[self.strategy_name]
        try:
            spec = json.loads(self.strategy_json or "{}")
        except ValueError as exc:
            raise FormError(f"the custom strategy is not JSON: {exc}") from None
        if not isinstance(spec, dict):
            raise FormError('a strategy is a JSON object, e.g. {"name": "no_decay"}')
        try:
            return parse_strategy(spec)
        except StrategyError as exc:
            raise FormError(str(exc)) from None


async def run_recall(client: MemoryClient, form: RecallForm) -> RecallReply:
    return await client.recall(
        form.query,
        owners=form.owners,
        prefix=form.prefix,
        types=form.types,
        tags=form.tags,
        k=form.k,
        budget=form.budget,
        strategy=form.strategy(),
        explain=True,
        include_archived=form.include_archived,
    )


async def flagged_sensitive(client: MemoryClient, reply: RecallReply) -> set[str]:
    """The recalled memories that were put with ``sensitive=True`` (a recall reply does
    not say: each is read back, live or archived, through the same client)."""

    async def flagged(key: str, archived: bool) -> bool:
        if archived:
            found = await client.archived(owner_of(key), key=key)
            return any(i.sensitive for i in found.items)
        item = await client.get(key, slide=False)
        return item is not None and item.sensitive

    memories = reply.memories
    flags = await asyncio.gather(*(flagged(m.key, m.archived) for m in memories))
    return {m.key for m, flag in zip(memories, flags, strict=True) if flag}


def _pct(value: float, scale: float) -> float:
    return round(100.0 * max(0.0, min(value / scale, 1.0)), 2) if scale > 0 else 0.0


def explain_view(
    reply: RecallReply, budget: int, masker: Masker, sensitive: set[str]
) -> dict[str, Any]:
    """The reply (as the API gives it) and what the page draws from it: per candidate, bar
    widths for relevance (against the best candidate's), decay (0..1) and feedback (against
    the largest weight, at least 1); and the meter: tokens injected and the baseline
    against the budget line."""
    candidates = reply.candidates
    top_relevance = max((c.relevance for c in candidates), default=0.0)
    top_feedback = max([1.0, *(c.feedback for c in candidates)])
    rows = []
    for rank, c in enumerate(candidates, 1):
        kept = c.decision.startswith("kept")
        verdict, _, why = c.decision.partition(": ")
        rows.append(
            {
                "rank": rank,
                "key": c.key,
                "score": c.score,
                "relevance": c.relevance,
                "decay": c.decay,
                "feedback": c.feedback,
                "tokens": c.tokens,
                "decision": c.decision,
                "kept": kept,
                "why": why or verdict,
                "width": {
                    "relevance": _pct(c.relevance, top_relevance),
                    "decay": _pct(c.decay, 1.0),
                    "feedback": _pct(c.feedback, top_feedback),
                },
            }
        )
    scale = max(reply.baseline_tokens, budget, reply.tokens, 1)
    # One line per memory, in the reply's order ("[date type key] content", see
    # recall.packing): a sensitive memory's line keeps its header, not its content.
    context_lines = []
    for line, memory in zip(reply.context.splitlines(), reply.memories, strict=False):
        header, sep, _ = line.partition("] ")
        hidden = masker.hidden(memory.key, memory.key in sensitive)
        context_lines.append(header + sep + REDACTED if hidden else line)
    context = "\n".join(context_lines) + "\n" if reply.memories else reply.context
    shown = msgspec.to_builtins(reply)
    shown["context"] = context
    for memory in shown["memories"]:
        if masker.hidden(memory["key"], memory["key"] in sensitive):
            memory["content"] = REDACTED
    return {
        "reply": shown,
        "rows": rows,
        "kept": sum(1 for r in rows if r["kept"]),
        "budget": budget,
        "context": context,
        "meter": {
            "tokens": _pct(reply.tokens, scale),
            "budget": _pct(budget, scale),
            "baseline": _pct(reply.baseline_tokens, scale),
            "scale": scale,
        },
    }

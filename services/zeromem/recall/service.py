"""Recall: a few short memories that matter for a query, within a token budget.

Filters, then ranking (BM25 over content, key name and tags; time decay; feedback), then
greedy packing into the budget with linked memories pulled in after the memory that
references them. The reply carries a ready-to-inject context block, the tokens it costs,
the baseline (every memory that passed the filters), and, with ``explain``, every
candidate with its scores and the reason it was kept or cut.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from redis.asyncio import Redis

from zeromem.limits import Limits, refusal
from zeromem.recall.dates import date_range
from zeromem.recall.evidence import evidence
from zeromem.recall.expansion import Expander, shared_expander
from zeromem.recall.packing import PackItem, PackResult, pack
from zeromem.recall.ranking import Ranking, RankingConfig, score_candidates
from zeromem.recall.retrieve import Filters, Gathered, fetch_items, gather
from zeromem.recall.strategies import compile_strategy
from zeromem.schemas import (
    Candidate,
    MemoryKey,
    MemoryType,
    RecalledMemory,
    RecallReply,
    RecallRequest,
    RecallScope,
)
from zeromem.store.card import Card, card_of
from zeromem.store.text import field_terms, terms
from zeromem.store.tokens import DEFAULT_ENCODING, token_counter
from zeromem.store.usage import UsageLedger
from zeromem.telemetry import Telemetry

EXPLAIN_LIMIT = 200  # candidates listed in the explain view, best first


class Flushable(Protocol):
    async def flush(self) -> None: ...


class RecallError(ValueError):
    """A request that cannot be served as asked (the reply is an error, code bad_request)."""


def scope_owners(scope: RecallScope) -> list[str]:
    owners = list(dict.fromkeys(scope.owners))
    if not owners and scope.prefix:
        # "user:u1:pref" names its owner; a recall is always within owners
        parts = scope.prefix.split(":")
        if len(parts) >= 2 and parts[1]:
            owners = [f"{parts[0]}:{parts[1]}"]
    if not owners:
        raise RecallError(
            "a recall needs at least one owner in scope (e.g. 'user:u1'), "
            "or a key prefix that names one"
        )
    for owner in owners:
        try:
            parsed = MemoryKey.parse(owner)
        except ValueError as exc:
            raise RecallError(f"invalid owner {owner!r}: expected 'namespace:owner_id'") from exc
        if parsed.name is not None:
            raise RecallError(f"invalid owner {owner!r}: expected 'namespace:owner_id'")
    return owners


class RecallService:
    def __init__(
        self,
        redis: Redis,
        config: RankingConfig | None = None,
        telemetry: Telemetry | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.redis = redis
        self.config = config or RankingConfig()
        self.limits = limits or Limits()
        self.telemetry = telemetry or Telemetry()
        self.telemetry.bound(self.limits.metric_tenants, self.limits.metric_agents)
        self.usage = UsageLedger(redis)
        # Query expansion's model (recall.expansion); None: the process's shared one,
        # loaded on the first recall that expands.
        self.expander: Expander | None = None
        # Whether other tenants' requests arrive too (the read services set it: their
        # gate's view, query.gate); while they do, a recall's calls go to Redis
        # ``Limits.recall_calls_at_once_shared`` at a time.
        self.shared: Callable[[], bool] = lambda: False
        # Called with each answered recall (the read services set it: the audit record of
        # the read, with the reader and the keys recalled). Must not block.
        self.on_read: Callable[[RecallRequest, RecallReply], None] | None = None
        # What ``on_read`` hands its records to, flushed when the service stops (the read
        # services set it: ``query.audit_batch``).
        self.audit: Flushable | None = None

    async def recall(self, request: RecallRequest) -> RecallReply:
        started = time.perf_counter()
        reply = await self.answer(request)
        self.answered(request, reply, time.perf_counter() - started)
        return reply

    async def answer(self, request: RecallRequest) -> RecallReply:
        """The reply alone. A caller that sends it on must then call ``answered``: the
        responder does so after sending, so the metrics, the usage ledger and the audit
        record of the read never delay a reply."""
        return await self._recall(request)

    def answered(self, request: RecallRequest, reply: RecallReply, elapsed_s: float) -> None:
        """Record an answered recall: metrics, usage, and the ``on_read`` hook."""
        self.telemetry.record_recall(
            request.tenant, request.reader, reply.tokens, reply.baseline_tokens, elapsed_s
        )
        # The ledger names the same agents the metrics do (bounded per tenant).
        agent = self.telemetry.agent(request.tenant, request.reader) if request.reader else ""
        self.usage.record(
            request.tenant,
            agent,
            _content_tokens(reply),
            reply.baseline_tokens,
            request.history_tokens,
        )
        if request.history_tokens:
            self.telemetry.history_tokens.add(
                request.history_tokens, self.telemetry.attributes(request.tenant, request.reader)
            )
        if self.on_read is not None:
            self.on_read(request, reply)

    async def _recall(self, request: RecallRequest) -> RecallReply:
        now = time.time()
        strategy = compile_strategy(request.strategy)  # validated when the request was decoded
        try:
            count = token_counter(request.encoding)
        except ValueError as exc:
            raise RecallError(str(exc)) from exc
        owners = scope_owners(request.scope)
        # The strategy's filters run before ranking, as the scope's do, and count in the
        # baseline; its exact filters (every ``only`` step) run again in the scoring.
        filters = Filters.of(request.scope, strategy.window_s, now)
        only_tags, only_types = strategy.only_values(on_tags=True), strategy.only_values(False)
        if only_tags and not filters.tags:
            filters = Filters(
                filters.types, only_tags, filters.since, filters.until, filters.prefix
            )
        if only_types and not filters.types:
            filters = Filters(
                only_types, filters.tags, filters.since, filters.until, filters.prefix
            )
        query_terms = list(dict.fromkeys(terms(request.query)))
        if len(query_terms) > self.limits.query_terms:
            raise RecallError(
                refusal(
                    "query_terms",
                    f"{len(query_terms)} distinct terms in the "
                    f"query, limit {self.limits.query_terms}",
                )
            )
        try:
            config = strategy.config(self.config)
        except ValueError as exc:  # a setting RankingConfig refuses (its own bounds)
            raise RecallError(str(exc)) from exc
        if query_terms and config.speaker_weight > 0.0:
            query_terms += field_terms(query_terms)  # any query word may name a speaker
        expanded = self._expand(request.query, query_terms, config)
        query_terms += expanded
        dates = date_range(request.query) if config.date_weight != 1.0 else None

        gathered = await gather(
            self.redis,
            request.tenant,
            owners,
            query_terms,
            filters,
            k=request.k,
            encoding=request.encoding,
            config=config,
            now=now,
            explain=request.explain,
            date_range=dates,
            owners_per_call=self.limits.recall_owners_per_call,
            calls_at_once=(
                self.limits.recall_calls_at_once_shared
                if self.shared()
                else self.limits.recall_calls_at_once
            ),
            term_weights=expanded,
        )
        if request.include_archived:
            # The archive tier is in no index: its records are read and analysed here.
            from zeromem.recall.archived import archived_candidates

            extra, archived = await archived_candidates(
                self.redis,
                request.tenant,
                owners,
                query_terms,
                filters.admits,
                request.encoding,
            )
            for features in extra:
                if features.key not in gathered.items:  # a live memory shadows its archive
                    gathered.features.append(features)
                    gathered.items[features.key] = card_of(archived[features.key])
        ranking = score_candidates(
            gathered.features,
            query_terms,
            gathered.stats,
            now,
            self.config,
            strategy,
            neighbours=gathered.neighbours,
            date_range=dates,
            term_weights=expanded,
        )

        items = gathered.items
        # A query whose terms match nothing recalls nothing: recent but unrelated memories
        # would cost tokens and tell the model nothing. An empty query ranks by recency.
        k = request.k if ranking.relevance_mode or not query_terms else 0
        min_evidence = ranking.config.min_evidence
        if (
            k
            and min_evidence > 0.0
            and ranking.relevance_mode
            and evidence(ranking, query_terms, expanded, gathered.stats) < min_evidence
        ):
            k = 0  # nothing in scope answers the question (recall.evidence)
        await self._prefetch_references(request, ranking, items, now)
        result = pack(
            ranking, k, request.budget, lambda key: _pack_item(key, items.get(key)), count
        )

        memories = []
        for packed in result.kept:
            key = packed.item.key
            card = items[key]
            scored = packed.candidate  # None for a memory pulled in as a reference
            memories.append(
                RecalledMemory(
                    key=key,
                    content=card.content,
                    type=MemoryType(card.type),
                    created_at=card.created_at,
                    updated_at=card.updated_at,
                    version=card.version,
                    score=round(scored.score, 6) if scored else 0.0,
                    tokens=packed.tokens,
                    via=packed.via,
                    archived=card.archived,
                )
            )
        candidates: tuple[Candidate, ...] = ()
        if request.explain:
            candidates = self._explain(ranking, result, gathered)
        baseline = gathered.baseline_tokens
        return RecallReply(
            memories=tuple(memories),
            context=result.context,
            tokens=result.tokens_used,
            baseline_tokens=baseline,
            saved_tokens=max(0, baseline - result.tokens_used),
            baseline_estimated=gathered.baseline_estimated,
            candidates=candidates,
        )

    def _expand(self, query: str, have: list[str], config: RankingConfig) -> dict[str, float]:
        """The expanded terms of ``query`` (``recall.expansion``) that it does not have
        already, the strongest ``expansion_max_terms``, each with its weight factor."""
        if config.expansion_weight <= 0.0 or not have or config.expansion_max_terms <= 0:
            return {}
        expander = self.expander if self.expander is not None else shared_expander()
        extra = expander.expand(
            query,
            int(config.expansion_per_word),
            config.expansion_min_similarity,
            config.expansion_weight,
        )
        known = set(have)
        ranked = sorted(
            ((term, factor) for term, factor in extra.items() if term not in known),
            key=lambda pair: (-pair[1], pair[0]),
        )
        return dict(ranked[: int(config.expansion_max_terms)])

    async def _prefetch_references(
        self, request: RecallRequest, ranking: Ranking, items: dict[str, Card], now: float
    ) -> None:
        """Fetch the memories the best candidates reference (two links deep), so the packer
        can pull them in; they may lie outside the scope."""
        if not any(card.references for card in items.values()):
            return  # the usual case: nothing to look up, nor to order the ranking for
        top = range(min(request.k * 4, len(ranking)))
        frontier = {ref for i in top for ref in items[ranking.key_at(i)].references}
        for _depth in range(2):
            wanted = sorted(ref for ref in frontier if ref not in items)
            if not wanted:
                return
            fetched = await fetch_items(self.redis, request.tenant, wanted, request.encoding, now)
            items.update(fetched)
            frontier = {ref for card in fetched.values() for ref in card.references}

    @staticmethod
    def _explain(ranking: Ranking, result: PackResult, gathered: Gathered) -> tuple[Candidate, ...]:
        out = [
            Candidate(
                key=c.key,
                score=round(c.score, 6),
                relevance=round(c.relevance, 6),
                decay=round(c.decay, 6),
                feedback=round(c.feedback, 6),
                tokens=c.features.tokens,
                decision=result.decision(c),
            )
            for c in ranking[:EXPLAIN_LIMIT]
        ]
        out += [
            Candidate(
                key=f.key,
                score=0.0,
                relevance=0.0,
                decay=0.0,
                feedback=0.0,
                tokens=f.tokens,
                decision="cut: filtered by strategy",
            )
            for f in ranking.dropped[: max(0, EXPLAIN_LIMIT - len(out))]
        ]
        out += [
            Candidate(
                key=key,
                score=round(estimate, 6),
                relevance=0.0,
                decay=0.0,
                feedback=0.0,
                tokens=0,
                decision="cut: below the exact-scoring cut (stage one)",
            )
            for key, estimate in gathered.stage_one_cut[: max(0, EXPLAIN_LIMIT - len(out))]
        ]
        return tuple(out)


def _pack_item(key: str, card: Card | None) -> PackItem | None:
    if card is None:
        return None
    return PackItem(key, card.content, card.type, card.updated_at, card.references)


def _content_tokens(reply: RecallReply) -> int:
    """The injected memories' content tokens, counted as the baseline counts every memory
    in scope: content only, cl100k_base (the workers' cached count). The block's lines
    also carry a ``[date type key]`` header (10-20 tokens a memory) that injecting every
    memory would need as well; counted on one side only, it made ``zeromem stats`` show
    "saved -29 (-264%)" for a recall of one short memory out of one. ``reply.tokens``
    keeps the exact cost of the block, headers included, for the agent's budget."""
    count = token_counter(DEFAULT_ENCODING)
    return sum(count(memory.content) for memory in reply.memories)

"""What the LangGraph store computes in the client, as LangGraph's InMemoryStore does: the
order of a scan's items, BM25 scores for ``query``, namespace match conditions and JSONB-like
filters (``$eq $ne $gt $gte $lt $lte``). Pure functions over the rows of a scan."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from zeromem.recall.ranking import bm25
from zeromem.schemas import MemoryItem
from zeromem.store.text import terms

if TYPE_CHECKING:  # annotations only: importing this module needs no langgraph
    from langgraph.store.base import MatchCondition


class Row:
    """One item of a scan, parsed once: its LangGraph namespace and key, the memory, and
    its times as LangGraph gives them."""

    __slots__ = ("created_at", "item", "key", "namespace", "updated_at")

    def __init__(self, namespace: tuple[str, ...], key: str, item: MemoryItem) -> None:
        self.namespace, self.key, self.item = namespace, key, item
        self.created_at, self.updated_at = (
            utc_datetime(item.created_at),
            utc_datetime(item.updated_at),
        )


def insertion_order(rows: list[Row]) -> list[Row]:
    """Group by namespace in order of each namespace's oldest item, items by creation."""
    first: dict[tuple[str, ...], float] = {}
    for row in rows:
        first[row.namespace] = min(first.get(row.namespace, math.inf), row.item.created_at)
    return sorted(rows, key=lambda r: (first[r.namespace], r.namespace, r.item.created_at, r.key))


def bm25_scores(query: str, texts: list[str]) -> list[float | None]:
    query_terms = list(dict.fromkeys(terms(query)))
    docs = [terms(text) for text in texts]
    if not docs or not query_terms:
        return [None] * len(texts)
    avg_len = sum(map(len, docs)) / len(docs)
    df = {t: sum(1 for d in docs if t in d) for t in query_terms}
    scores: list[float | None] = []
    for doc in docs:
        total = sum(
            bm25(doc.count(t), df[t], len(docs), len(doc), avg_len, 1.2, 0.75) for t in query_terms
        )
        scores.append(total if total > 0 else None)
    return scores


def utc_datetime(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = condition.path
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"Unsupported match type: {condition.match_type}")
    return all(p == "*" or k == p for k, p in pairs)


def compare_values(item_value: Any, filter_value: Any) -> bool:
    """JSONB-like comparison with ``$eq $ne $gt $gte $lt $lte``, as LangGraph's stores do."""
    if isinstance(filter_value, dict):
        if any(k.startswith("$") for k in filter_value):
            return all(_apply_operator(item_value, k, v) for k, v in filter_value.items())
        if not isinstance(item_value, dict):
            return False
        return all(compare_values(item_value.get(k), v) for k, v in filter_value.items())
    if isinstance(filter_value, list | tuple):
        return (
            isinstance(item_value, list | tuple)
            and len(item_value) == len(filter_value)
            and all(compare_values(i, f) for i, f in zip(item_value, filter_value, strict=False))
        )
    return bool(item_value == filter_value)


def _apply_operator(value: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(value == operand)
    if operator == "$ne":
        return bool(value != operand)
    if operator in ("$gt", "$gte", "$lt", "$lte"):
        a, b = float(value), float(operand)
        return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[operator]
    raise ValueError(f"Unsupported operator: {operator}")

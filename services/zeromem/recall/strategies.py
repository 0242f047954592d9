"""What a request's strategy (``zeromem.schemas.strategies``, already validated when the
request was decoded) does to a recall, compiled into one flat ``Strategy``: the ranking
settings it overrides, the filters it applies, the boosts it multiplies.

A ``compose`` flattens into the same shape: its steps' overrides apply in order (a later
step's win), every filter must keep a memory (time windows: the shortest), boosts
multiply. So scoring asks one object, never walks a tree per candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from msgspec import UNSET

from zeromem.recall.factors import CandidateFeatures, RankingConfig
from zeromem.schemas.strategies import (
    ByTagStrategy,
    ByTypeStrategy,
    ComposeStrategy,
    FeedbackWeightStrategy,
    NoDecayStrategy,
    RecallStrategy,
    RecencyStrategy,
    StrategyError,
    TimeWindowStrategy,
    parse_strategy,
)


@dataclass(frozen=True, slots=True)
class Match:
    """One by_tag (``tags``) or by_type (``types``) step: memories matching ``values``
    score ``factor`` times higher, and with ``only`` the others are dropped."""

    values: frozenset[str]
    factor: float
    only: bool
    on_tags: bool  # by_tag; else by_type

    def matches(self, c: CandidateFeatures) -> bool:
        return not self.values.isdisjoint(c.tags) if self.on_tags else c.type in self.values


@dataclass(frozen=True, slots=True)
class Strategy:
    """How one recall ranks. ``filters`` / ``boosts`` say whether ``keep`` / ``boost``
    can ever differ from the neutral answer, so the scorer skips the calls entirely for
    plain strategies."""

    overrides: tuple[tuple[str, Any], ...] = ()  # RankingConfig fields, in order
    window_s: float | None = None  # keep memories updated this recently only
    matches: tuple[Match, ...] = ()

    @property
    def filters(self) -> bool:
        return self.window_s is not None or any(m.only for m in self.matches)

    @property
    def boosts(self) -> bool:
        return any(m.factor != 1.0 for m in self.matches)

    def config(self, base: RankingConfig) -> RankingConfig:
        return replace(base, **dict(self.overrides)) if self.overrides else base

    def keep(self, c: CandidateFeatures, now: float) -> bool:
        if self.window_s is not None and c.updated_at < now - self.window_s:
            return False
        return all(m.matches(c) for m in self.matches if m.only)

    def boost(self, c: CandidateFeatures) -> float:
        factor = 1.0
        for m in self.matches:
            if m.factor != 1.0 and m.matches(c):
                factor *= m.factor
        return factor

    def only_values(self, on_tags: bool) -> frozenset[str]:
        """Every tag (or type) some ``only`` step requires: a filter that runs before
        ranking (and counts in the baseline); ``keep`` then applies each step exactly."""
        wanted = (m.values for m in self.matches if m.only and m.on_tags == on_tags)
        return frozenset().union(*wanted)


DEFAULT = Strategy()


def compile_strategy(spec: RecallStrategy | None) -> Strategy:
    """The ``Strategy`` a request's strategy (None: the default) describes."""
    if spec is None:
        return DEFAULT
    overrides: list[tuple[str, Any]] = []
    windows: list[float] = []
    matches: list[Match] = []
    _collect(spec, overrides, windows, matches)
    return Strategy(tuple(overrides), min(windows) if windows else None, tuple(matches))


def _collect(
    spec: RecallStrategy,
    overrides: list[tuple[str, Any]],
    windows: list[float],
    matches: list[Match],
) -> None:
    if isinstance(spec, ComposeStrategy):
        for step in spec.steps:
            _collect(step, overrides, windows, matches)
    elif isinstance(spec, TimeWindowStrategy):
        windows.append(spec.seconds)
    elif isinstance(spec, ByTagStrategy):
        matches.append(Match(frozenset(spec.tags), spec.boost, spec.only, on_tags=True))
    elif isinstance(spec, ByTypeStrategy):
        types = frozenset(t.value for t in spec.types)
        matches.append(Match(types, spec.boost, spec.only, on_tags=False))
    elif isinstance(spec, FeedbackWeightStrategy):
        _set(overrides, "liked_weight", spec.liked)
        _set(overrides, "disliked_weight", spec.disliked)
        _set(overrides, "important_weight", spec.important)
        _set(overrides, "feedback_max_exponent", spec.max_exponent)
    elif isinstance(spec, RecencyStrategy):
        _set(overrides, "half_life_s", spec.half_life_s)
        _set(overrides, "decay_floor", spec.floor)
    elif isinstance(spec, NoDecayStrategy):
        overrides.append(("half_life_s", None))
    # DefaultStrategy: nothing to change


def _set(overrides: list[tuple[str, Any]], field: str, value: object) -> None:
    if value is not UNSET:
        overrides.append((field, value))


def build_strategy(spec: Any) -> Strategy:
    """A strategy given as plain data (a dict as ``--strategy`` or a form carries it) or
    as the typed union, compiled. Raises ``StrategyError`` (a ``ValueError``)."""
    return compile_strategy(parse_strategy(spec))


__all__ = ["DEFAULT", "Match", "Strategy", "StrategyError", "build_strategy", "compile_strategy"]

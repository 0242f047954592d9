"""How a recall ranks (``RecallRequest.strategy``): a tagged union on ``name``.

Each kind is a frozen struct that rejects unknown fields, so a typo, a missing parameter or
a bad value is refused when the request is decoded, with the path of the field
(``bad_request``), and the JSON Schema lists every kind with its parameters. What each
kind does to the ranking is ``zeromem.recall.strategies``'.

The wire form is the one the services always took, ``{"name": "by_tag", "tags": [...],
...}``, and so is the default: the field left out, nil, ``{"name": "default"}``, or the
empty map the first clients sent. A union cannot decode that last one (it has no tag):
the read services take it on a second decode of the refused request
(``query.admission``), and the published schema lists it beside the union
(``EMPTY_STRATEGY``, added by ``zeromem.schemas.export``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Final

import msgspec
from msgspec import UNSET, UnsetType

from zeromem.schemas.memory import MemoryType

MAX_COMPOSE_STEPS: Final = 16
MAX_COMPOSE_DEPTH: Final = 4  # a compose within a compose within ... at most this deep

Positive = Annotated[float, msgspec.Meta(gt=0.0)]
NonNegative = Annotated[float, msgspec.Meta(ge=0.0)]
Fraction = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Exponent = Annotated[float, msgspec.Meta(ge=1.0, le=16.0)]


class _Strategy(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, tag_field="name"
):
    def __post_init__(self) -> None:
        # msgspec's bounds let infinity through (and NaN where none is set): every number
        # of a strategy is finite, as RankingConfig requires of the values they set.
        for field in self.__struct_fields__:
            value = getattr(self, field)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{field} must be a finite number")


class DefaultStrategy(_Strategy, frozen=True, tag="default"):
    """BM25 x decay x feedback with the service's ranking settings."""


class TimeWindowStrategy(_Strategy, frozen=True, tag="time_window"):
    """Only memories updated within the last ``seconds``."""

    seconds: Positive


class ByTagStrategy(_Strategy, frozen=True, tag="by_tag"):
    """Memories holding any of ``tags`` score ``boost`` times higher; with ``only``, the
    others are left out."""

    # Any non-empty strings, as before the union (a memory's tags are ``Tag``s, so one
    # with a space matches none).
    tags: Annotated[
        tuple[Annotated[str, msgspec.Meta(min_length=1)], ...], msgspec.Meta(min_length=1)
    ]
    boost: Positive = 2.0
    only: bool = False


class ByTypeStrategy(_Strategy, frozen=True, tag="by_type"):
    """As ``by_tag``, for memories of any of ``types``."""

    types: Annotated[tuple[MemoryType, ...], msgspec.Meta(min_length=1)]
    boost: Positive = 2.0
    only: bool = False


class FeedbackWeightStrategy(_Strategy, frozen=True, tag="feedback_weight"):
    """Other multipliers for liked, disliked and important memories (and another ceiling
    on repeats: ``max_exponent``); at least one of them."""

    liked: NonNegative | UnsetType = UNSET
    disliked: NonNegative | UnsetType = UNSET
    important: NonNegative | UnsetType = UNSET
    max_exponent: Exponent | UnsetType = UNSET

    def __post_init__(self) -> None:
        super().__post_init__()
        if all(v is UNSET for v in (self.liked, self.disliked, self.important, self.max_exponent)):
            raise ValueError(
                "strategy 'feedback_weight' needs at least one of liked, disliked, important, "
                "max_exponent"
            )


class RecencyStrategy(_Strategy, frozen=True, tag="recency"):
    """Another half-life (nil: no decay) and/or floor for the time decay."""

    half_life_s: NonNegative | UnsetType | None = UNSET
    floor: Fraction | UnsetType = UNSET

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.half_life_s is UNSET and self.floor is UNSET:
            raise ValueError("strategy 'recency' needs half_life_s and/or floor")


class NoDecayStrategy(_Strategy, frozen=True, tag="no_decay"):
    """Age does not matter."""


class ComposeStrategy(_Strategy, frozen=True, tag="compose"):
    """``steps`` in order: a later step's settings override an earlier one's, every
    filter must keep a memory, boosts multiply."""

    steps: Annotated[tuple[RecallStrategy, ...], msgspec.Meta(max_length=MAX_COMPOSE_STEPS)]

    def __post_init__(self) -> None:
        # Decoding builds the innermost compose first: each checks its own depth, which
        # its steps already bounded, so the walk is short.
        if compose_depth(self) > MAX_COMPOSE_DEPTH:
            raise ValueError(f"strategy 'compose' nested deeper than {MAX_COMPOSE_DEPTH}")


RecallStrategy = (
    DefaultStrategy
    | TimeWindowStrategy
    | ByTagStrategy
    | ByTypeStrategy
    | FeedbackWeightStrategy
    | RecencyStrategy
    | NoDecayStrategy
    | ComposeStrategy
)

STRATEGY_NAMES: Final = tuple(
    str(cls.__struct_config__.tag)
    for cls in (
        DefaultStrategy,
        TimeWindowStrategy,
        ByTagStrategy,
        ByTypeStrategy,
        FeedbackWeightStrategy,
        RecencyStrategy,
        NoDecayStrategy,
        ComposeStrategy,
    )
)


# The empty map as JSON Schema: the default strategy, as first published (``{}``).
EMPTY_STRATEGY: Final[dict[str, Any]] = {
    "type": "object",
    "maxProperties": 0,
    "description": "The default strategy, as the first clients sent it; prefer leaving "
    "the field out.",
}
# What msgspec says of a request whose strategy is the empty map.
EMPTY_STRATEGY_ERROR: Final = "Object missing required field `name` - at `$.strategy`"


def compose_depth(strategy: RecallStrategy) -> int:
    """How many composes deep ``strategy`` nests (0 for any other kind)."""
    if not isinstance(strategy, ComposeStrategy):
        return 0
    return 1 + max((compose_depth(step) for step in strategy.steps), default=0)


class StrategyError(ValueError):
    """A strategy that is not one of the union's; the message says what is wrong."""


_UNKNOWN_TAG = re.compile(r"^Invalid value (.*) - at `(\$[^`]*\.name)`$")


def explain_strategy_error(message: str) -> str:
    """msgspec's message for a strategy it could not decode, with the known kinds named
    when the ``name`` was the trouble ("Invalid value 'psychic' - at `$.strategy.name`")."""
    unknown = _UNKNOWN_TAG.match(message)
    if unknown is None:
        return message
    value, where = unknown.groups()
    return f"unknown strategy {value}; known: {', '.join(STRATEGY_NAMES)} - at `{where}`"


def parse_strategy(spec: Any) -> RecallStrategy | None:
    """A strategy given as plain data (``--strategy`` JSON, a form, an SDK argument) as the
    typed union; None (the default) for None or an empty map, as they always meant here.
    Raises ``StrategyError``."""
    if spec is None or isinstance(spec, RecallStrategy):
        return spec
    if not isinstance(spec, Mapping):
        raise StrategyError(f"a strategy is an object like {{'name': ...}}, got {spec!r}")
    if not spec:
        return None
    try:
        strategy: RecallStrategy = msgspec.convert(dict(spec), RecallStrategy)
        return strategy
    except msgspec.ValidationError as exc:
        # msgspec's path starts at the strategy itself ("- at `$.steps[0].tags`")
        where = explain_strategy_error(str(exc)).replace("`$", "`strategy")
        raise StrategyError(where) from None


__all__ = [
    "EMPTY_STRATEGY",
    "EMPTY_STRATEGY_ERROR",
    "MAX_COMPOSE_DEPTH",
    "MAX_COMPOSE_STEPS",
    "STRATEGY_NAMES",
    "ByTagStrategy",
    "ByTypeStrategy",
    "ComposeStrategy",
    "DefaultStrategy",
    "FeedbackWeightStrategy",
    "NoDecayStrategy",
    "RecallStrategy",
    "RecencyStrategy",
    "StrategyError",
    "TimeWindowStrategy",
    "compose_depth",
    "explain_strategy_error",
    "parse_strategy",
]

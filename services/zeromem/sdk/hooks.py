"""Automatic writes: memory recorded at fixed points of an agent's run, no model involved.

A model asked to "remember what matters" forgets to, or spends tokens deciding. The program
already knows the moments worth recording, so :class:`AutoMemory` writes at three of them:

* after a tool succeeds: the result, summarised by the encoder into content;
* on a task state transition: the task's current state, plus an appended history entry;
* when a user states a preference: found by a pluggable :class:`PreferenceRules` set of
  regex / keyword rules (English and Chinese out of the box).

Every write is fire-and-forget by default (``wait="none"``): the hook returns as soon as
the command is handed to the connection, so the agent never waits on memory.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from zeromem.encoding import Encoder, default_encoder, encode_value
from zeromem.schemas import CONTENT_MAX_CHARS, MemoryType
from zeromem.sdk.client import MemoryClient, Receipt, Wait

F = TypeVar("F", bound=Callable[..., Any])

# A tool result bigger than this is not stored as the value (it would risk the 64 KiB
# command limit and nobody reads it back whole); its encoded content is kept instead.
MAX_STORED_RESULT_BYTES = 16 * 1024

_ID_SAFE = re.compile(r"[^A-Za-z0-9_\-]+")
_NAME_SAFE = re.compile(r"[^A-Za-z0-9_\-./@]+")


def safe_id(text: str, max_len: int = 64) -> str:
    """``text`` squeezed into the owner-id alphabet (``[A-Za-z0-9_-]``), never empty."""
    cleaned = _ID_SAFE.sub("_", text).strip("_")[:max_len]
    return cleaned or f"x{zlib.crc32(text.encode()):08x}"


def safe_name(text: str, max_len: int = 128) -> str:
    """``text`` squeezed into the key-name alphabet, never empty."""
    cleaned = _NAME_SAFE.sub("_", text).strip("_")[:max_len]
    return cleaned or f"x{zlib.crc32(text.encode()):08x}"


# --- preference rules ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PreferenceMatch:
    rule: str
    slot: str  # the key name under the user's owner: "pref.lang", "pref.<hash>"...
    polarity: str  # "like", "dislike" or "set"
    object: str  # what the preference is about ("Chinese", "dark mode", "咖啡")
    sentence: str  # the sentence that stated it


@dataclass(frozen=True, slots=True)
class PreferenceRule:
    """One way of stating a preference.

    ``pattern`` must have a group named ``obj`` capturing what the preference is about.
    ``slot`` fixes the key name (``"pref.lang"``: a later statement replaces the earlier);
    without one the name is ``pref.<crc32 of the normalised object>``, so "I like tea" and
    a later "I don't like tea" land on the same key and the later one wins.
    ``normalize`` maps the captured object to a canonical value (e.g. 中文 -> zh).
    """

    name: str
    pattern: re.Pattern[str]
    polarity: str = "like"
    slot: str | None = None
    normalize: Callable[[str], str] | None = None

    @classmethod
    def regex(cls, name: str, pattern: str, **kwargs: Any) -> PreferenceRule:
        return cls(name, re.compile(pattern, re.IGNORECASE), **kwargs)

    @classmethod
    def keywords(cls, name: str, words: Iterable[str], **kwargs: Any) -> PreferenceRule:
        """A rule from trigger phrases: whatever follows one of ``words`` is the object."""
        alternatives = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
        return cls.regex(name, rf"(?:{alternatives})\s*(?P<obj>.+)", **kwargs)

    def match(self, sentence: str) -> PreferenceMatch | None:
        found = self.pattern.search(sentence)
        if found is None:
            return None
        raw = found.group("obj").strip(" \t,.;:!?，。；：！？、\"'“”")
        if not raw:
            return None
        obj = self.normalize(raw) if self.normalize else raw
        slot = self.slot or f"pref.{zlib.crc32(obj.casefold().encode()):08x}"
        return PreferenceMatch(self.name, slot, self.polarity, obj, sentence)


_LANGS = {
    "chinese": "zh",
    "mandarin": "zh",
    "中文": "zh",
    "汉语": "zh",
    "普通话": "zh",
    "english": "en",
    "英文": "en",
    "英语": "en",
    "japanese": "ja",
    "日语": "ja",
    "french": "fr",
    "法语": "fr",
    "german": "de",
    "德语": "de",
    "spanish": "es",
    "西班牙语": "es",
}


def _language(raw: str) -> str:
    return _LANGS.get(raw.casefold(), raw.casefold())


_LANG_WORDS = "|".join(sorted(map(re.escape, _LANGS), key=len, reverse=True))


def default_preference_rules() -> list[PreferenceRule]:
    """English and Chinese rules; order matters (the first matching rule wins per sentence)."""
    r = PreferenceRule.regex
    return [
        r(
            "language",
            rf"\b(?:answer|reply|respond|speak|write|talk)\b.*?\bin\s+(?P<obj>{_LANG_WORDS})\b",
            polarity="set",
            slot="pref.lang",
            normalize=_language,
        ),
        r(
            "language_zh",
            rf"(?:用|说|讲)(?P<obj>{_LANG_WORDS})(?:回答|回复|交流|写|说|讲)?",
            polarity="set",
            slot="pref.lang",
            normalize=_language,
        ),
        r(
            "name",
            r"\b(?:call me|my name is)\s+(?P<obj>[\w\- ]{1,40})",
            polarity="set",
            slot="profile.name",
        ),
        r(
            "name_zh",
            r"(?:叫我|我叫|我的名字是)(?P<obj>[^\s，。,.!！？?]{1,20})",
            polarity="set",
            slot="profile.name",
        ),
        r(
            "dislike",
            r"\bI\s+(?:really\s+)?(?:don'?t|do not|never)\s+(?:like|want|enjoy)\s+(?P<obj>.+)",
            polarity="dislike",
        ),
        r("dislike_hate", r"\bI\s+(?:hate|dislike|can'?t stand)\s+(?P<obj>.+)", polarity="dislike"),
        r(
            "avoid",
            r"\b(?:please\s+)?(?:don'?t|do not|never)\s+(?:ever\s+)?"
            r"(?P<obj>(?:use|send|call|show|add|include|mention)\b.+)",
            polarity="dislike",
        ),
        r("dislike_zh", r"我(?:不喜欢|不想要|不要|讨厌|不爱)(?P<obj>.+)", polarity="dislike"),
        r("avoid_zh", r"(?:请|以后)?(?:不要|别|千万别)(?P<obj>.+)", polarity="dislike"),
        r(
            "prefer",
            r"\bI(?:'d| would)?\s+(?:really\s+)?(?:prefer|like|love|enjoy|want)\s+(?P<obj>.+)",
        ),
        r("always", r"\b(?:please\s+)?always\s+(?P<obj>.+)"),
        r("prefer_zh", r"我(?:更)?(?:喜欢|偏好|倾向于|习惯|爱|想要)(?P<obj>.+)"),
        r("always_zh", r"(?:请|以后)?(?:总是|始终|每次都)(?P<obj>.+)"),
    ]


_SENTENCES = re.compile(r"[^.!?。！？\n;；]+[.!?。！？;；]?")


class PreferenceRules:
    """A rule set, matched sentence by sentence. Pluggable: pass your own rules, or
    ``extend`` the defaults with a team's phrasings."""

    def __init__(self, rules: Sequence[PreferenceRule] | None = None) -> None:
        self.rules: list[PreferenceRule] = list(
            default_preference_rules() if rules is None else rules
        )

    def extend(self, rules: Iterable[PreferenceRule]) -> PreferenceRules:
        self.rules.extend(rules)
        return self

    def find(self, text: str) -> list[PreferenceMatch]:
        """Every stated preference in ``text``; one per sentence, the last per slot."""
        by_slot: dict[str, PreferenceMatch] = {}
        for piece in _SENTENCES.findall(text):
            sentence = piece.strip()
            if not sentence:
                continue
            for rule in self.rules:
                found = rule.match(sentence)
                if found is not None:
                    by_slot.pop(found.slot, None)
                    by_slot[found.slot] = found
                    break
        return list(by_slot.values())


# --- the hooks -----------------------------------------------------------------------------


@dataclass
class AutoMemory:
    """Hooks that write memory at fixed points; every write defaults to fire-and-forget.

    ``owner`` is where tool results go (e.g. ``session:s1`` or ``task:t42``); a call can
    name another. Failures of the memory layer never break the agent: a hook that cannot
    publish (bad key, connection down) records the error in ``errors`` and returns ``None``.
    """

    client: MemoryClient
    owner: str = "session:default"
    rules: PreferenceRules = field(default_factory=PreferenceRules)
    encoder: Encoder = field(default_factory=default_encoder)
    wait: Wait | str = Wait.NONE
    errors: list[str] = field(default_factory=list)
    writes: int = 0

    async def tool_succeeded(
        self,
        tool: str,
        arguments: Any,
        result: Any,
        *,
        owner: str | None = None,
        tags: Iterable[str] = (),
    ) -> Receipt | None:
        """Record a successful tool call: appended under ``owner`` as a ``tool_result``."""
        stored: Any = {"tool": tool, "arguments": arguments, "result": result}
        try:
            too_big = len(json.dumps(stored, default=str)) > MAX_STORED_RESULT_BYTES
        except (TypeError, ValueError):
            too_big = True
        # Content leads with the tool name so keyword recall finds "search_flights" later.
        summary = encode_value(result, encoder=self.encoder, hint=tool)
        content = _fit(f"{tool}: {summary}", self.encoder, hint=tool)
        if too_big:
            stored = {"tool": tool, "arguments": _jsonable(arguments), "result_omitted": True}
        return await self._put(
            owner or self.owner,
            None,
            stored,
            content,
            MemoryType.TOOL_RESULT,
            ("tool", f"tool:{safe_name(tool, 58)}", *tags),
        )

    async def task_transition(
        self,
        task_id: str,
        state: str,
        *,
        previous: str | None = None,
        detail: str = "",
    ) -> Receipt | None:
        """Record that task ``task_id`` moved to ``state``: ``task:<id>:status`` holds the
        current state (overwritten), and the transition is appended to the task's history."""
        owner = f"task:{safe_id(task_id)}"
        moved = f"{previous} -> {state}" if previous else state
        content = _fit(
            f"task {task_id}: {moved}" + (f"; {detail}" if detail else ""),
            self.encoder,
            hint="task state",
        )
        value = {"state": state, "previous": previous, "detail": detail or None, "at": time.time()}
        receipt = await self._put(
            owner,
            "status",
            value,
            content,
            MemoryType.TASK_STATE,
            ("task_state", f"state:{safe_name(state, 56)}"),
        )
        await self._put(owner, None, value, content, MemoryType.SYSTEM_EVENT, ("transition",))
        return receipt

    async def user_message(self, text: str, *, user: str) -> list[Receipt]:
        """Scan a user's message with the rules; each stated preference becomes
        ``user:<user>:<slot>`` (type ``user_preference``)."""
        receipts: list[Receipt] = []
        owner = f"user:{safe_id(user)}"
        for match in self.rules.find(text):
            value = {
                "polarity": match.polarity,
                "object": match.object,
                "rule": match.rule,
                "text": match.sentence,
            }
            content = _fit(match.sentence, self.encoder, hint="preference")
            receipt = await self._put(
                owner,
                safe_name(match.slot),
                value,
                content,
                MemoryType.USER_PREFERENCE,
                ("preference", match.polarity),
            )
            if receipt is not None:
                receipts.append(receipt)
        return receipts

    def record_tool(self, name: str | None = None, *, owner: str | None = None) -> Callable[[F], F]:
        """Decorator: after the wrapped tool function returns (sync or async), record its
        result. An exception propagates and records nothing: only successes are memory."""

        def decorate(fn: F) -> F:
            tool = name or fn.__name__
            if inspect.iscoroutinefunction(fn):

                @functools.wraps(fn)
                async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                    result = await fn(*args, **kwargs)
                    await self.tool_succeeded(tool, _call_args(args, kwargs), result, owner=owner)
                    return result

                return async_wrapper  # type: ignore[return-value]
            raise TypeError("record_tool wraps async functions; use tool_succeeded() for sync")

        return decorate

    async def _put(
        self,
        owner: str,
        name: str | None,
        value: Any,
        content: str,
        type_: MemoryType,
        tags: Iterable[str],
    ) -> Receipt | None:
        key = f"{owner}:{name}" if name else owner
        try:
            receipt = await self.client.put(
                key, value, content=content, type=type_, tags=tags, source="auto", wait=self.wait
            )
        except Exception as exc:  # memory must never break the agent's run
            self.errors.append(f"{key}: {exc}")
            return None
        self.writes += 1
        return receipt


def _fit(text: str, encoder: Encoder, hint: str | None = None) -> str:
    text = " ".join(text.split())
    return (
        text
        if len(text) <= CONTENT_MAX_CHARS
        else encoder.encode(text, hint=hint)[:CONTENT_MAX_CHARS]
    )


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)[:500]
    return value


def _call_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _jsonable({"args": list(args), **kwargs} if args else kwargs)

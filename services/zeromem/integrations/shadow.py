"""Shadow mode: keep the agent as it is, measure what zeromem would save.

A team that stuffs the whole history into every request can wrap its agent with
:class:`ShadowMode` before changing anything. Each turn, the wrapper

1. counts the tokens the agent actually sends (the whole message list);
2. asks zeromem for a recall within ``budget`` for the latest user message, over what was
   recorded in earlier turns, and counts what a zeromem prompt would have sent instead
   (system messages + recalled context + the latest user message);
3. records the new messages into memory on the side (fire-and-forget by default), so the
   next turn's recall has them.

Nothing is injected into the agent's prompt: the agent's behaviour does not change, only
the report (:attr:`ShadowMode.reports`) grows. That is the first step of a migration.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from zeromem.encoding import Encoder, default_encoder
from zeromem.schemas import CONTENT_MAX_CHARS, MemoryType
from zeromem.sdk.client import MemoryClient, Wait
from zeromem.sdk.hooks import AutoMemory
from zeromem.store.tokens import count_tokens

Message = dict[str, Any]
# Per-message framing (role, separators) in chat formats, as OpenAI's token-counting
# guide estimates it; applied the same way to both sides of the comparison.
MESSAGE_OVERHEAD_TOKENS = 4


def message_text(message: Message) -> str:
    """The text of a chat message: string content, text parts, or tool-call arguments."""
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    else:
        text = ""
    calls = message.get("tool_calls") or ()
    if calls:
        text += " " + json.dumps([c.get("function", c) for c in calls], ensure_ascii=False)
    return text.strip()


def message_tokens(messages: Sequence[Message], encoding: str = "cl100k_base") -> int:
    return sum(count_tokens(message_text(m), encoding) + MESSAGE_OVERHEAD_TOKENS for m in messages)


@dataclass(frozen=True, slots=True)
class TurnReport:
    turn: int
    sent_tokens: int  # what the agent sent: the whole history
    zeromem_tokens: int  # system + recalled context + latest user message
    context_tokens: int  # the recalled context alone
    recalled: int  # how many memories the recall packed

    @property
    def saved_tokens(self) -> int:
        return self.sent_tokens - self.zeromem_tokens

    def line(self) -> str:
        return (
            f"turn {self.turn}: sent {self.sent_tokens} tokens, a {self.recalled}-memory "
            f"recall would send {self.zeromem_tokens} (saved {self.saved_tokens})"
        )


@dataclass
class ShadowMode:
    """Wrap an agent that sends its whole history; see the module docstring."""

    client: MemoryClient
    owner: str = "session:default"
    budget: int = 500
    k: int = 8
    encoding: str = "cl100k_base"
    wait: Wait | str = Wait.NONE
    encoder: Encoder = field(default_factory=default_encoder)
    auto: AutoMemory | None = None  # also scan user messages for preferences
    user: str | None = None  # whose preferences (needed with ``auto``)
    reports: list[TurnReport] = field(default_factory=list)
    _recorded: int = field(default=0, init=False, repr=False)

    async def observe(self, messages: Sequence[Message]) -> TurnReport:
        """Measure one turn (call it with the exact list the agent is about to send)."""
        if len(messages) < self._recorded:  # the agent trimmed its history: start over
            self._recorded = 0
        sent = message_tokens(messages, self.encoding)
        system = [m for m in messages if m.get("role") in ("system", "developer")]
        last_user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        query = message_text(last_user) if last_user else ""
        context_tokens, recalled = 0, 0
        if self._recorded:
            reply = await self.client.recall(
                query, owners=[self.owner], k=self.k, budget=self.budget, encoding=self.encoding
            )
            context_tokens, recalled = reply.tokens, len(reply.memories)
        would_send = (
            message_tokens(system, self.encoding)
            + (context_tokens + MESSAGE_OVERHEAD_TOKENS if recalled else 0)
            + (message_tokens([last_user], self.encoding) if last_user else 0)
        )
        await self.record(messages[self._recorded :])
        self._recorded = len(messages)
        report = TurnReport(
            len(self.reports) + 1, sent, min(would_send, sent), context_tokens, recalled
        )
        self.reports.append(report)
        return report

    async def record(self, messages: Sequence[Message]) -> None:
        """Append messages to the owner's memory (system prompts are not memory)."""
        for message in messages:
            role = str(message.get("role", "user"))
            text = message_text(message)
            if role in ("system", "developer") or not text:
                continue
            content = f"{role}: {' '.join(text.split())}"
            if len(content) > CONTENT_MAX_CHARS:
                content = self.encoder.encode(content, hint=role)
            kind = MemoryType.TOOL_RESULT if role == "tool" else MemoryType.MESSAGE
            await self.client.put(
                self.owner,
                {"role": role, "text": text[:4000]},
                content=content,
                type=kind,
                tags=(f"role:{role}",),
                source="shadow",
                wait=self.wait,
            )
            if role == "user" and self.auto is not None and self.user:
                await self.auto.user_message(text, user=self.user)

    def wrap(
        self, agent: Callable[[list[Message]], Any]
    ) -> Callable[[list[Message]], Awaitable[Any]]:
        """``agent(messages) -> reply`` (sync or async) measured on every call; the
        reply is returned untouched."""

        async def shadowed(messages: list[Message]) -> Any:
            await self.observe(messages)
            reply = agent(messages)
            return await reply if inspect.isawaitable(reply) else reply

        return shadowed

    @property
    def total_sent(self) -> int:
        return sum(r.sent_tokens for r in self.reports)

    @property
    def total_zeromem(self) -> int:
        return sum(r.zeromem_tokens for r in self.reports)

    def summary(self) -> str:
        saved = self.total_sent - self.total_zeromem
        pct = 100.0 * saved / self.total_sent if self.total_sent else 0.0
        return (
            f"{len(self.reports)} turns: sent {self.total_sent} tokens, with recall "
            f"{self.total_zeromem}; saved {saved} ({pct:.0f}%)"
        )

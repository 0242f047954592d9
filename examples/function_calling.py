"""A function-calling agent loop with zeromem memory tools, driven by a scripted model.

No LLM and no network: ``ScriptedModel`` stands in for the model and emits the tool calls a
real one would (OpenAI chat format). The program also records memory by itself through
``AutoMemory`` hooks (a stated preference, a tool result, a task transition).

Session 1 is a long conversation; session 2 starts fresh and asks about it. The example
prints what session 2's prompt costs when the whole of session 1 is pasted in, against
what it costs with the memory tools (their definitions + one recall result).

    python examples/function_calling.py [--short]    # virtualenv active (make run made it)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from zeromem.integrations.local import issue_credentials, local_stack
from zeromem.integrations.shadow import message_tokens
from zeromem.sdk import MemoryClient, ZeromemError
from zeromem.sdk.hooks import AutoMemory
from zeromem.store.tokens import count_tokens
from zeromem.tools import ToolDispatcher, tool_definitions, tool_definitions_tokens

USER = "u10086"
MAX_ROUNDS = 8


_calls = 0


def call(tool: str, /, **arguments: Any) -> dict[str, Any]:
    """One OpenAI ``tool_calls`` entry, arguments as a JSON string as the API sends them."""
    global _calls
    _calls += 1
    return {
        "id": f"call_{_calls}",
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps(arguments, ensure_ascii=False)},
    }


class ScriptedModel:
    """Replays a fixed script: each entry is the assistant message for one model call."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.script = list(script)

    def respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> dict[str, Any]:
        return self.script.pop(0)


async def run_turn(
    model: ScriptedModel, tools: ToolDispatcher, messages: list[dict[str, Any]]
) -> str:
    """The standard loop: call the model, run its tool calls, repeat until it answers
    (at most ``MAX_ROUNDS`` rounds: a model that only ever calls tools must not loop)."""
    for _round in range(MAX_ROUNDS):
        reply = model.respond(messages, tools.tools)
        messages.append({"role": "assistant", **reply})
        if not reply.get("tool_calls"):
            return str(reply.get("content", ""))
        for tool_call in reply["tool_calls"]:
            messages.append(await tools.call_openai(tool_call))
    raise RuntimeError(f"no answer after {MAX_ROUNDS} rounds of tool calls")


def chatter(n: int) -> list[dict[str, Any]]:
    """Filler turns of a long planning conversation (what history-stuffing pays for)."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append(
            {
                "role": "user",
                "content": f"For day {i + 1}, what can we do in the "
                "afternoon near the old town, and how long does it take to walk there "
                "from the hotel?",
            }
        )
        out.append(
            {
                "role": "assistant",
                "content": f"On day {i + 1} you could visit the "
                "museum quarter, then the riverside market; the walk from the hotel is "
                "about 20 minutes along the main avenue, and tickets are sold at the door.",
            }
        )
    return out


async def main(short: bool) -> None:
    async with (
        local_stack() as settings,
        # A credential for this agent alone, as `zeromem auth issue demo planner` writes it.
        await MemoryClient.connect(
            settings.bus.nats_url,
            creds=issue_credentials(settings, "demo", "planner"),
            shards=settings.shards,
        ) as client,
    ):
        tools = ToolDispatcher(client)
        auto = AutoMemory(client, owner="task:trip7")

        # --- session 1: a long conversation ------------------------------------------------
        first = "Please answer in Chinese. I prefer window seats. Plan a trip to Kyoto for May 3-7."
        await auto.user_message(first, user=USER)  # hook: the program records preferences
        await auto.task_transition("trip7", "planning")
        history: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a travel planner."},
            {"role": "user", "content": first},
        ]
        flights = {
            "flight": "NH 9401",
            "from": "HND",
            "to": "KIX",
            "date": "2025-05-03",
            "depart": "08:15",
            "price": "¥23,400",
            "seat": "14A window",
        }
        await auto.tool_succeeded("book_flight", {"date": "2025-05-03"}, flights)  # hook
        model = ScriptedModel(
            [
                {
                    "content": None,
                    "tool_calls": [
                        call(
                            "memory_write",
                            namespace="task",
                            owner="trip7",
                            name="hotel",
                            value={
                                "hotel": "Hotel Kanra Kyoto",
                                "nights": 4,
                                "check_in": "2025-05-03",
                            },
                            content="hotel: Hotel Kanra Kyoto, 4 nights from 2025-05-03",
                            type="decision",
                        ),
                        call(
                            "memory_write",
                            namespace="user",
                            owner=USER,
                            name="diet",
                            value={"diet": "vegetarian"},
                            content="user is vegetarian",
                            type="user_preference",
                        ),
                    ],
                },
                {"content": "已为您预订 NH 9401 航班和 Hotel Kanra Kyoto。"},
            ]
        )
        await run_turn(model, tools, history)
        history += chatter(20 if short else 60)
        await auto.task_transition(
            "trip7", "booked", previous="planning", detail="flight NH 9401 and hotel confirmed"
        )

        # --- session 2: a fresh conversation that needs session 1 ---------------------------
        question = {"role": "user", "content": "When does my flight leave and where am I staying?"}
        model = ScriptedModel(
            [
                {
                    "content": None,
                    "tool_calls": [
                        call(
                            "memory_recall",
                            query="flight hotel trip",
                            namespace="task",
                            owner="trip7",
                            budget=300,
                        ),
                        call(
                            "memory_read",
                            namespace="user",
                            owner=USER,
                            name="pref.lang",
                            default={"object": "en"},
                        ),
                    ],
                },
                {"content": "您的航班 NH 9401 于 5 月 3 日 08:15 起飞，住在 Hotel Kanra Kyoto。"},
            ]
        )
        session2: list[dict[str, Any]] = [history[0], question]
        answer = await run_turn(model, tools, session2)
        recall_result = json.loads(session2[3]["content"])
        lang = json.loads(session2[4]["content"])

        stuffed = message_tokens([*history, question])
        defs = tool_definitions_tokens()
        with_memory = defs + message_tokens(session2[:-1])  # everything the model is sent
        print(
            f"history-stuffing prompt for session 2: {stuffed} tokens "
            f"({len(history)} messages of session 1 pasted in)"
        )
        print(
            f"with memory tools: {with_memory} tokens (tool definitions {defs}, recall "
            f"result {count_tokens(session2[3]['content'])})"
        )
        print(f"recalled: {recall_result['keys']}")
        print(f"language preference recorded by the hook: {lang['value']['object']}")
        print(f"answer: {answer}")
        print(f"tokens saved: {stuffed - with_memory}")
        print(f"tool definitions: {len(tool_definitions())} tools, {defs} tokens")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="a short session 1 (for tests)")
    args = parser.parse_args()
    try:
        asyncio.run(main(args.short))
    except (ZeromemError, RuntimeError) as exc:
        sys.exit(f"error: {exc}")

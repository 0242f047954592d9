"""A LangGraph agent whose long-term memory is zeromem, through ``ZeromemStore``.

No LLM: the graph is scripted. Node ``remember`` finds preferences the user states (the
``PreferenceRules`` of zeromem's hooks, English and Chinese) and puts them in the store;
node ``answer`` searches the store for what the current message needs. Swapping
``ZeromemStore`` for LangGraph's ``InMemoryStore`` changes nothing in the graph.

Printed at the end: the tokens a history-stuffing agent would have sent over the run
against what this one sent (the current message plus the items the store returned).

    python examples/langgraph_agent.py [--short]    # virtualenv active (make run made it)
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, TypedDict

from zeromem.integrations.local import issue_credentials, local_stack
from zeromem.sdk import MemoryClient, ZeromemError
from zeromem.sdk.hooks import PreferenceRules
from zeromem.store.tokens import count_tokens

try:
    from langgraph.config import get_store
    from langgraph.graph import END, START, StateGraph

    from zeromem.integrations.langgraph_store import ZeromemStore
except ImportError:
    sys.exit("error: this example needs LangGraph; pip install 'zeromem[langgraph]'")

RULES = PreferenceRules()


class State(TypedDict, total=False):
    user: str
    message: str
    context: list[str]
    reply: str


async def remember(state: State) -> dict[str, Any]:
    store = get_store()
    for pref in RULES.find(state["message"]):
        await store.aput(
            ("users", state["user"], "prefs"),
            pref.slot,
            {"polarity": pref.polarity, "object": pref.object, "text": pref.sentence},
        )
    return {}


async def answer(state: State) -> dict[str, Any]:
    store = get_store()
    prefs = ("users", state["user"], "prefs")
    lang = await store.aget(prefs, "pref.lang")  # an exact read: the key is known
    found = await store.asearch(("users", state["user"]), query=state["message"], limit=3)
    # Without a match, search returns the other items unscored; only matches go in.
    context = [item.value["text"] for item in found if item.score is not None]
    if lang is not None:
        context.insert(0, lang.value["text"])
    reply = f"[{lang.value['object'] if lang else 'en'}] noted ({len(context)} memories in context)"
    return {"context": context, "reply": reply}


def build_graph(store: Any) -> Any:
    graph = StateGraph(State)
    graph.add_node("remember", remember)
    graph.add_node("answer", answer)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "answer")
    graph.add_edge("answer", END)
    return graph.compile(store=store)


MESSAGES = [
    "Hi! Please answer in Chinese from now on.",
    "I prefer aisle seats on long flights.",
    "我不喜欢香菜。",
    "Can you suggest a restaurant near the station for tonight?",
    "I love jazz, by the way.",
    "What should I pack for a three-day trip to Osaka in May?",
    "Call me Lin.",
    "Remind me what you know about my seat preference.",
]


async def main(short: bool) -> None:
    turns = MESSAGES * (2 if short else 6)
    async with (
        local_stack() as settings,
        # A credential for this agent alone, as `zeromem auth issue demo langgraph` writes it.
        await MemoryClient.connect(
            settings.bus.nats_url,
            creds=issue_credentials(settings, "demo", "langgraph"),
            shards=settings.shards,
        ) as client,
    ):
        store = ZeromemStore(client)
        app = build_graph(store)
        history_tokens = stuffed = sent = 0
        for message in turns:
            out = await app.ainvoke({"user": "u7", "message": message})
            msg_tokens = count_tokens(message)
            stuffed += history_tokens + msg_tokens  # the whole conversation, resent
            sent += msg_tokens + sum(count_tokens(line) for line in out["context"])
            history_tokens += msg_tokens + count_tokens(out["reply"])
        prefs = await store.asearch(("users", "u7", "prefs"), limit=20)
        print(
            f"{len(turns)} turns; preferences in the store: "
            + ", ".join(f"{p.key}={p.value['object']}" for p in prefs)
        )
        print(f"namespaces: {await store.alist_namespaces()}")
        print(f"last reply: {out['reply']}; context: {out['context'][:1]}")
        print(f"history-stuffing would send {stuffed} tokens; with the store {sent}")
        print(f"tokens saved: {stuffed - sent}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="two passes of the script")
    args = parser.parse_args()
    try:
        asyncio.run(main(args.short))
    except ZeromemError as exc:
        sys.exit(f"error: {exc}")

"""Recall's read path against real servers: the recall cards the workers write, and the
stage-one selection the survey script makes, checked against a plain Python model of it."""

from __future__ import annotations

import asyncio
import heapq
import random
import time
from collections.abc import AsyncIterator, Sequence
from functools import partial

import pytest
from redis.asyncio import Redis

from zeromem.bus import connect_redis
from zeromem.recall import retrieve
from zeromem.recall.ranking import RankingConfig, idf
from zeromem.recall.retrieve import POSTINGS_LIMIT, RECENT_LIMIT
from zeromem.schemas import MemoryItem, MemoryType
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
from zeromem.store.card import decode_card, encode_card
from zeromem.store.keys import CARD_COMMAND_FIELD, CARD_FIELD, RedisKeys
from zeromem.store.postings import POSTING_TF_SCALE, posting_score, posting_tf
from zeromem.store.text import terms


@pytest.fixture
async def redis(running: Settings) -> AsyncIterator[Redis]:
    client = connect_redis(running)
    try:
        yield client
    finally:
        await client.aclose()


async def card_state(redis: Redis, tenant: str, key: str) -> tuple[bytes | None, bool]:
    """The stored card, and whether it describes the memory's last write."""
    card, command, last = await redis.hmget(
        RedisKeys(tenant).item(key), CARD_FIELD, CARD_COMMAND_FIELD, "lc"
    )
    return card, card is not None and command == last


async def test_the_card_follows_every_write(client: MemoryClient, redis: Redis) -> None:
    key = "user:c1:plan"
    await client.put(
        key, {"step": 1}, content="migrate the billing database", tags=("ops",), wait="applied"
    )
    card, valid = await card_state(redis, client.tenant, key)
    assert valid and card is not None
    assert decode_card(card).content == "migrate the billing database"
    assert decode_card(card).tags == ("ops",)

    # Same content, tags and type: the worker only moves the time index, the card names an
    # older command, and recall reads the memory whole.
    await client.patch(key, {"step": 2}, wait="applied")
    _, valid = await card_state(redis, client.tenant, key)
    assert not valid
    reply = await client.recall("billing database", owners=["user:c1"], k=1)
    current = await client.get(key)
    assert [(m.key, m.version, m.updated_at) for m in reply.memories] == [
        (key, 2, current.updated_at)
    ]

    await client.patch(
        key,
        {"step": 3},
        content="migrate the billing database tonight",
        tags=("ops", "urgent"),
        wait="applied",
    )
    card, valid = await card_state(redis, client.tenant, key)
    assert valid and card is not None and decode_card(card).version == 3
    reply = await client.recall("billing tonight", owners=["user:c1"], k=1)
    assert reply.memories[0].version == 3 and "tonight" in reply.context
    only_urgent = await client.recall("billing", owners=["user:c1"], tags=["urgent"], k=1)
    assert [m.key for m in only_urgent.memories] == [key]


async def test_removed_and_expired_memories_are_never_recalled(
    client: MemoryClient, redis: Redis
) -> None:
    for name in ("deleted", "expiring", "archived", "kept"):
        await client.put(
            f"user:c2:{name}", 1, content=f"quarterly report draft {name}", wait="applied"
        )
    await client.delete("user:c2:deleted", wait="applied")
    await client.expire("user:c2:expiring", 0.3, wait="applied")
    await client.archive(
        "user:c2", older_than=4_000_000_000.0, prefix="user:c2:archived", wait="applied"
    )
    assert (await card_state(redis, client.tenant, "user:c2:deleted"))[0] is None
    assert (await card_state(redis, client.tenant, "user:c2:archived"))[0] is None
    await asyncio.sleep(0.4)  # past the expiry, whether or not the reaper came by
    for explain in (False, True):
        reply = await client.recall(
            "quarterly report draft", owners=["user:c2"], k=10, explain=explain
        )
        assert [m.key for m in reply.memories] == ["user:c2:kept"]
        assert {c.key for c in reply.candidates} <= {"user:c2:kept"}


async def test_a_memory_without_a_current_card_is_read_whole(
    client: MemoryClient, redis: Redis
) -> None:
    for i in range(6):
        await client.put(
            f"user:c3:m{i}",
            i,
            content=f"sailing lesson {i} at the harbour",
            type="task_state" if i % 2 else "fact",
            tags=(f"t{i % 3}",),
            references=(f"user:c3:m{i - 1}",) if i else (),
            wait="applied",
        )
    await client.feedback("user:c3:m2", "liked", wait="applied")

    async def recall() -> tuple[object, ...]:
        reply = await client.recall("sailing harbour lesson", owners=["user:c3"], k=3, explain=True)
        return reply.memories, reply.context, reply.tokens, reply.candidates

    with_cards = await recall()
    item_key = RedisKeys(client.tenant).item
    # as a memory written before cards existed
    await redis.hdel(item_key("user:c3:m2"), CARD_FIELD, CARD_COMMAND_FIELD)
    # a card that does not describe the last write: never trusted
    stale = MemoryItem(
        key="user:c3:m4",
        value=0,
        content="something else entirely",
        type=MemoryType.FACT,
        created_at=1.0,
        updated_at=1.0,
        version=99,
    )
    await redis.hset(
        item_key("user:c3:m4"),
        mapping={CARD_FIELD: encode_card(stale), CARD_COMMAND_FIELD: "another-command"},
    )
    assert await recall() == with_cards


async def test_explain_lists_every_candidate_with_its_scores(client: MemoryClient) -> None:
    rng = random.Random(3)
    words = ["river", "stone", "lantern", "harbour", "copper", "meadow"]
    for i in range(60):
        await client.put(
            f"user:c4:m{i}",
            i,
            content=" ".join(rng.choices(words, k=4)),
            wait="applied" if i == 59 else "none",
        )
    reply = await client.recall("river stone", owners=["user:c4"], k=1, explain=True)
    keys = [c.key for c in reply.candidates]
    assert len(keys) == len(set(keys))
    matching = {f"user:c4:m{i}" for i in range(60)}
    assert set(keys) <= matching
    stage_one = [c for c in reply.candidates if "stage one" in c.decision]
    exact = [c for c in reply.candidates if "stage one" not in c.decision]
    assert len(exact) >= retrieve.STAGE_TWO_MIN and stage_one
    assert [c.decision for c in exact].count("kept") == 1
    for c in exact:
        # a time-neighbour's share of its score only adds (neighbour_share)
        assert c.score >= c.relevance * c.decay * c.feedback * (1 - 1e-5)
    scores = [c.score for c in stage_one]
    assert scores == sorted(scores, reverse=True)


# --- stage one against a model of it ----------------------------------------------------


async def model_stage_one(
    redis: Redis,
    keys: RedisKeys,
    owners: Sequence[str],
    query_terms: Sequence[str],
    keep_n: int,
    k1: float,
) -> tuple[set[str], list[tuple[str, float]], dict[str, list[tuple[str, int]]]]:
    """Stage one written plainly: what the survey script must choose."""
    n_docs = 0
    for owner in owners:
        n_docs += int(await redis.hget(keys.owner_stats(owner), "n") or 0)
    df = {(o, t): await redis.zcard(keys.by_term(o, t)) for o in owners for t in query_terms}
    weight = {t: idf(sum(df[(o, t)] for o in owners), n_docs) * (k1 + 1.0) for t in query_terms}
    recents = {o: await redis.zrevrange(keys.by_time(o), 0, RECENT_LIMIT - 1) for o in owners}
    freqs: dict[bytes, dict[str, int]] = {}
    estimate: dict[bytes, float] = {}
    created: dict[bytes, float] = {}
    for owner in owners:
        for term in query_terms:
            if df[(owner, term)]:
                postings = await redis.zrevrange(
                    keys.by_term(owner, term), 0, POSTINGS_LIMIT - 1, withscores=True
                )
                for member, score in postings:
                    f = int(score // POSTING_TF_SCALE)
                    if member not in estimate:
                        estimate[member] = 0.0
                        created[member] = score - f * POSTING_TF_SCALE
                    freqs.setdefault(member, {})[term] = f
                    estimate[member] += weight[term] * f / (f + k1)
    for owner in owners:
        for term in query_terms:
            if df[(owner, term)]:
                for member in recents[owner]:
                    score = await redis.zscore(keys.by_term(owner, term), member)
                    if score is not None and term not in freqs.get(member, {}):
                        freqs.setdefault(member, {})[term] = posting_tf(score)
    recent = {m for ms in recents.values() for m in ms}
    cut: list[tuple[bytes, float]] = []
    if len(estimate) + len(recent) <= keep_n:
        chosen = set(freqs) | recent
    else:
        best = heapq.nlargest(keep_n, estimate, key=lambda m: (estimate[m], created[m], m))
        chosen = set(best) | recent
        cut = sorted(
            ((m, e) for m, e in estimate.items() if m not in chosen),
            key=lambda pair: (-pair[1], pair[0]),
        )
    tf = {m.decode(): list(freqs[m].items()) for m in chosen if freqs.get(m)}
    return {m.decode() for m in chosen}, [(m.decode(), e) for m, e in cut], tf


async def assert_survey_matches_the_model(
    redis: Redis, tenant: str, owners: Sequence[str], query: str, keep_n: int
) -> None:
    keys = RedisKeys(tenant)
    query_terms = list(dict.fromkeys(terms(query)))
    config = RankingConfig(neighbour_share=0.0)  # the model is stage one alone
    chosen, cut, tf = await model_stage_one(redis, keys, owners, query_terms, keep_n, config.k1)
    survey = await retrieve._survey(
        redis, keys, owners, query_terms, keep_n, config, True, "cl100k_base"
    )
    read = {survey.rows[i].decode() for i in range(0, len(survey.rows), retrieve._ROW)}
    assert survey.chosen == len(chosen), query
    assert read == chosen, query
    assert survey.stage_one_cut == cut, query
    assert {k: list(v.items()) for k, v in survey.tf.items()} == tf, query


async def test_stage_one_chooses_what_the_model_chooses(client: MemoryClient, redis: Redis) -> None:
    rng = random.Random(11)
    words = [f"w{i}" for i in range(12)]
    for owner in ("user:s1", "user:s2"):
        for i in range(140):
            content = " ".join(rng.choice(words[: rng.randint(2, 12)]) for _ in range(5))
            await client.put(
                f"{owner}:m{i}", i, content=content, wait="applied" if i == 139 else "none"
            )
    for query in ("w0", "w0 w1", "w1 w5 w11", "w3 w3 w0 w7", "w11", "nothing", ""):
        for owners in (["user:s1"], ["user:s1", "user:s2"]):
            for keep_n in (8, 32, 200):
                await assert_survey_matches_the_model(redis, client.tenant, owners, query, keep_n)


async def test_stage_one_breaks_ties_byte_for_byte(redis: Redis, tenant: str) -> None:
    """Postings written directly, with created times from a tiny set so whole groups of
    memories tie on estimate and creation time, under keys whose byte order differs from
    any locale's collation."""
    keys = RedisKeys(tenant)
    rng = random.Random(5)
    names = ["a", "B", "b", "Z", "é", "É", "ß", "z9", "Z10", "_x", "-y", "中文", "m"]
    for owner in ("user:t1", "user:t2"):
        members = [f"{owner}:{name}{i}" for name in names for i in range(6)]
        async with redis.pipeline(transaction=False) as pipe:
            pipe.hset(keys.owner_stats(owner), mapping={"n": len(members), "len": 5 * len(members)})
            for n, member in enumerate(members):
                created = 1_700_000_000.0 + rng.choice((0.0, 0.0, 0.5, 1.25))
                pipe.zadd(keys.by_time(owner), {member: created + n})
                for term in rng.sample(["alpha", "beta", "gamma"], rng.randint(1, 3)):
                    pipe.zadd(
                        keys.by_term(owner, term),
                        {member: posting_score(rng.choice((1, 1, 1, 2)), created)},
                    )
                item = MemoryItem(
                    key=member,
                    value=n,
                    content=f"memory {n}",
                    type=MemoryType.FACT,
                    created_at=created,
                    updated_at=created + n,
                    version=1,
                )
                pipe.hset(
                    keys.item(member),
                    mapping={
                        "v": 1,
                        "d": b"-",
                        "lc": "c",
                        CARD_FIELD: encode_card(item),
                        CARD_COMMAND_FIELD: "c",
                    },
                )
            await pipe.execute()
    for query in ("alpha", "alpha beta", "gamma beta alpha", "beta"):
        for owners in (["user:t1"], ["user:t1", "user:t2"]):
            for keep_n in (1, 5, 17, 40):
                await assert_survey_matches_the_model(redis, tenant, owners, query, keep_n)


async def test_the_survey_reads_neighbours_of_conversation_turns_only(
    client: MemoryClient, redis: Redis
) -> None:
    """Only turns share scores with turns (ranking), so only turns get their neighbours
    read: a turn and the turns around it, not the fact written a second later, nor any
    memory of an owner that holds no turns."""
    at = time.time() - 200  # own times within the workers' clock skew bound
    lines = [
        "Mara: I finally signed up for the pottery class.",
        "Tobias: Nice! Which studio did you pick?",
        "Mara: The small studio on Elm Street, Tuesday evenings.",
    ]
    for i, line in enumerate(lines):
        await client.put(f"user:n1:t{i}", line, type="message", created_at=at + 60 * i)
    # the next memory in the time index after the last turn, but not a turn
    await client.put(
        "user:n1:fact", "pottery studio fee is 40 euros", type="fact", created_at=at + 130
    )
    for i, line in enumerate(lines):
        await client.put(
            f"user:n2:f{i}",
            line,
            type="fact",
            created_at=at + 60 * i,
            wait="applied" if i == len(lines) - 1 else "none",
        )
    keys = RedisKeys(client.tenant)
    query = list(dict.fromkeys(terms("pottery studio")))  # every turn and the fact match
    config = RankingConfig()
    turns = await retrieve._survey(
        redis, keys, ["user:n1"], query, 32, config, False, "cl100k_base"
    )
    assert {k: set(v) for k, v in turns.neighbours.items()} == {
        "user:n1:t0": {"user:n1:t1"},
        "user:n1:t1": {"user:n1:t0", "user:n1:t2"},
        "user:n1:t2": {"user:n1:t1"},
    }
    facts = await retrieve._survey(
        redis, keys, ["user:n2"], query, 32, config, False, "cl100k_base"
    )
    assert facts.neighbours == {} and facts.chosen == 3  # only what matched
    assert await redis.exists(keys.item("user:n1:fact"))  # it was written, and left out


def rows_by_key(survey: retrieve.Survey) -> dict[bytes, tuple[object, ...]]:
    w = retrieve._ROW
    return {survey.rows[i]: tuple(survey.rows[i : i + w]) for i in range(0, len(survey.rows), w)}


async def test_a_survey_split_over_calls_finds_what_one_call_finds(
    client: MemoryClient, redis: Redis
) -> None:
    """A recall over several owners, split into calls of fewer owners (so that no call
    holds Redis long), chooses the same memories, with the same estimates, term
    frequencies (in the same order), neighbours and cut as the one call over them all:
    conversation turns and facts, estimates that tie, a date range, explain."""
    rng = random.Random(3)
    words = ["deploy", "window", "budget", "pottery", "studio", "report", "meeting"]
    at = time.time() - 200  # own times within the workers' clock skew bound
    owners = [f"user:p{o}" for o in range(5)]
    for o, owner in enumerate(owners):
        for i in range(60):
            content = " ".join(rng.choice(words[: rng.randint(2, 7)]) for _ in range(4))
            await client.put(
                f"{owner}:m{i}",
                i,
                content=content,
                type="message" if (o + i) % 3 else "fact",
                created_at=at + 2 * i + rng.choice((0.0, 0.0, 0.5)),
                wait="applied" if i == 59 else "none",
            )
    keys = RedisKeys(client.tenant)
    seen = {"neighbours": 0, "cut": 0, "tied": 0, "unread": 0}
    for query in ("deploy", "deploy budget", "pottery studio meeting", "report window", ""):
        query_terms = list(dict.fromkeys(terms(query)))
        for keep_n, explain, dates in (
            (32, False, None),
            (8, True, None),
            (200, True, None),
            (32, True, (at + 30, at + 70)),
        ):
            # the one call over every owner (16 per call), or split: same arguments
            survey = partial(
                retrieve._survey,
                redis,
                keys,
                owners,
                query_terms,
                keep_n,
                RankingConfig(),
                explain,
                "cl100k_base",
                dates,
            )
            whole = await survey(16)
            seen["neighbours"] += bool(whole.neighbours)
            seen["cut"] += bool(whole.stage_one_cut)
            estimates = [e for _, e in whole.stage_one_cut]
            seen["tied"] += len(set(estimates)) < len(estimates)
            # recent memories without a query term, chosen but left unread
            seen["unread"] += len(rows_by_key(whole)) < whole.chosen
            for per_call in (1, 2):
                split = await survey(per_call)
                case = (query, keep_n, explain, dates, per_call)
                assert split.chosen == whole.chosen, case
                assert rows_by_key(split) == rows_by_key(whole), case
                assert {k: list(v.items()) for k, v in split.tf.items()} == {
                    k: list(v.items()) for k, v in whole.tf.items()
                }, case
                assert split.stage_one_cut == whole.stage_one_cut, case
                assert split.neighbours == whole.neighbours, case
                assert split.owner_stats == whole.owner_stats, case
                assert split.df == whole.df, case
    assert min(seen.values()) > 0, seen  # the cases cover what the split must reproduce


async def test_leaving_termless_memories_unread_changes_no_recall(
    client: MemoryClient, redis: Redis
) -> None:
    """With query terms and no explain view, the survey does not read the recent memories
    that hold none of the terms (they could not score above zero): every recall still
    returns exactly what it returns when every chosen memory is read (explain), with
    conversation turns whose neighbours share scores, references, and dated memories."""
    rng = random.Random(5)
    words = ["deploy", "window", "budget", "pottery", "studio", "report", "meeting", "lunch"]
    at = time.time() - 400
    owner = "user:u7"
    for i in range(90):
        # the newest memories mostly hold none of the rarer words
        pool = words[:3] if i > 70 and i % 4 else words
        content = " ".join(rng.choice(pool) for _ in range(4))
        references = (f"{owner}:m{i - 30}",) if i % 17 == 0 and i >= 30 else ()
        await client.put(
            f"{owner}:m{i}",
            i,
            content=content,
            type="message" if i % 3 else "fact",
            references=references,
            created_at=at + 3 * i,
            wait="applied" if i == 89 else "none",
        )
    keys = RedisKeys(client.tenant)
    unread = 0
    for query in ("pottery", "studio meeting", "lunch report", "budget pottery window", "deploy"):
        for k, budget in ((5, 1500), (3, 120), (20, 4000)):
            plain = await client.recall(query, owners=[owner], k=k, budget=budget)
            every = await client.recall(query, owners=[owner], k=k, budget=budget, explain=True)
            # the same memories, in the same order, with the same scores (to the decay of
            # the moment between the two recalls)
            assert [(m.key, m.via) for m in plain.memories] == [
                (m.key, m.via) for m in every.memories
            ], (query, k)
            for mine, theirs in zip(plain.memories, every.memories, strict=True):
                assert mine.score == pytest.approx(theirs.score, rel=1e-4)
            assert plain.context == every.context and plain.tokens == every.tokens
            assert plain.baseline_tokens == every.baseline_tokens
        query_terms = list(dict.fromkeys(terms(query)))
        survey = await retrieve._survey(
            redis, keys, [owner], query_terms, 40, RankingConfig(), False, "cl100k_base"
        )
        read = set(rows_by_key(survey))
        unread += survey.chosen - len(read)
        for member in read:  # what was read holds a query term, or is a time-neighbour
            key = member.decode()
            assert key in survey.tf or any(key in near for near in survey.neighbours.values())
    assert unread > 0  # the case this is about happened

"""The worker's memory of which keys exist (``worker.presumed``): bounded, and what it
forgets is the oldest of whoever holds the most, so a tenant's flood of new keys does not
push out another tenant's."""

from __future__ import annotations

import time

from zeromem.limits import Limits
from zeromem.worker.presumed import Presumptions


def test_a_flood_of_new_keys_forgets_its_own_keys_not_another_tenants() -> None:
    presumed = Presumptions(Limits(), known_keys=1_000)
    quiet = [("quiet", f"k{i}") for i in range(100)]
    presumed.seen(quiet)
    for start in range(0, 50_000, 250):  # rounds of a tenant appending without end
        presumed.seen(("flood", f"n{i}") for i in range(start, start + 250))
    assert not any(presumed.unknown(ident) for ident in quiet)
    assert presumed.unknown(("flood", "n0"))  # its oldest went first
    assert not presumed.unknown(("flood", "n49999"))
    assert presumed._count <= 1_000
    assert presumed._count == sum(len(keys) for keys in presumed._known.values())


def test_two_floods_share_the_cut_and_a_small_tenant_keeps_its_keys() -> None:
    presumed = Presumptions(Limits(), known_keys=1_000)
    presumed.seen([("small", "a"), ("small", "b")])
    for i in range(5_000):
        presumed.seen([("one", f"x{i}"), ("two", f"y{i}")])
    sizes = {tenant: len(keys) for tenant, keys in presumed._known.items()}
    assert sizes["small"] == 2
    assert abs(sizes["one"] - sizes["two"]) <= 1
    assert sum(sizes.values()) <= 1_000


def test_forgetting_among_many_tenants_stays_cheap() -> None:
    presumed = Presumptions(Limits(), known_keys=10_000)
    began = time.process_time()
    for i in range(60_000):
        presumed.seen([(f"t{i % 2_000}", f"k{i}")])
    spent = time.process_time() - began
    assert presumed._count <= 10_000
    # one sort of 2,000 tenants per 156 keys seen; a cut of one key per step would be
    # thousands of scans per cut (seconds here)
    assert spent < 2.0, spent


def test_a_key_seen_again_is_not_counted_twice() -> None:
    presumed = Presumptions(Limits(), known_keys=10)
    for _ in range(3):
        presumed.seen([("a", "k1"), ("a", "k2")])
    assert presumed._count == 2
    assert presumed.unknown(("a", "k3")) and not presumed.unknown(("a", "k1"))


def test_keys_seen_past_the_bound_cost_what_keys_below_it_do() -> None:
    # Forgetting one key at a time from the front of one dict left the dict's dead slots
    # in front of every next search for its oldest: 51 µs per new key past 100,000 keys
    # (0.4 below), a seventh of a worker's CPU per append in a long append run.
    presumed = Presumptions(Limits(), known_keys=100_000)
    idents = [("t", f"owner{i % 100}:note-{i}") for i in range(200_000)]
    presumed.seen(idents[:100_000])
    began = time.process_time()
    for start in range(100_000, 200_000, 64):
        presumed.seen(idents[start : start + 64])
    spent = time.process_time() - began
    assert presumed._count <= 100_000
    assert spent < 1.5, spent  # 5 s the old way, about 0.1 s this way


def test_among_many_tenants_of_one_key_only_the_share_is_forgotten() -> None:
    presumed = Presumptions(Limits(), known_keys=6_400)
    presumed.seen((f"t{i}", "k") for i in range(6_401))  # one past the bound
    # a share of the bound (6,400 / 64 = 100) and the one over it: not everything
    assert presumed._count == 6_300
    assert sum(len(keys) for keys in presumed._known.values()) == 6_300


def test_the_cut_frees_exactly_what_is_needed() -> None:
    presumed = Presumptions(Limits(), known_keys=1_000)
    for tenant, size in (("a", 500), ("b", 300), ("c", 200)):
        presumed.seen((tenant, f"k{i}") for i in range(size))
    presumed.seen([("d", "new")])  # 1,001: back to 1,000 - 15
    sizes = {tenant: len(keys) for tenant, keys in presumed._known.items()}
    assert presumed._count == sum(sizes.values()) == 985
    assert sizes == {"a": 484, "b": 300, "c": 200, "d": 1}

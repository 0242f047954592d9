"""What the worker publishes stays under the broker's payload limit."""

from __future__ import annotations

from zeromem.worker.outbox import fit


def test_fit_keeps_one_message_when_it_fits_and_halves_until_each_part_does() -> None:
    def encode(part: list[bytes]) -> bytes:
        return b"".join(part)

    items = [bytes([i]) * 100 for i in range(10)]
    assert fit(items, encode, 10_000) == [encode(items)]
    parts = fit(items, encode, 250)
    assert b"".join(parts) == encode(items)  # nothing lost, order kept
    assert all(len(p) <= 250 for p in parts)
    assert fit([b"x" * 500], encode, 250) == [b"x" * 500]  # alone and too big: as it is


def test_chunks_cut_by_count_and_by_size_in_order() -> None:
    from zeromem.worker.outbox import chunks

    items = [bytes([i]) * 10 for i in range(7)]
    assert chunks(items, 1000, 3) == [items[0:3], items[3:6], items[6:7]]
    assert chunks(items, 25, 100) == [items[0:2], items[2:4], items[4:6], items[6:7]]
    assert chunks([b"x" * 50], 25, 100) == [[b"x" * 50]]
    assert chunks([], 25, 100) == []

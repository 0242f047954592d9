from zeromem.ids import new_command_id


def test_ids_are_unique_and_strictly_increasing() -> None:
    ids = [new_command_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert all(len(i) == 26 for i in ids)

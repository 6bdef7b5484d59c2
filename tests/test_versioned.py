"""Partially persistent containers: every version reads what it read when it was made."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from convograph.versioned import ListMapView, MapView, VersionedList, VersionedListMap, VersionedMap


def test_map_versions_are_independent() -> None:
    vmap: VersionedMap[str, int] = VersionedMap()
    vmap.set("a", 1, 1)
    vmap.set("b", 2, 2)
    vmap.set("a", 3, 3)
    vmap.delete("b", 4)
    assert [dict(MapView(vmap, v)) for v in range(5)] == [
        {},
        {"a": 1},
        {"a": 1, "b": 2},
        {"a": 3, "b": 2},
        {"a": 3},
    ]
    assert len(MapView(vmap, 4)) == 1
    assert "b" in MapView(vmap, 3)
    assert "b" not in MapView(vmap, 4)


def test_rewrite_within_one_stamp_keeps_no_history() -> None:
    vmap: VersionedMap[str, int] = VersionedMap()
    vmap.set("a", 1, 1)
    vmap.set("a", 2, 1)
    assert vmap.get_at("a", 1) == 2
    assert vmap.get_at("a", 0) is None


def test_fork_copies_one_version() -> None:
    vmap: VersionedMap[str, int] = VersionedMap()
    vmap.set("a", 1, 1)
    vmap.set("a", 2, 2)
    vmap.set("b", 5, 2)
    fork = vmap.fork_at(1)
    assert dict(MapView(fork, 0)) == {"a": 1}
    fork.set("c", 9, 1)
    assert dict(MapView(vmap, 2)) == {"a": 2, "b": 5}


def test_list_map_prefixes() -> None:
    lists: VersionedListMap[str, str] = VersionedListMap()
    lists.append("x", "1", 1)
    lists.append("x", "2", 3)
    lists.append("y", "3", 2)
    assert lists.get_at("x", 0) == ()
    assert lists.get_at("x", 2) == ("1",)
    assert lists.get_at("x", 3) == ("1", "2")
    assert list(lists.keys_at(1)) == ["x"]
    assert list(lists.fork_at(2).keys_at(0)) == ["x", "y"]


def test_list_prefixes() -> None:
    items: VersionedList[int] = VersionedList()
    items.append(1, 1)
    items.append(2, 2)
    assert items.get_at(1) == (1,)
    assert items.fork_at(1).get_at(0) == (1,)


operations = st.lists(
    st.tuples(st.sampled_from(["set", "delete"]), st.sampled_from("abcde"), st.integers(0, 9)),
    max_size=40,
)


@given(operations)
def test_every_version_matches_a_dict_replay(ops: list[tuple[str, str, int]]) -> None:
    vmap: VersionedMap[str, int] = VersionedMap()
    expected: list[dict[str, int]] = [{}]
    current: dict[str, int] = {}
    for stamp, (op, key, value) in enumerate(ops, start=1):
        if op == "set":
            vmap.set(key, value, stamp)
            current[key] = value
        else:
            vmap.delete(key, stamp)
            current.pop(key, None)
        expected.append(dict(current))
    for version, snapshot in enumerate(expected):
        view = MapView(vmap, version)
        assert dict(view) == snapshot
        assert len(view) == len(snapshot)


@given(operations)
def test_bulk_reads_match_per_key_reads_at_every_version(ops: list[tuple[str, str, int]]) -> None:
    """``items_at`` / ``values_at`` and the views' ``items()`` / ``values()`` (bulk, one dict copy
    at the newest version) equal key-by-key versioned reads, tombstones and re-sets included."""
    vmap: VersionedMap[str, int] = VersionedMap()
    for stamp, (op, key, value) in enumerate(ops, start=1):
        if op == "set":
            vmap.set(key, value, stamp)
        else:
            vmap.delete(key, stamp)
    for version in range(len(ops) + 2):
        view = MapView(vmap, version)
        per_key = [(key, vmap.get_at(key, version)) for key in vmap.keys_at(version)]
        assert vmap.items_at(version) == per_key
        assert list(view.items()) == per_key
        assert vmap.values_at(version) == [value for _, value in per_key]
        assert list(view.values()) == [value for _, value in per_key]
        assert ("a", vmap.get_at("a", version)) in view.items() or "a" not in view


def test_bulk_read_is_a_copy_and_ignores_later_writes() -> None:
    vmap: VersionedMap[str, int] = VersionedMap()
    vmap.set("a", 1, 1)
    vmap.set("b", 2, 1)
    items, values = vmap.items_at(1), vmap.values_at(1)
    vmap.set("a", 10, 2)
    vmap.set("c", 3, 2)
    assert items == [("a", 1), ("b", 2)]
    assert values == [1, 2]
    assert vmap.items_at(1) == [("a", 1), ("b", 2)]  # older version: per-key path
    assert vmap.items_at(2) == [("a", 10), ("b", 2), ("c", 3)]
    assert vmap.fork_at(1).items_at(0) == [("a", 1), ("b", 2)]


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 3)), max_size=60), st.integers(0, 300))
def test_list_map_bulk_reads_match_per_key_reads(appends: list[tuple[str, int]], fanout: int) -> None:
    """Including a list grown past `SMALL_FANOUT` (stored as a list, returned as a tuple)."""
    lists: VersionedListMap[str, int] = VersionedListMap()
    stamp = 0
    for key, value in appends:
        stamp += 1
        lists.append(key, value, stamp)
    for i in range(fanout):
        lists.append("wide", i, stamp + 1 + i // 100)
    last = stamp + 1 + fanout // 100
    for version in range(last + 2):
        per_key = [(key, lists.get_at(key, version)) for key in lists.keys_at(version)]
        bulk = lists.items_at(version)
        assert bulk == per_key
        assert all(type(items) is tuple for _, items in bulk)
        view = ListMapView(lists, version)
        assert list(view.items()) == per_key
        assert dict(view.items()) == {key: view[key] for key in view}

"""Partially persistent containers: every version stays readable, only the newest is extended.

Why not a HAMT (``immutables.Map``)? Path copying allocates O(log n) interior nodes per update:
keeping every intermediate version of a 100k-event stream costs ~21x the final structure (measured,
see docs/graph.md). These "fat node" containers record each change with a version stamp instead, so a
version costs O(1) extra memory and an update is a dict operation.

Model:
- A `Clock` is shared by every container of one lineage. ``clock.version`` is the newest version.
- Writes take a ``stamp`` (the version being built, ``clock.version + 1``); readers pass the version
  they hold and never see writes stamped after it. So a half-written step is invisible to every
  existing version; `Clock.commit` publishes it.
- Only the head can be extended. Building on an older version copies the state at that version into
  a new lineage (``fork_at``): O(n) once, then O(1) per step again.

Complexity (k = number of values a key has had): head read O(1); read at an older version O(log k);
write O(1) amortised; iteration in insertion order O(n) (+ O(log k) per key for older versions).
Bulk reads (`VersionedMap.items_at` / ``values_at``, `VersionedListMap.items_at`, and the views'
``items()`` / ``values()``) copy the newest dict in one C-level pass when nothing newer than the
requested version has been written, which is what one-shot projections of a finished graph need.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_right
from collections.abc import ItemsView, Iterator, Mapping, Sequence, ValuesView
from typing import Final, TypeVar, cast, overload

__all__ = ["Clock", "ListMapView", "MapView", "VersionedList", "VersionedListMap", "VersionedMap"]

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")


SMALL_FANOUT: Final = 256
"""Per-key sequences up to this length are tuples (the cyclic GC untracks tuples of atoms, and a
head read needs no copy); longer ones become lists so appends stay O(1) amortised."""


def _appended[V](items: tuple[V, ...] | list[V] | None, value: V) -> tuple[V, ...] | list[V]:
    """``items`` with ``value`` at the end: a new tuple while small, else the same list grown."""
    if items is None:
        return (value,)
    if type(items) is tuple:
        if len(items) < SMALL_FANOUT:
            return (*items, value)
        grown = list(items)
        grown.append(value)
        return grown
    items.append(value)  # type: ignore[union-attr]
    return items


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Final = _Missing()
TOMBSTONE: Final = _Missing()


class Clock:
    """The newest version of one lineage, and the lock that serialises extending it."""

    __slots__ = ("broken", "lock", "version")

    def __init__(self) -> None:
        self.version = 0
        self.lock = threading.Lock()
        self.broken = False
        """Set when a step failed half-way: the lineage must not be extended in place again."""

    def can_extend(self, version: int) -> bool:
        """True when ``version`` is the head and the lineage is sound."""
        return version == self.version and not self.broken


class VersionedMap[K, V]:
    """A map whose every version stays readable. Keys keep their first-insertion order."""

    __slots__ = (
        "_born",
        "_has_tombstones",
        "_last_stamp",
        "_latest",
        "_older_stamps",
        "_older_values",
        "_order",
        "_since",
    )

    def __init__(self) -> None:
        self._last_stamp = -1
        """Highest stamp written so far (set before the write it announces)."""
        self._latest: dict[K, object] = {}
        self._since: dict[K, int] = {}
        self._older_stamps: dict[K, array[int]] = {}
        self._older_values: dict[K, tuple[object, ...] | list[object]] = {}
        self._order: list[K] = []
        self._born = array("q")
        self._has_tombstones = False

    # -- reads -------------------------------------------------------------------------------------

    def get_at(self, key: K, version: int, default: D | None = None) -> V | D | None:
        """Value of ``key`` as of ``version``. O(1) when unchanged since, else O(log k)."""
        since = self._since.get(key)
        if since is None:
            return default
        if since <= version:
            value = self._latest[key]
        else:
            stamps = self._older_stamps.get(key)
            if stamps is None:
                return default
            i = bisect_right(stamps, version)
            if i == 0:
                return default
            value = self._older_values[key][i - 1]
        if value is TOMBSTONE:
            return default
        return cast(V, value)

    def count_at(self, version: int) -> int:
        """Number of keys first inserted at or before ``version`` (deleted ones included)."""
        born = self._born
        if not born or born[-1] <= version:
            return len(born)
        return bisect_right(born, version)

    def keys_at(self, version: int) -> Iterator[K]:
        """Live keys at ``version`` in first-insertion order."""
        order = self._order
        n = self.count_at(version)
        if not self._has_tombstones:
            yield from order[:n]
            return
        for i in range(n):
            key = order[i]
            if self.get_at(key, version, MISSING) is not MISSING:
                yield key

    def len_at(self, version: int) -> int:
        n = self.count_at(version)
        if not self._has_tombstones:
            return n
        return sum(1 for _ in self.keys_at(version))

    def items_at(self, version: int) -> list[tuple[K, V]]:
        """Live ``(key, value)`` pairs at ``version`` in first-insertion order, as a new list.

        O(n). When nothing newer than ``version`` was written this is one copy of the newest dict
        (no per-key versioned read); otherwise each key is read with `get_at`. The copy is taken
        before the stamp is checked, so a write racing with the read is never mistaken for the
        requested version.
        """
        latest = list(self._latest.items())
        if self._last_stamp <= version:
            if self._has_tombstones:
                return [item for item in latest if item[1] is not TOMBSTONE]  # type: ignore[misc]
            return latest  # type: ignore[return-value]
        get_at = self.get_at
        out: list[tuple[K, V]] = []
        for key in self.keys_at(version):
            out.append((key, get_at(key, version)))  # type: ignore[arg-type]
        return out

    def values_at(self, version: int) -> list[V]:
        """Live values at ``version`` in first-insertion order of their keys, as a new list. O(n),
        one dict copy when nothing newer than ``version`` was written (see `items_at`)."""
        latest = list(self._latest.values())
        if self._last_stamp <= version:
            if self._has_tombstones:
                return [value for value in latest if value is not TOMBSTONE]  # type: ignore[misc]
            return latest  # type: ignore[return-value]
        get_at = self.get_at
        return [get_at(key, version) for key in self.keys_at(version)]  # type: ignore[misc]

    # -- writes ------------------------------------------------------------------------------------

    def set(self, key: K, value: V, stamp: int) -> None:
        """Give ``key`` the value ``value`` from version ``stamp`` on."""
        self._put(key, value, stamp)

    def delete(self, key: K, stamp: int) -> None:
        """Remove ``key`` from version ``stamp`` on (older versions still see it)."""
        if key in self._since:
            self._has_tombstones = True
            self._put(key, TOMBSTONE, stamp)

    def _put(self, key: K, value: object, stamp: int) -> None:
        if stamp > self._last_stamp:
            self._last_stamp = stamp
        since = self._since.get(key)
        if since is None:
            self._order.append(key)
            self._born.append(stamp)
        elif since != stamp:
            stamps = self._older_stamps.get(key)
            if stamps is None:
                self._older_stamps[key] = array("q", (since,))
            else:
                stamps.append(since)
            self._older_values[key] = _appended(self._older_values.get(key), self._latest[key])
        self._latest[key] = value
        self._since[key] = stamp

    def fork_at(self, version: int) -> VersionedMap[K, V]:
        """A new map holding exactly the live contents at ``version``, all stamped 0. O(n)."""
        out: VersionedMap[K, V] = VersionedMap()
        for key in self.keys_at(version):
            out._put(key, self.get_at(key, version), 0)
        return out


class VersionedListMap[K, V]:
    """Append-only lists keyed by ``K``; a version sees each list's prefix appended by then."""

    __slots__ = ("_born", "_items", "_last_stamp", "_order", "_stamps", "_wide")

    def __init__(self) -> None:
        self._wide = False
        """Set once some key's items outgrew a tuple (a list, copied to a tuple on bulk reads)."""
        self._last_stamp = -1
        """Highest stamp written so far (set before the write it announces)."""
        self._items: dict[K, tuple[V, ...] | list[V]] = {}
        self._stamps: dict[K, array[int]] = {}
        self._order: list[K] = []
        self._born = array("q")

    def get_at(self, key: K, version: int) -> tuple[V, ...]:
        """The list under ``key`` at ``version``. O(1) for a small list at its newest version, else
        O(length)."""
        items = self._items.get(key)
        if items is None:
            return ()
        stamps = self._stamps[key]
        if stamps[-1] <= version:
            return items if type(items) is tuple else tuple(items)
        return tuple(items[: bisect_right(stamps, version)])

    def head_list(self, key: K) -> Sequence[V]:
        """The newest list under ``key`` (read-only by convention; do not keep it)."""
        return self._items.get(key, ())

    def keys_at(self, version: int) -> Iterator[K]:
        born = self._born
        n = len(born) if not born or born[-1] <= version else bisect_right(born, version)
        yield from self._order[:n]

    def len_at(self, version: int) -> int:
        born = self._born
        return len(born) if not born or born[-1] <= version else bisect_right(born, version)

    def items_at(self, version: int) -> list[tuple[K, tuple[V, ...]]]:
        """``(key, list at version)`` for every key present at ``version``, in first-insertion
        order, as a new list. O(keys + items); one copy of the newest dict when nothing newer than
        ``version`` was appended (see `VersionedMap.items_at`)."""
        latest = list(self._items.items())
        if self._wide:
            latest = [(key, items if type(items) is tuple else tuple(items)) for key, items in latest]
        if self._last_stamp <= version:
            return latest  # type: ignore[return-value]
        get_at = self.get_at
        return [(key, get_at(key, version)) for key in self.keys_at(version)]

    def append(self, key: K, value: V, stamp: int) -> None:
        if stamp > self._last_stamp:
            self._last_stamp = stamp
        items = self._items.get(key)
        grown = _appended(items, value)
        if type(grown) is list and not self._wide:
            self._wide = True
        self._items[key] = grown
        if items is None:
            self._stamps[key] = array("q", (stamp,))
            self._order.append(key)
            self._born.append(stamp)
        else:
            self._stamps[key].append(stamp)

    def fork_at(self, version: int) -> VersionedListMap[K, V]:
        out: VersionedListMap[K, V] = VersionedListMap()
        for key in self.keys_at(version):
            for value in self.get_at(key, version):
                out.append(key, value, 0)
        return out


class VersionedList[V]:
    """An append-only list; a version sees the prefix appended by then."""

    __slots__ = ("_items", "_stamps")

    def __init__(self) -> None:
        self._items: list[V] = []
        self._stamps = array("q")

    def len_at(self, version: int) -> int:
        stamps = self._stamps
        return len(stamps) if not stamps or stamps[-1] <= version else bisect_right(stamps, version)

    def get_at(self, version: int) -> tuple[V, ...]:
        return tuple(self._items[: self.len_at(version)])

    def append(self, value: V, stamp: int) -> None:
        self._items.append(value)
        self._stamps.append(stamp)

    def fork_at(self, version: int) -> VersionedList[V]:
        out: VersionedList[V] = VersionedList()
        for value in self.get_at(version):
            out.append(value, 0)
        return out


class MapView(Mapping[K, V]):
    """Read-only `Mapping` over one version of a `VersionedMap`."""

    __slots__ = ("_map", "_version")

    def __init__(self, vmap: VersionedMap[K, V], version: int) -> None:
        self._map = vmap
        self._version = version

    def __getitem__(self, key: K) -> V:
        value = self._map.get_at(key, self._version, MISSING)
        if value is MISSING:
            raise KeyError(key)
        return cast(V, value)

    @overload
    def get(self, key: K, /) -> V | None: ...
    @overload
    def get(self, key: K, /, default: V | D) -> V | D: ...
    def get(self, key: K, /, default: object = None) -> object:
        return self._map.get_at(key, self._version, default)

    def __contains__(self, key: object) -> bool:
        return self._map.get_at(cast(K, key), self._version, MISSING) is not MISSING

    def __iter__(self) -> Iterator[K]:
        return self._map.keys_at(self._version)

    def __len__(self) -> int:
        return self._map.len_at(self._version)

    def items(self) -> ItemsView[K, V]:
        """Items in insertion order; iterating reads the version in bulk (`VersionedMap.items_at`)."""
        return _MapItems(self)

    def values(self) -> ValuesView[V]:
        """Values in insertion order; iterating reads the version in bulk (`VersionedMap.values_at`)."""
        return _MapValues(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.items())!r})"


class _MapItems(ItemsView[K, V]):
    __slots__ = ()
    _mapping: MapView[K, V]

    def __iter__(self) -> Iterator[tuple[K, V]]:
        view = self._mapping
        return iter(view._map.items_at(view._version))


class _MapValues(ValuesView[V]):
    __slots__ = ()
    _mapping: MapView[object, V]

    def __iter__(self) -> Iterator[V]:
        view = self._mapping
        return iter(view._map.values_at(view._version))


class ListMapView(Mapping[K, Sequence[V]]):
    """Read-only `Mapping` over one version of a `VersionedListMap`."""

    __slots__ = ("_map", "_version")

    def __init__(self, vmap: VersionedListMap[K, V], version: int) -> None:
        self._map = vmap
        self._version = version

    def __getitem__(self, key: K) -> Sequence[V]:
        items = self._map.get_at(key, self._version)
        if not items:
            raise KeyError(key)
        return items

    def __iter__(self) -> Iterator[K]:
        return self._map.keys_at(self._version)

    def __len__(self) -> int:
        return self._map.len_at(self._version)

    def items(self) -> ItemsView[K, Sequence[V]]:
        """Items in insertion order; iterating reads the version in bulk
        (`VersionedListMap.items_at`)."""
        return _ListMapItems(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.items())!r})"


class _ListMapItems(ItemsView[K, Sequence[V]]):
    __slots__ = ()
    _mapping: ListMapView[K, V]

    def __iter__(self) -> Iterator[tuple[K, Sequence[V]]]:
        view = self._mapping
        return iter(view._map.items_at(view._version))

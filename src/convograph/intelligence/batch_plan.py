"""Planning a batch of journal records for the graph applier (`convograph.intelligence.ingest`):
everything but the graph writes. The applier's ``_plan`` puts these steps together.

Collision ids (`resolve_node_ids`): the journal is asked for the collision groups of a batch's
base ids only where a filter of base-id keys (`BaseIdFilter`, a 2**27-bit set) has seen the key
before: every record the journal held at the applier's start and every record planned since. A
clear bit proves that no record the graph may hold shares the base id (anything in a graph was
planned from a journal record, before this start or since), so the event keeps the seed id for
now; a later event that shares it finds the bit set, and its group renames as when a
later-arriving member wins. O(1) per event instead of a key computation and an index probe; the
fill at start is O(N) (~0.6 s of CPU per million records).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

import msgspec

from convograph.intelligence.blobs import BlobStore, offload_fields
from convograph.intelligence.engine import GraphEngine
from convograph.intelligence.journal import JournalRecord, event_base_key
from convograph.intelligence.keys import graph_key
from convograph.intelligence.layer1 import EventFacts
from convograph.intelligence.writer import GraphNames, Statement

__all__ = [
    "FILTER_BITS",
    "PayloadHints",
    "PlannedBatch",
    "PlannedStage",
    "base_id_filter",
    "collision_candidates",
    "record_facts",
    "resolve_node_ids",
]

FILTER_BITS = 1 << 27
"""Bits of the applier's filter of planned base-id keys: 16 MiB. Its index is the key's low 27
bits (16 bits of CRC-32 of the base id, 11 of its millisecond); with N keys set, a new key's
false-positive rate is about N / 2**27 (0.75 % at a million)."""
_FILTER_MASK = FILTER_BITS - 1
_decoder = msgspec.json.Decoder(dict[str, Any])


class PlannedStage(Protocol):
    """A later layer split in two: ``plan`` runs with layer 1's planning (on the planner thread,
    batches in seq order, never two at once; a batch may be planned again after a failure),
    ``write`` with layer 1's writes, on the applier thread, in the same order."""

    def plan_stage(
        self, names: GraphNames, records: Sequence[JournalRecord], facts: Sequence[EventFacts]
    ) -> Any: ...

    def write_stage(self, engine: GraphEngine, planned: Any) -> None: ...


class PlannedBatch:
    """A batch ready to write: its records, their facts (kept only for the unplanned stages), the
    rendered layer-1 statements per workspace (in first-seen order), the collision renames and
    the planned stages' plans. Nothing else of the plan is kept: the decoded payloads and the
    layer-1 rows die with the plan instead of waiting (tracked by the cyclic GC, and promoted to
    its oldest generation) until the batch is written."""

    __slots__ = ("extras", "facts", "records", "renames", "statements")

    def __init__(
        self,
        records: Sequence[JournalRecord],
        facts: list[EventFacts],
        renames: dict[str, list[dict[str, str]]],
        statements: dict[str, list[Statement]],
        extras: list[Any],
    ) -> None:
        self.records = records
        self.facts = facts
        self.renames = renames
        self.statements = statements
        self.extras = extras


class PayloadHints:
    """Payloads the ingest path decoded itself, by seq, so planning need not decode the journal's
    bytes again. A cache, never the truth: a missing hint is decoded from the record; at most
    ``limit`` are held (new ones are dropped when full, so a backlog keeps the hints of its
    oldest records, the next to be planned). Thread-safe."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def add(self, payloads: dict[int, dict[str, Any]]) -> None:
        """Hold ``payloads`` (by seq; the caller never mutates them afterwards), as room allows.
        O(len(payloads))."""
        with self._lock:
            room = self.limit - len(self.held)
            if room >= len(payloads):
                self.held.update(payloads)
            elif room > 0:
                for seq, payload in itertools.islice(payloads.items(), room):
                    self.held[seq] = payload

    def take(self, records: Sequence[JournalRecord]) -> list[dict[str, Any] | None]:
        """The hints of ``records`` (None where there is none), dropped from the cache, in
        *reverse* record order (`record_facts` pops them from the end). O(len(records))."""
        with self._lock:
            pop = self.held.pop
            hinted: list[dict[str, Any] | None] = (
                [pop(record.seq, None) for record in records] if self.held else [None] * len(records)
            )
        hinted.reverse()
        return hinted

    def clear(self) -> None:
        with self._lock:
            self.held.clear()


def base_id_filter(base_keys: Iterable[int]) -> bytearray:
    """A filter (`FILTER_BITS`) with the bit of every key in ``base_keys`` set. O(N)."""
    bits = bytearray(FILTER_BITS >> 3)
    mask = _FILTER_MASK
    for key in base_keys:
        index = key & mask
        bits[index >> 3] |= 1 << (index & 7)
    return bits


def collision_candidates(
    records: Sequence[JournalRecord], bits: bytearray | None
) -> dict[str, list[tuple[str, int]]]:
    """Per workspace, the ``(base id, epoch ms)`` of the records whose collision groups the
    journal must be asked for: those whose key ``bits`` has seen before (planned, in the journal
    at start, or earlier in this batch); a first sighting sets its bit instead. Without a filter
    (None): every record. O(len(records))."""
    by_workspace: dict[str, list[tuple[str, int]]] = {}
    mask = _FILTER_MASK
    for record in records:
        if bits is not None:
            key = record.base_key
            if key is None:
                key = event_base_key(record.workspace, record.base_id, record.epoch_ms)
            index = key & mask
            byte, bit = bits[index >> 3], 1 << (index & 7)
            if not byte & bit:
                bits[index >> 3] = byte | bit
                continue
        events = by_workspace.get(record.workspace)
        if events is None:  # not setdefault: no throwaway list per record
            events = by_workspace[record.workspace] = []
        events.append((record.base_id, record.epoch_ms))
    return by_workspace


def resolve_node_ids(
    records: Sequence[JournalRecord], groups: dict[tuple[str, str], list[str]]
) -> tuple[list[str], dict[str, list[dict[str, str]]]]:
    """Final Event ids and, per workspace, the rename groups the batch touches.

    In a collision group (sorted fingerprints) the smallest fingerprint keeps the seed-format id;
    the others get ``__{fingerprint[:12]}`` appended. Deterministic whatever the arrival order.
    """
    ids: list[str] = []
    renames: dict[str, dict[str, dict[str, str]]] = {}
    for record in records:
        base = graph_key(record.base_id)  # an id the engine cannot key gets its stand-in
        fps = groups.get((record.workspace, record.base_id))
        if not fps:
            ids.append(base)
            continue
        winner = fps[0]
        ids.append(base if record.fingerprint == winner else f"{base}__{record.fingerprint[:12]}")
        renames.setdefault(record.workspace, {})[base] = {"base": base, "winner": winner}
    return ids, {ws: list(g.values()) for ws, g in renames.items()}


def record_facts(
    records: Sequence[JournalRecord],
    node_ids: Sequence[str],
    hinted: list[dict[str, Any] | None],
    *,
    blobs: BlobStore,
    threshold: int,
    keep: Callable[[EventFacts], None] | None,
) -> Iterator[EventFacts]:
    """The facts of each record, made as they are consumed (`layer1.plan_batch` runs each
    event through the handlers as soon as its facts exist, so a decoded payload dies young
    unless ``keep`` holds it for the stages). ``hinted``: the payloads the ingest path decoded,
    in reverse record order (None: decode the record's bytes); popped as used, so a payload is
    let go of once planned. Fields of ``threshold`` bytes or more are offloaded to ``blobs``."""
    for record, node_id in zip(records, node_ids, strict=True):
        hint = hinted.pop()
        raw = record.data
        data = hint if hint is not None else _decoder.decode(raw)
        # a field's JSON is shorter than the whole payload's (key order does not change
        # the length), so a payload under the threshold has nothing to offload (most events)
        stored = (
            data
            if isinstance(raw, bytes) and len(raw) < threshold
            else offload_fields(
                blobs,
                workspace=record.workspace,
                session_id=record.session_id,
                base_id=record.base_id,
                fingerprint=record.fingerprint,
                data=data,
                threshold=threshold,
            )
        )
        fact = EventFacts(  # positional: workspace, event, session_id, epoch_ms, fingerprint,
            record.workspace,  # node_id, data, stored_data, created_by, data_json
            record.event,
            record.session_id,
            record.epoch_ms,
            record.fingerprint,
            node_id,
            data,
            stored,
            record.created_by,
            raw.decode() if isinstance(raw, bytes) else str(raw),
        )
        if keep is not None:
            keep(fact)
        yield fact

"""Group commit for single-envelope ``POST /events`` requests (`convograph.intelligence.http`)."""

from __future__ import annotations

import asyncio

from litestar.concurrency import sync_to_thread

from convograph.intelligence.envelope import Envelope
from convograph.intelligence.service import IngestResult, IntelligenceService

__all__ = ["GroupCommit"]

_INLINE_GROUP = 64
"""Single-envelope POSTs of one event-loop turn up to this many are committed on the loop when the
journal can do it without waiting (`IntelligenceService.append_envelopes_nowait`)."""


class GroupCommit:
    """Group commit for single-envelope POSTs: envelopes submitted in one event-loop turn share
    one journal transaction, run on a worker thread (a large batch holding the journal's write
    lock must not stall the event loop); every caller still gets its reply only after that commit."""

    def __init__(self, service: IntelligenceService) -> None:
        self.service = service
        self.pending: list[tuple[Envelope, str | None, asyncio.Future[IngestResult]]] = []
        self.scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, envelope: Envelope, created_by: str | None) -> IngestResult:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[IngestResult] = loop.create_future()
        self.pending.append((envelope, created_by, future))
        if not self.scheduled:
            self.scheduled = True
            loop.call_soon(self.flush)
        return await future

    def flush(self) -> None:
        self.scheduled = False
        pending, self.pending = self.pending, []
        task = asyncio.get_running_loop().create_task(self._commit(pending))
        self._tasks.add(task)  # held until done (the loop keeps only weak references)
        task.add_done_callback(self._tasks.discard)

    async def _commit(self, pending: list[tuple[Envelope, str | None, asyncio.Future[IngestResult]]]) -> None:
        by_author: dict[str | None, list[tuple[Envelope, asyncio.Future[IngestResult]]]] = {}
        for envelope, created_by, future in pending:
            by_author.setdefault(created_by, []).append((envelope, future))
        for created_by, items in by_author.items():
            envelopes = [e for e, _ in items]
            try:
                # a few envelopes and a free SQLite write lock: commit here (~30 µs) rather than
                # pay a thread hand-off and two GIL switches per group
                results = (
                    self.service.append_envelopes_nowait(envelopes, created_by=created_by)
                    if len(envelopes) <= _INLINE_GROUP
                    else None
                )
                if results is None:
                    results = await sync_to_thread(
                        self.service.append_envelopes, envelopes, created_by=created_by
                    )
            except Exception as exc:  # nothing of this group was stored: every caller sees the error
                for _, future in items:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), result in zip(items, results, strict=True):
                if not future.done():
                    future.set_result(result)

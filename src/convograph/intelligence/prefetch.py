"""Planning the next batch while one is written: the graph engine works in its own process and
the socket wait releases the GIL, so planning (on a one-thread planner) and writing overlap.

Two plans never run at once, because planned stages fold per-session state in plan order: a plan
is `settled` (let finish, then dropped) before anything is planned out of turn.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from convograph.intelligence.batch_plan import PlannedBatch
from convograph.intelligence.engine import EngineUnavailable
from convograph.intelligence.journal import JournalRecord

__all__ = ["Prefetch", "journal_pages", "settled", "write_pages"]

log = logging.getLogger("convograph.intelligence.ingest")

Records = Sequence[JournalRecord]


def settled(plan: Future[PlannedBatch] | None) -> None:
    """Let a running plan finish, then drop it (returns ``None``, for ``prefetched =``)."""
    if plan is not None:
        with contextlib.suppress(Exception):
            plan.result()


class Prefetch:
    """The applier loop's planner thread and the one plan it runs ahead (`ahead`)."""

    def __init__(self) -> None:
        self.planner = ThreadPoolExecutor(1, thread_name_prefix="convograph-ci-planner")
        self.ahead: Future[PlannedBatch] | None = None

    def submit(self, plan: Callable[[Records], PlannedBatch], records: Records) -> None:
        self.ahead = self.planner.submit(plan, records)

    def take(self) -> PlannedBatch | None:
        """The plan run ahead (None: none, or its planning failed: logged), now no longer ahead."""
        ahead, self.ahead = self.ahead, None
        if ahead is None:
            return None
        try:
            return ahead.result()
        except Exception as exc:  # the caller plans it again inline, isolating if needed
            log.warning("prefetched planning failed (%s)", exc)
            return None

    def drop(self) -> None:
        """`settled` the plan run ahead: it is not next any more."""
        settled(self.ahead)
        self.ahead = None

    def close(self) -> None:
        self.planner.shutdown(wait=True, cancel_futures=True)


def journal_pages(read_after: Callable[[int], Records]) -> Iterator[Records]:
    """Pages of records, ``read_after(0)`` first, then each after the last seq of the one before,
    until an empty page. Lazy: a page is read when the one before has been planned."""
    page = read_after(0)
    while page:
        yield page
        page = read_after(page[-1].seq)


def write_pages(
    pages: Iterator[Records],
    *,
    plan: Callable[[Records], PlannedBatch],
    write: Callable[[PlannedBatch], None],
    isolate: Callable[[Records], None],
    planner: ThreadPoolExecutor | None,
    stop: threading.Event,
    what: str,
) -> None:
    """Plan and write every page (until ``stop``), planning the next page on ``planner`` while one
    is written. A page that fails to plan or write is isolated (`GraphApplier._isolate`: record by
    record, dead-lettering what still fails), and the next page is planned again after it; an
    unavailable engine ends it (raised). ``what`` names the work in log lines."""
    records = next(pages, None)
    ahead: Future[PlannedBatch] | None = None
    while records and not stop.is_set():
        planned: PlannedBatch | None = None
        try:
            planned = ahead.result() if ahead is not None else plan(records)
        except Exception as exc:
            log.warning("%s planning of %d failed (%s); isolating records", what, len(records), exc)
        following = next(pages, None)
        ahead = planner.submit(plan, following) if following and planner is not None else None
        try:
            if planned is not None:
                try:
                    write(planned)
                except EngineUnavailable:
                    raise
                except Exception as exc:
                    log.warning("%s batch of %d failed (%s); isolating records", what, len(records), exc)
                    planned = None
            if planned is None:  # isolating plans again: the next page is planned again too
                settled(ahead)
                ahead = None
                isolate(records)
        except BaseException:
            settled(ahead)  # never leave a plan running behind a failure
            raise
        records = following

"""The server's intelligence feeder: its cursor file."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from convograph.server.feeder import IntelligenceFeeder
from convograph.testing import MemoryEventLog


def test_saves_from_several_threads_at_once_never_lose_the_cursor_file(tmp_path: Path) -> None:
    """`forget` and the feed loop save from worker threads, possibly at once: saves take turns
    (two writers of one temporary file raised FileNotFoundError, a 500 on an OTLP trace move)."""
    path = tmp_path / "intelligence-feed.json"
    feeder = IntelligenceFeeder(MemoryEventLog(), object(), path)
    feeder._cursors.update({f"conversation-{n}": n for n in range(100)})
    errors: list[BaseException] = []

    def save_often() -> None:
        for _ in range(200):
            try:
                feeder._save()
            except BaseException as exc:  # collected: a thread's exception would be lost
                errors.append(exc)

    threads = [threading.Thread(target=save_often) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert json.loads(path.read_text()) == {f"conversation-{n}": n for n in range(100)}

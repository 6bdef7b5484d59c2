"""`content.HistoryMemo`: replaying the history a content run was last shown with gives exactly the
events re-deriving it gives, and is used only when that is so."""

from __future__ import annotations

from typing import Any

import pytest

from convograph.integrations.otlp import content
from convograph.integrations.otlp.content import HistoryMemo, content_events
from convograph.integrations.otlp.messages import span_messages
from tests.support.genai_traces import Simulation, assistant, call, reasoning, text, tool_message, user


def long_run(steps: int) -> list[Any]:
    sim = Simulation()

    def body(span: str) -> None:
        history = [user("start")]
        for step in range(steps):
            output = assistant(reasoning(f"r{step}"), text(f"t{step}"), call(f"c{step}", "f", {"q": step}))
            sim.chat(span, history, output)
            history += [output, tool_message(f"c{step}", f"result {step}")]

    sim.agent(None, "a", body)
    return [span for span in sim.ended if span.name.startswith("chat")]


def write_all(spans: list[Any], memo: HistoryMemo | None) -> list[Any]:
    """Every span's content events, as the ingestor writes them (stored ids become known)."""
    known: set[str] = set()
    out: list[Any] = []
    for span in spans:
        events = content_events(span, span_messages(span), known, memo)
        known.update(event.event_id for event in events)
        out.extend(events)
    return out


def test_replayed_histories_give_the_same_events(monkeypatch: pytest.MonkeyPatch) -> None:
    spans = long_run(12)
    replayed: list[Any] = []
    original = content._Writer.replay
    monkeypatch.setattr(
        content._Writer, "replay", lambda self, step: (replayed.append(step), original(self, step))
    )
    assert write_all(spans, HistoryMemo()) == write_all(spans, None)
    assert len(replayed) > 100  # the memo did the work: 2 messages a call written, the rest replayed


def test_a_step_is_not_replayed_when_its_events_are_not_known() -> None:
    """The conversation's stored ids were forgotten (another process, an evicted cache): the memo
    must not hide events that are not stored."""
    spans = long_run(3)
    memo = HistoryMemo()
    first = content_events(spans[-1], span_messages(spans[-1]), set(), memo)
    again = content_events(spans[-1], span_messages(spans[-1]), set(), memo)
    assert again == first
    assert len(first) > 6


def test_the_memo_is_bounded() -> None:
    memo = HistoryMemo(size=2)
    for run in ("a", "b", "c"):
        memo.put(run, b"root", [])
    assert memo.get("a", b"root") == []
    assert len(memo._runs) == 2

"""The instrumentation example runs as documented: a plain OpenAI tool loop, the scripted model
server standing in for OpenAI, recorded into an event log."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from convograph.events import Text, ToolCall, ToolResult, Usage, User
from convograph.store import open_event_log
from convograph.testing import ModelServer, Reply, Say, load_script

ROOT = Path(__file__).resolve().parents[1]


def stored_events(database: Path, conversation_id: str) -> list[Any]:
    """The events of ``conversation_id`` in the SQLite event log at ``database``."""

    async def read() -> list[Any]:
        log = await open_event_log(f"sqlite:///{database}")
        try:
            return [stored.event for stored in await log.read(conversation_id)]
        finally:
            await log.close()

    return asyncio.run(read())


def test_the_example_records_its_tool_loop(tmp_path: Path) -> None:
    database = tmp_path / "events.db"
    with ModelServer(load_script(ROOT / "examples" / "instrument-script.json")) as server:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": server.openai_base_url,
            "OPENAI_API_KEY": "test",
            "CONVOGRAPH_SINK": f"sqlite:///{database}",
        }
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "instrument_openai.py")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert "Sunny in both" in done.stdout
    assert "recorded into sqlite:///" in done.stdout
    assert all(not request.problems for request in server.requests)

    events = stored_events(database, "weather-demo")
    assert [e.content for e in events if isinstance(e, User)] == ["What is the weather in Paris and in Rome?"]
    assert sorted(e.input["city"] for e in events if isinstance(e, ToolCall)) == ["Paris", "Rome"]
    assert len([e for e in events if isinstance(e, ToolResult)]) == 2
    assert "".join(e.content for e in events if isinstance(e, Text)).endswith("27 C in Rome.")
    assert [u.input_tokens for u in events if isinstance(u, Usage)] == [180, 260]


APP_WITHOUT_CLEANUP = """
import os, openai
from convograph.instrument import instrument
client = openai.OpenAI()
instrument(client, sink=os.environ["CONVOGRAPH_SINK"], conversation_id="at-exit")
stream = client.chat.completions.create(
    model="m", messages=[{"role": "user", "content": "hi"}], stream=True
)
print("".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices))
"""


def test_what_an_app_recorded_is_stored_when_it_exits_without_cleaning_up(tmp_path: Path) -> None:
    database = tmp_path / "events.db"
    with ModelServer([Reply(content=[Say(text="Bye now.")])]) as server:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": server.openai_base_url,
            "OPENAI_API_KEY": "test",
            "CONVOGRAPH_SINK": f"sqlite:///{database}",
        }
        done = subprocess.run(
            [sys.executable, "-c", APP_WITHOUT_CLEANUP],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Bye now."

    events = stored_events(database, "at-exit")
    assert [type(e).__name__ for e in events][:2] == ["User", "HarnessStart"]
    assert "".join(e.content for e in events if isinstance(e, Text)) == "Bye now."
    assert type(events[-1]).__name__ == "HarnessEnd"

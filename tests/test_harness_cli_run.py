"""`convograph run` with the offline scripted models, into a local SQLite event log."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from convograph.cli import app
from convograph.store import open_event_log

runner = CliRunner()

TOOLS_MODULE = '''
from convograph.harness import tool

@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b

@tool(policy="deny")
def remove(path: str) -> str:
    """Delete a file."""
    return "deleted"

TOOLS = [add, remove]
'''


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CONVOGRAPH_DATABASE_URL", f"sqlite:///{tmp_path / 'events.db'}")
    (tmp_path / "cli_tools_for_test.py").write_text(TOOLS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("cli_tools_for_test", None)
    return tmp_path


def stored_types(workdir: Path, conversation: str) -> list[str]:
    async def read() -> list[str]:
        log = await open_event_log(f"sqlite:///{workdir / 'events.db'}")
        try:
            return [stored.event.type for stored in await log.read(conversation)]
        finally:
            await log.close()

    return asyncio.run(read())


def test_a_run_shows_the_thread_and_exits_0(workdir: Path) -> None:
    result = runner.invoke(app, ["run", "hello there", "--model", "scripted:echo", "--conversation", "c1"])
    assert result.exit_code == 0, result.output
    assert "> hello there" in result.output
    assert "You said: hello there" in result.output
    assert "final after 1 model calls" in result.output
    types = stored_types(workdir, "c1")
    collapsed = [t for i, t in enumerate(types) if i == 0 or types[i - 1] != t]  # text arrives in chunks
    assert collapsed == ["user", "harness_start", "text", "usage", "harness_end"]


def test_tools_permissions_and_bad_arguments_show_as_lines(workdir: Path) -> None:
    script = [
        {
            "text": "Working.",
            "tool_calls": [
                {"name": "add", "arguments": {"a": 1, "b": 2}},
                {"name": "remove", "arguments": {"path": "/"}},
                {"name": "add", "arguments": "{bad"},
            ],
        },
        {"text": "It is 3."},
    ]
    path = workdir / "script.json"
    path.write_text(json.dumps(script))
    args = [
        "run",
        "add",
        "--model",
        f"scripted:{path}",
        "--tools",
        "cli_tools_for_test:TOOLS",
        "--conversation",
        "c2",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert '⚙ add {"a": 1, "b": 2}' in result.output
    assert "↳ 3" in result.output
    assert "↳ denied: denied by policy" in result.output
    assert "↳ error: Tool call had malformed arguments" in result.output
    assert "It is 3." in result.output


def test_continuing_a_conversation_sends_its_history(workdir: Path) -> None:
    assert (
        runner.invoke(app, ["run", "first", "--model", "scripted:echo", "--conversation", "c3"]).exit_code
        == 0
    )
    again = runner.invoke(app, ["run", "second", "--model", "scripted:echo", "--conversation", "c3"])
    assert again.exit_code == 0, again.output
    assert stored_types(workdir, "c3").count("user") == 2


def test_a_run_that_fails_exits_1_with_the_reason(workdir: Path) -> None:
    path = workdir / "fail.json"
    path.write_text(json.dumps([{"error": "401 Unauthorized: set OPENAI_API_KEY"}]))
    result = runner.invoke(app, ["run", "x", "--model", f"scripted:{path}"])
    assert result.exit_code == 1
    assert "error: 401 Unauthorized: set OPENAI_API_KEY" in result.output
    assert "the run ended without an answer (error: model call failed: 401 Unauthorized" in result.output


def test_max_turns_ends_with_exit_1(workdir: Path) -> None:
    path = workdir / "loop.json"
    path.write_text(json.dumps([{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}] * 2))
    args = [
        "run",
        "x",
        "--model",
        f"scripted:{path}",
        "--tools",
        "cli_tools_for_test:TOOLS",
        "--max-turns",
        "2",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert "(max_turns)" in result.output


def test_the_repl_mode(workdir: Path) -> None:
    path = workdir / "repl.json"
    path.write_text(
        json.dumps([{"text": "```python\nx = 6 * 7\nprint(x)\n```"}, {"text": "```python\nFINAL(x)\n```"}])
    )
    result = runner.invoke(
        app, ["run", "compute", "--model", f"scripted:{path}", "--repl", "--conversation", "r1"]
    )
    assert result.exit_code == 0, result.output
    assert "│ 42" in result.output
    assert "final after 2 model calls" in result.output
    assert "repl_output" in stored_types(workdir, "r1")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "gpt-4o"], "model spec 'gpt-4o' must be API:MODEL, one of openai:MODEL"),
        (["--model", "mistral:large"], "unknown API 'mistral' in model spec 'mistral:large'"),
        (["--model", "scripted:/no/such.json"], "cannot read the scripted model"),
        (["--model", "scripted:echo", "--tools", "nope"], "--tools must look like module:attribute"),
        (["--model", "scripted:echo", "--tools", "no_such_module_x:T"], "cannot load tools"),
        (
            ["--model", "scripted:echo", "--server", "localhost:1"],
            "--server must be an http:// or https:// URL",
        ),
        (["--model", "scripted:echo", "--max-turns", "0"], "--max-turns must be at least 1"),
        (
            ["--model", "scripted:echo", "--repl", "--tools", "cli_tools_for_test:TOOLS"],
            "--tools does not apply",
        ),
    ],
)
def test_bad_arguments_exit_2_naming_the_problem(workdir: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["run", "x", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_ctrl_c_cancels_the_run_with_its_events_and_exits_130(workdir: Path) -> None:
    import os
    import signal
    import subprocess
    import time

    path = workdir / "hang.json"
    path.write_text(json.dumps([{"text": "thinking", "hang": True}]))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "convograph",
            "run",
            "wait",
            "--model",
            f"scripted:{path}",
            "--conversation",
            "int",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 60
        seen = ""
        while "thinking" not in seen and time.monotonic() < deadline:
            seen += process.stdout.read(1)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert "interrupted: the run was cancelled" in err
    assert ": cancelled after 1 model calls" in out
    types = stored_types(workdir, "int")
    assert types[-1] == "harness_end"

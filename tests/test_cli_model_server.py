"""``convograph model-server``: a real process serving a script file to the official SDKs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

import anthropic
import openai
from typer.testing import CliRunner

from convograph.cli import app

SCRIPT = {
    "replies": [
        {"match": {"api": "messages"}, "content": [{"type": "text", "text": "hello from the script"}]},
        {"content": [{"type": "tool_call", "name": "add", "arguments": {"a": 1}}]},
    ]
}


def _line(stream: IO[str], prefix: str) -> str:
    for line in stream:
        if line.startswith(prefix):
            return line.strip()
    raise AssertionError(f"the server printed no line starting with {prefix!r}")


def _ignored_signals(pid: int) -> str:
    """The ``SigIgn`` mask of process ``pid`` (Linux), for a diagnosis."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "unknown"
    return next(
        (line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("SigIgn")), "?"
    )


def test_serves_a_script_file_to_both_sdks(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    process = subprocess.Popen(
        [sys.executable, "-m", "convograph", "model-server", str(script), "--api-key", "sk-cli"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        _line(process.stdout, "model server listening on http://127.0.0.1:")
        openai_url = _line(process.stdout, "OPENAI_BASE_URL=").split("=", 1)[1]
        anthropic_url = _line(process.stdout, "ANTHROPIC_BASE_URL=").split("=", 1)[1]
        claude = anthropic.Anthropic(base_url=anthropic_url, api_key="sk-cli", max_retries=0)
        message = claude.messages.create(
            model="m", max_tokens=32, messages=[{"role": "user", "content": "hi"}]
        )
        chat = openai.OpenAI(base_url=openai_url, api_key="sk-cli", max_retries=0)
        completion = chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert _line(process.stdout, "#0 POST /v1/messages") == "#0 POST /v1/messages -> 200 (reply 0)"
    finally:
        ignored = _ignored_signals(process.pid)
        process.send_signal(signal.SIGINT)
        try:
            out, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            raise AssertionError(
                f"the model server did not stop on SIGINT within 30 s (its ignored-signal mask "
                f"{ignored}, this process's SIGINT handler {signal.getsignal(signal.SIGINT)!r}); "
                f"stdout: {out!r}; stderr: {err!r}"
            ) from None
    assert message.content[0].type == "text"
    assert message.content[0].text == "hello from the script"
    calls = completion.choices[0].message.tool_calls
    assert calls is not None
    assert calls[0].function.arguments == '{"a":1}'  # type: ignore[union-attr]
    assert process.returncode == 0, err
    assert "stopped after 2 requests; 0 scripted replies unused" in out


def test_a_bad_script_is_refused_naming_the_problem(tmp_path: Path) -> None:
    script = tmp_path / "bad.json"
    script.write_text(json.dumps([{"content": [{"type": "speech", "text": "x"}]}]))
    result = CliRunner().invoke(app, ["model-server", str(script)])
    assert result.exit_code == 2
    assert "bad.json" in result.output
    assert "invalid model-server script" in result.output

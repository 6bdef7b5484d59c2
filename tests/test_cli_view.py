"""`convograph view` and `convograph export`: rendering, formats, exit codes, stored conversations."""

from __future__ import annotations

import asyncio
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from convograph.cli import app
from convograph.events import parse_event
from tests.test_projections_messages import assert_valid_anthropic, assert_valid_openai

runner = CliRunner()

EVENTS: list[dict[str, Any]] = [
    {"type": "user", "runId": "u", "content": "Find the bug"},
    {"type": "harness_start", "runId": "a", "parentId": "u:user"},
    {"type": "reasoning", "runId": "a", "id": "r", "content": "thinking hard"},
    {"type": "text", "runId": "a", "id": "t1", "content": "Delegating."},
    {"type": "tool_call", "runId": "a", "id": "c1", "name": "agent", "input": {"task": "grep"}},
    {"type": "harness_start", "runId": "s", "parentId": "c1"},
    {"type": "text", "runId": "s", "id": "st", "content": "nested subagent words"},
    {"type": "tool_call", "runId": "s", "id": "c2", "name": "deeper", "input": {}},
    {"type": "text", "runId": "s2", "parentId": "c2", "id": "s2t", "content": "second level"},
    {"type": "harness_end", "runId": "s"},
    {"type": "tool_result", "runId": "a", "id": "c1", "name": "agent", "output": "found"},
    {"type": "text", "runId": "a", "id": "t2", "content": "Fixed it."},
    {"type": "harness_end", "runId": "a"},
]


@pytest.fixture
def stream(tmp_path: Path) -> Path:
    path = tmp_path / "stream.ndjson"
    path.write_text("\n".join(json.dumps(e) for e in EVENTS) + "\n")
    return path


def test_view_renders_the_thread_with_nested_branches(stream: Path) -> None:
    result = runner.invoke(app, ["view", str(stream)])
    assert result.exit_code == 0, result.output
    out = result.output
    for text in (
        "Find the bug",
        "Delegating.",
        "agent",
        "found",
        "nested subagent words",
        "second level",
        "Fixed it.",
    ):
        assert text in out
    assert out.index("Delegating.") < out.index("nested subagent words") < out.index("Fixed it.")
    assert "branch 1: run s" in out
    assert "branch 1: run s2" in out
    nested = next(line for line in out.splitlines() if "second level" in line)
    top = next(line for line in out.splitlines() if "Fixed it." in line)
    assert len(nested) - len(nested.lstrip()) > len(top) - len(top.lstrip())


def test_view_says_a_thinking_block_was_redacted(tmp_path: Path) -> None:
    events = [
        {"type": "user", "runId": "u", "content": "Why?"},
        {
            "type": "reasoning",
            "runId": "a",
            "parentId": "u:user",
            "id": "r1",
            "content": "",
            "redactedData": "EmwK",
        },
        {"type": "text", "runId": "a", "id": "t1", "content": "Because."},
    ]
    source = tmp_path / "redacted.ndjson"
    source.write_text("".join(json.dumps(e) + "\n" for e in events))
    result = runner.invoke(app, ["view", str(source)])
    assert result.exit_code == 0, result.output
    assert "[redacted by the provider]" in result.output
    assert "EmwK" not in result.output


def test_view_options(stream: Path) -> None:
    result = runner.invoke(app, ["view", str(stream), "--hide-reasoning", "--hide-subagents"])
    assert result.exit_code == 0
    assert "thinking hard" not in result.output
    assert "nested subagent words" not in result.output
    assert "Fixed it." in result.output


def test_view_tree_shows_runs_and_nodes(stream: Path) -> None:
    result = runner.invoke(app, ["view", str(stream), "--tree"])
    assert result.exit_code == 0, result.output
    for text in ("run u", "run a", "run s", "run s2", "harness_start", "tool_result c1:result"):
        assert text in result.output


def test_view_reports_bad_lines_and_still_renders(tmp_path: Path) -> None:
    path = tmp_path / "bad.ndjson"
    path.write_text(json.dumps(EVENTS[0]) + "\n{not json\n" + json.dumps({"type": "text"}) + "\n")
    result = runner.invoke(app, ["view", str(path)])
    assert result.exit_code == 1
    assert "Find the bug" in result.output
    assert "line 2" in result.output
    assert "line 3" in result.output


def test_view_missing_file() -> None:
    result = runner.invoke(app, ["view", "/no/such/file.ndjson"])
    assert result.exit_code == 2
    assert "no such file" in result.output


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "gateway"])
def test_export_messages(stream: Path, fmt: str) -> None:
    result = runner.invoke(app, ["export", str(stream), "--format", fmt])
    assert result.exit_code == 0, result.output
    messages = json.loads(result.output)
    assert messages[0]["role"] == "user"
    assert "nested subagent words" not in result.output
    if fmt == "openai":
        assert_valid_openai(messages)
    elif fmt == "anthropic":
        assert_valid_anthropic(messages)


def test_export_thread_dag_and_svg(stream: Path, tmp_path: Path) -> None:
    thread = json.loads(runner.invoke(app, ["export", str(stream), "-f", "thread"]).output)
    assert thread[3]["content"]["kind"] == "tool_call"
    assert thread[3]["branches"][0][0]["runId"] == "s"
    dag = json.loads(runner.invoke(app, ["export", str(stream), "-f", "dag"]).output)
    assert len(dag["nodes"]) == len(EVENTS)
    target = tmp_path / "out.svg"
    result = runner.invoke(app, ["export", str(stream), "-f", "svg", "-o", str(target)])
    assert result.exit_code == 0
    assert ET.fromstring(target.read_text()).tag.endswith("svg")


def test_export_repl_reads_the_hypergraph(tmp_path: Path) -> None:
    """``repl_*`` events are not flat-graph nodes: the REPL view comes from the hypergraph."""
    events = [
        {"type": "harness_start", "runId": "R", "agentId": "rlm", "maxIterations": 3},
        {"type": "repl_input", "runId": "R", "id": "k1", "code": "print(1)", "iteration": 0},
        {"type": "repl_progress", "runId": "R", "id": "k1", "chunk": "1\n"},
        {"type": "repl_progress", "runId": "R", "id": "k1", "chunk": "oops\n", "stream": "stderr"},
        {"type": "repl_output", "runId": "R", "id": "k1", "stdout": "1\n", "done": True},
        {"type": "text", "runId": "R", "id": "a", "content": "one"},
        {"type": "harness_end", "runId": "R", "reason": "final"},
    ]
    source = tmp_path / "rlm.ndjson"
    source.write_text("".join(json.dumps(e) + "\n" for e in events) + "not json\n")
    result = runner.invoke(app, ["export", str(source), "-f", "repl"])
    assert result.exit_code == 1  # the invalid last line was skipped and reported
    view = json.loads(result.stdout)
    (agent,) = view["agents"]
    assert (agent["runId"], agent["status"], agent["finalAnswer"]) == ("R", "done", "one")
    (turn,) = agent["turns"]
    assert (turn["code"], turn["stdout"], turn["stderr"]) == ("print(1)", "1\n", "oops\n")
    assert turn["output"] == {
        "stdout": "1\n",
        "done": True,
        "error": None,
        "durationMs": None,
        "truncated": None,
    }


def test_export_rejects_unknown_format(stream: Path) -> None:
    result = runner.invoke(app, ["export", str(stream), "-f", "gemini"])
    assert result.exit_code == 2


def test_view_and_export_read_a_stored_conversation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from convograph.store import DATABASE_URL_ENV, open_event_log

    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)  # the embedded store under --data-dir

    async def store() -> None:
        log = await open_event_log(data_dir=tmp_path)
        try:
            await log.append("conv-1", [parse_event(e) for e in EVENTS])
        finally:
            await log.close()

    asyncio.run(store())
    result = runner.invoke(app, ["view", "conv-1", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "Fixed it." in result.output
    exported = runner.invoke(app, ["export", "conv-1", "--data-dir", str(tmp_path), "-f", "openai"])
    assert json.loads(exported.output)[-1]["content"] == "Fixed it."
    missing = runner.invoke(app, ["view", "conv-2", "--data-dir", str(tmp_path)])
    assert missing.exit_code == 2
    assert "no file and no stored conversation" in missing.output


def test_view_a_directory_says_so(tmp_path: Path) -> None:
    result = runner.invoke(app, ["view", str(tmp_path)])
    assert result.exit_code == 2
    assert "is a directory" in result.output


def test_view_keeps_good_lines_when_one_is_not_utf8(tmp_path: Path) -> None:
    """A non-UTF-8 line made the whole file unreadable (exit 2, nothing shown)."""
    path = tmp_path / "mixed.ndjson"
    path.write_bytes(
        b'{"type":"text","runId":"a","id":"t","content":"\xff"}\n'
        b'{"type":"text","runId":"a","id":"t2","content":"still here"}\n'
    )
    result = runner.invoke(app, ["view", str(path)])
    assert result.exit_code == 1
    assert "still here" in result.output
    assert "line 1: invalid JSON: not UTF-8" in result.output


def test_view_of_an_unknown_id_creates_no_event_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from convograph.store import DATABASE_URL_ENV

    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    data_dir = tmp_path / "absent"
    result = runner.invoke(app, ["view", "conv-1", "--data-dir", str(data_dir)])
    assert result.exit_code == 2
    assert "no file and no stored conversation named 'conv-1'" in result.output
    assert not data_dir.exists()  # was created, with an empty events.db, by a read


def test_view_with_an_unreachable_event_log_is_a_short_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from convograph.store import DATABASE_URL_ENV

    monkeypatch.setenv(DATABASE_URL_ENV, "redis://127.0.0.1:1/0")
    result = runner.invoke(app, ["view", "conv-1"])
    assert result.exit_code == 2  # was a BackendUnavailable traceback
    assert "redis event log unavailable" in result.output


def test_export_to_an_unwritable_path_is_a_short_error(stream: Path, tmp_path: Path) -> None:
    for target in (tmp_path / "no" / "such" / "dir.json", tmp_path):
        result = runner.invoke(app, ["export", str(stream), "-o", str(target)])
        assert result.exit_code == 2, result.output  # was a FileNotFoundError / IsADirectoryError traceback
        assert f"cannot write {target}" in result.output

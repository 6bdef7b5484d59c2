"""`convograph ingest`: summaries on good files, every bad line reported, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from convograph.cli import app
from convograph.examples import example_ndjson

runner = CliRunner()


def test_ingest_example_summarises_graph(tmp_path: Path) -> None:
    path = tmp_path / "example.ndjson"
    path.write_bytes(example_ndjson())
    result = runner.invoke(app, ["ingest", str(path)])
    assert result.exit_code == 0, result.output
    assert "nodes" in result.output
    assert "invalid lines  0" in result.output
    assert "tool_call=4" in result.output


def test_ingest_reports_every_bad_line_and_applies_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "bad.ndjson"
    path.write_bytes(
        b'{"type":"text","runId":"r","id":"t","content":"ok"}\n'
        b"{nope\n"
        b'{"type":"usage","runId":"r","inputTokens":"x","outputTokens":1}\n'
        b'{"type":"mystery","runId":"r"}\n'
    )
    result = runner.invoke(app, ["ingest", str(path)])
    assert result.exit_code == 1
    output = result.output
    assert "line 2: invalid JSON" in output
    assert "line 3, field `inputTokens`" in output
    assert "line 4, field `type`: unknown event type 'mystery'" in output
    assert "nodes          1" in output


def test_ingest_missing_file_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["ingest", str(tmp_path / "absent.ndjson")])
    assert result.exit_code == 2
    assert "no such file" in result.output


def test_python_dash_m_is_the_same_cli(tmp_path: Path) -> None:
    path = tmp_path / "example.ndjson"
    path.write_bytes(example_ndjson())
    done = subprocess.run(
        [sys.executable, "-m", "convograph", "ingest", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "nodes" in done.stdout

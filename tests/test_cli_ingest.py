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


def test_ingest_a_directory_says_so(tmp_path: Path) -> None:
    result = runner.invoke(app, ["ingest", str(tmp_path)])
    assert result.exit_code == 2
    assert "is a directory" in result.output  # was "no such file"


def test_ingest_reads_a_fifo(tmp_path: Path) -> None:
    """`convograph ingest <(zcat log.gz)` hands over a pipe, not a regular file: it was refused."""
    import os
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(example_ndjson()), daemon=True)
    writer.start()
    result = runner.invoke(app, ["ingest", str(fifo)])
    if writer.is_alive():  # the command never opened the pipe: release the blocked writer
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
    writer.join(timeout=10)
    assert result.exit_code == 0, result.output
    assert "tool_call=4" in result.output


def test_ingest_survives_lines_the_decoder_cannot_read(tmp_path: Path) -> None:
    """A non-UTF-8 line or a line nested too deeply used to end the command with a traceback,
    losing every good line; now each is one reported invalid line."""
    path = tmp_path / "mixed.ndjson"
    good = b'{"type":"text","runId":"r","id":"t","content":"ok"}\n'
    path.write_bytes(
        b'{"type":"text","runId":"r","id":"t","content":"\xff"}\n'
        + good
        + b"[" * 5000
        + b"]" * 5000
        + b"\n"
        + good
    )
    result = runner.invoke(app, ["ingest", str(path)])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "types: text=2" in result.output
    assert "line 1: invalid JSON: not UTF-8" in result.output
    assert "line 3: invalid JSON: nested too deeply" in result.output

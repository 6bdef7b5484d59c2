"""`convograph keys create`: bad arguments and bad key files are one-line errors naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from convograph.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["  "], "the key id must not be blank"),  # was stored as a key named "  "
        (["k", "--workspace", ""], "--workspace must not be blank"),  # was a key for workspace ""
        (["k", "--scope", "root"], "unknown scope(s) root"),
    ],
)
def test_bad_arguments_write_nothing(args: list[str], message: str, tmp_path: Path) -> None:
    file = tmp_path / "keys.json"
    result = runner.invoke(app, ["keys", "create", *args, "--file", str(file)], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert message in result.output
    assert not file.exists()


def test_a_broken_key_file_is_named(tmp_path: Path) -> None:
    file = tmp_path / "keys.json"
    file.write_text("not json")
    result = runner.invoke(app, ["keys", "create", "k", "--file", str(file)], env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert f"key file {file}: JSON is malformed" in result.output  # the file was not named
    assert file.read_text() == "not json"
    result = runner.invoke(app, ["keys", "create", "k", "--file", str(tmp_path)], env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert f"cannot write key file {tmp_path}" in result.output


def test_a_key_is_created(tmp_path: Path) -> None:
    file = tmp_path / "keys.json"
    result = runner.invoke(app, ["keys", "create", "k", "--file", str(file), "--workspace", "w"])
    assert result.exit_code == 0, result.output
    assert "k" in json.dumps(json.loads(file.read_text()))

"""`convograph keys create`: bad arguments and bad key files are one-line errors naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from convograph.cli import app
from convograph.server.auth import KeyRing, add_key_to_file

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["  "], "the key id must not be blank"),  # was stored as a key named "  "
        (["k", "--workspace", ""], "workspace names must not be blank"),  # was a key for workspace ""
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
    assert f"API key file {file} is invalid: JSON is malformed" in result.output  # was not named
    assert file.read_text() == "not json"
    result = runner.invoke(app, ["keys", "create", "k", "--file", str(tmp_path)], env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert f"cannot write key file {tmp_path}" in result.output


def test_a_key_is_created(tmp_path: Path) -> None:
    file = tmp_path / "keys.json"
    result = runner.invoke(app, ["keys", "create", "k", "--file", str(file), "--workspace", "w"])
    assert result.exit_code == 0, result.output
    assert "k" in json.dumps(json.loads(file.read_text()))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"key_id": " ", "scopes": ["read"]}, "the key id must not be blank"),
        ({"key_id": "k", "scopes": []}, "a key needs at least one scope"),
        ({"key_id": "k", "scopes": ["read", "root"]}, "unknown scope(s) root"),
        ({"key_id": "k", "scopes": ["read"], "workspaces": []}, "must name at least one workspace"),
        ({"key_id": "k", "scopes": ["read"], "workspaces": ["w", " "]}, "workspace names must not be blank"),
    ],
)
def test_the_library_refuses_what_the_cli_refuses(
    arguments: dict[str, object], message: str, tmp_path: Path
) -> None:
    """`add_key_to_file` used to store these (a key named " ", a key reaching workspace "" or none)."""
    file = tmp_path / "keys.json"
    add_key_to_file(file, key_id="first", scopes=["read"])
    before = file.read_bytes()
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        add_key_to_file(file, **arguments)  # type: ignore[arg-type]
    assert file.read_bytes() == before  # nothing already accepted is lost or changed


def test_a_created_key_authenticates_with_its_scopes_and_workspaces(tmp_path: Path) -> None:
    file = tmp_path / "keys.json"
    key = add_key_to_file(file, key_id="k", scopes=["write", "write", "read"], workspaces=["acme"])
    principal = KeyRing.load(file).authenticate(key)
    assert principal is not None
    assert principal.scopes == frozenset({"read", "write"})
    assert principal.can_reach_workspace("acme")
    assert not principal.can_reach_workspace("other")
    assert KeyRing.load(file).authenticate(key + "x") is None

"""The command line a newcomer meets first: --version, readable defaults in --help, errors that name
the server tried and the fix, and `serve` saying where everything is once it listens."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from convograph import __version__
from convograph.cli import app
from convograph.server.banner import hide_password, startup_banner
from convograph.server.config import ServerConfig
from tests.support.server import free_port, start_server

runner = CliRunner()


def test_version_prints_the_package_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"convograph {__version__}"


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("serve", ["127.0.0.1", "8321", "./.convograph", "embedded"]),
        ("demo", ["a fresh temporary directory"]),
    ],
)
def test_help_shows_defaults_instead_of_eating_them(command: str, shown: list[str]) -> None:
    """`[default: 127.0.0.1]` in a help text was read as rich markup and vanished ("Address to bind .")."""
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for value in shown:
        assert f"[default: {value}]" in text, text
    assert not re.search(r"\w \.", text), "a default was eaten, leaving ' .'"


def test_query_against_no_server_names_the_url_and_the_fix() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = runner.invoke(app, ["query", "RETURN 1", "--url", url])
    assert result.exit_code == 2
    assert f"cannot reach {url}" in result.output
    assert "--url" in result.output
    assert "CONVOGRAPH_URL" in result.output
    assert "connection_error" not in result.output


def test_forget_against_no_server_names_the_url_and_the_fix() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = runner.invoke(app, ["forget", "s1", "-w", "w", "--url", url])
    assert result.exit_code == 2
    assert f"cannot reach {url}" in result.output
    assert "--url" in result.output


def test_a_refused_query_shows_the_servers_message_not_an_internal_code(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data")
    try:
        result = runner.invoke(app, ["query", "CREATE (n:X) RETURN n", "--url", server.url])
        server_log = server.log()
    finally:
        server.stop()
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"error: {server.url} answered HTTP 400"), result.output
    assert "http_status" not in result.output
    banner = server_log[server_log.index("convograph ") :]
    assert f"is serving {server.url}" in banner
    assert f"viewer          {server.url}/" in banner
    assert f"data directory  {(tmp_path / 'data').resolve()}" in banner
    assert "event log       sqlite:///" in banner


def test_the_banner_hides_passwords_and_names_every_backend(tmp_path: Path) -> None:
    config = ServerConfig(
        data_dir=tmp_path,
        database_url="postgresql://app:s3cret@db.internal:5432/convograph",
        graph_url="falkordb://graph.internal:6379",
        api_key_file=tmp_path / "keys.json",
    )
    banner = startup_banner(config, "http://127.0.0.1:8321", key_count=2)
    assert "s3cret" not in banner
    assert "postgresql://app:***@db.internal:5432/convograph" in banner
    assert "falkordb://graph.internal:6379" in banner
    assert f"2 from {tmp_path / 'keys.json'}" in banner
    assert hide_password("redis://:pw@h:1/0") == "redis://:***@h:1/0"
    assert hide_password("sqlite:///x.db") == "sqlite:///x.db"
    assert hide_password("redis+cluster://u:pw@h1:1,h2:2/0") == "redis+cluster://u:***@h1:1,h2:2/0"
    assert hide_password("falkordb://:a@x:1,falkordb://b:c@y:2") == "falkordb://:***@x:1,falkordb://b:***@y:2"
    assert hide_password("postgresql://u@h/db?x=a:b@c") == "postgresql://u@h/db?x=a:b@c"

"""`convograph serve`: settings that cannot work are refused before the server starts, in one line.

Every case here fails validation; none starts a server (`serve_app` is replaced to make sure)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from convograph.cli import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def _never_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    import convograph.server.app

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("serve_app must not run for invalid settings")

    monkeypatch.setattr(convograph.server.app, "serve_app", refuse)
    for name in (
        "CONVOGRAPH_DATABASE_URL",
        "CONVOGRAPH_GRAPH_URL",
        "CONVOGRAPH_DATA_DIR",
        "CONVOGRAPH_API_KEY_FILE",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--database-url", "mysql://x"], "unsupported event log URL scheme 'mysql'"),
        (["--database-url", "sqlite:///x.db?typo=1"], "unknown sqlite event log URL option(s): typo"),
        (
            ["--database-url", "postgresql://h/db?typo=1"],
            'postgres event log URL: invalid URI query parameter: "typo"',
        ),
        (
            ["--database-url", "redis://h/0?finalize=postgresql://h/db?typo=1"],
            'postgres event log URL: invalid URI query parameter: "typo"',
        ),
        (["--graph-url", "bolt://x"], "graph URL must be falkordb://host:port"),
        (["--graph-url", "falkordb://h:99999"], "Port out of range"),
        (["--log-level", "loud"], "--log-level must be one of critical, error, warning, info, debug, trace"),
    ],
)
def test_bad_settings_are_one_line_errors(args: list[str], message: str, tmp_path: Path) -> None:
    """These used to start uvicorn and die in its startup with a traceback (exit 3, or 1 and a
    KeyError for the log level)."""
    result = runner.invoke(app, ["serve", "--port", "0", "--data-dir", str(tmp_path), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_database_url_from_the_environment_is_checked_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVOGRAPH_DATABASE_URL", "nope://x")
    result = runner.invoke(app, ["serve", "--port", "0", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "unsupported event log URL scheme 'nope'" in result.output


def test_a_data_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    result = runner.invoke(app, ["serve", "--port", "0", "--data-dir", str(file)])
    assert result.exit_code == 2  # was a FileExistsError traceback from the server's startup
    assert "is not a directory" in result.output
    result = runner.invoke(app, ["serve", "--port", "0", "--data-dir", str(file / "sub")])
    assert result.exit_code == 2
    assert "cannot create data directory" in result.output

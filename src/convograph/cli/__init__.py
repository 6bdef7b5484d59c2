"""The ``convograph`` command line. One module per command group; each registers on `app`."""

from __future__ import annotations

import importlib

from convograph.cli.app import app

# Command modules register themselves on import. Add a module here to add commands.
_COMMAND_MODULES = (
    "convograph.cli.ingest",
    "convograph.cli.serve",
    "convograph.cli.keys",
    "convograph.cli.query",
    "convograph.cli.forget",
    "convograph.cli.demo",
    "convograph.cli.view",
    "convograph.cli.export",
    "convograph.cli.run",
    "convograph.cli.model_server",
    "convograph.cli.rebalance",
)

for _name in _COMMAND_MODULES:
    importlib.import_module(_name)


def main() -> None:
    """Console-script entry point."""
    app()


__all__ = ["app", "main"]

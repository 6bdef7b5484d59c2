"""Run the npm packages' own stream readers (tests/node/*.mjs) from tests.

`run_node_reader(script, *sse_files)` runs ``node tests/node/<script> <files>`` and returns its
JSON reports, one per file. The packages come from ``scripts/ensure-node-tools`` (called here once if they are
missing). Without node or the packages a test skips, except under ``CI=true``, where that is a
failure: CI must run the real parsers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "tests" / "node"
_PACKAGES = ("ai", "@ag-ui/client")
_ensured: list[bool] = []


def _missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed"
    absent = [name for name in _PACKAGES if not (NODE_DIR / "node_modules" / name / "package.json").is_file()]
    return f"npm packages missing in tests/node: {', '.join(absent)}" if absent else None


def require_node_tools() -> None:
    """Skip (fail under CI=true) unless node and the pinned packages are installed."""
    problem = _missing()
    if problem is not None and not _ensured:
        _ensured.append(True)
        subprocess.run([str(ROOT / "scripts" / "ensure-node-tools")], check=False, timeout=600)
        problem = _missing()
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{problem} (run scripts/ensure-node-tools)")
    pytest.skip(f"{problem} (run scripts/ensure-node-tools)")


def run_node_reader(script: str, *sse_files: Path) -> list[dict[str, Any]]:
    """The JSON reports of ``tests/node/<script>`` on ``sse_files``; a rejected file fails the test."""
    require_node_tools()
    done = subprocess.run(
        ["node", str(NODE_DIR / script), *map(str, sse_files)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=NODE_DIR,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"{script} rejected a stream:\n{done.stderr[-4000:]}")
    reports: list[dict[str, Any]] = json.loads(done.stdout)
    return reports

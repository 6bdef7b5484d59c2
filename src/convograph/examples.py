"""Bundled, realistic example conversations (deterministic; used by the CLI, the demo and tests).

``multi-agent`` (`multi_agent_events`) is a research-assistant session in the real agent-harness
shape: every provider call is its own run parented to the agent run, tool calls are namespaced
``<agentRunId>/<callId>``, a subagent runs nested under an ``agent`` tool call, two tool calls run
in parallel, one permission relay is approved and one denied (the denied path emits no
``tool_call``, as upstream does), reasoning streams with a signature, usage follows each provider
call, and the subagent's first provider call fails with an error before it retries.

The examples are data files shipped in the package (``convograph/data/<name>.ndjson``, one wire
event per line, each with a stable ``eventId`` and ``timestamp``); the repository's
``examples/multi-agent.ndjson`` is the same file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

__all__ = ["EXAMPLES", "example_ndjson", "multi_agent_events", "write_example"]

DATA_DIR: Final = Path(__file__).resolve().parent / "data"

EXAMPLES: Final = ("multi-agent",)
"""Names of the bundled examples."""


def example_ndjson(name: str = "multi-agent") -> bytes:
    """The example as NDJSON bytes (one wire event per line). Raises `KeyError` for an unknown name."""
    if name not in EXAMPLES:
        raise KeyError(f"no bundled example {name!r}; known: {', '.join(EXAMPLES)}")
    return (DATA_DIR / f"{name}.ndjson").read_bytes()


def multi_agent_events() -> list[dict[str, Any]]:
    """The bundled multi-agent example as wire events (fresh dicts on every call)."""
    return [json.loads(line) for line in example_ndjson("multi-agent").splitlines() if line.strip()]


def write_example(path: str | Path, name: str = "multi-agent") -> Path:
    """Write the example NDJSON to ``path``; returns the path."""
    target = Path(path)
    target.write_bytes(example_ndjson(name))
    return target

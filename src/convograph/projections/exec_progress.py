"""The ``exec`` tool's progress rules (`convograph.projections.progress.ExecAccumulator`).

State ``{"stdout": str, "stderr": str, "metrics": dict | None}``; a content ``{"channel": "stdout" |
"stderr", "data": str}`` appends to that channel, a content with a numeric ``pid`` replaces
``metrics`` (the latest snapshot wins), anything else changes nothing. Compiled with mypyc
(`convograph._native`): a thread build folds every progress chunk with `fold_exec`. O(1) per content
(plus the string append).
"""

from __future__ import annotations

from typing import Any

__all__ = ["changes_exec", "fold_exec"]


def fold_exec(state: dict[str, Any], content: Any) -> dict[str, Any]:
    """Fold ``content`` into ``state`` in place and return it (for a state only the caller holds)."""
    if not isinstance(content, dict):
        return state
    channel = content.get("channel")
    if channel == "stdout" or channel == "stderr":
        data = content.get("data")
        if isinstance(data, str):
            state[channel] = state[channel] + data
            return state
    pid = content.get("pid")
    if _is_number(pid):
        state["metrics"] = {
            "pid": pid,
            "cpuPercent": content.get("cpuPercent"),
            "rssKb": content.get("rssKb"),
            "wallMs": content.get("wallMs"),
        }
    return state


def changes_exec(content: Any) -> bool:
    """Whether `fold_exec` changes a state for ``content``."""
    if not isinstance(content, dict):
        return False
    if content.get("channel") in ("stdout", "stderr") and isinstance(content.get("data"), str):
        return True
    return _is_number(content.get("pid"))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)

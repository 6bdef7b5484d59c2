"""The seed-004 triple-label rule for ``:Event`` nodes.

``derive_labels("tool:pre") == ("Event", "ToolEvent", "ToolPreEvent")``. The category is the part
before the *last* ``:``; every part split on ``:`` and ``_`` is capitalised (first letter upper,
rest lower) and concatenated, then ``Event`` is appended. A name without ``:`` has its category
equal to its specific label, so it carries two distinct labels. Results are cached: O(len(name))
on first use, O(1) after.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["derive_labels", "label_clause", "pascal"]

_SPLIT = re.compile(r"[:_]")
_SAFE_LABEL = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


def pascal(name: str) -> str:
    """``"agent_spawned"`` → ``"AgentSpawned"``; non-alphanumeric characters are dropped."""
    parts = (p for p in _SPLIT.split(name) if p)
    joined = "".join(p[:1].upper() + p[1:].lower() for p in parts)
    return "".join(ch for ch in joined if ch.isascii() and ch.isalnum())


@lru_cache(maxsize=4096)
def derive_labels(event_name: str) -> tuple[str, ...]:
    """``(Event, {Category}Event, {Specific}Event)``, de-duplicated, in that order."""
    category_part = event_name.rsplit(":", 1)[0] if ":" in event_name else event_name
    category = pascal(category_part) + "Event"
    specific = pascal(event_name) + "Event"
    labels = ["Event"]
    for label in (category, specific):
        if label not in labels and _SAFE_LABEL.match(label):
            labels.append(label)
    return tuple(labels)


def label_clause(labels: tuple[str, ...]) -> str:
    """``":A:B"`` for a Cypher ``SET n:A:B``; labels come from `derive_labels`, so they are safe."""
    return "".join(f":{label}" for label in labels)

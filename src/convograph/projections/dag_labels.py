"""Node labels for the DAG layout: compact one-line labels of flat-graph nodes and hypergraph blocks.

Every label is at most `MAX_LABEL` characters (`compact`). Runs compiled (mypyc, see
`convograph._native`): strictly typed, no msgspec Struct here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Sequence
from operator import attrgetter
from typing import Any, Final

from convograph.graph.nodes import (
    KIND_OF_NODE_TYPE as _KIND_OF_TYPE,
)
from convograph.graph.nodes import (
    ErrorNode,
    HarnessEndNode,
    HarnessStartNode,
    ReasoningNode,
    RelayNode,
    TextNode,
    ToolCallNode,
    ToolProgressNode,
    ToolResultNode,
    UsageNode,
    UserNode,
)

__all__ = [
    "MAX_LABEL",
    "block_label",
    "block_labels",
    "compact",
    "compact_json",
    "node_columns",
    "node_label",
]

MAX_LABEL: Final = 40


def compact(text: str, limit: int = MAX_LABEL) -> str:
    """First line of ``text``, whitespace-collapsed, cut to ``limit`` characters with an ellipsis.
    O(limit): reads at most ``4 * limit`` characters."""
    head = text[: limit * 4]
    if head.isprintable() and "  " not in head:
        # the only whitespace a printable string holds is U+0020 (checked over every code point),
        # so with no run of two, collapsing is stripping: no list of words
        line = head.strip(" ")
    else:
        line = " ".join(head.split())
    if len(line) > limit or len(text) > len(head):
        return line[: limit - 1] + "…" if len(line) >= limit else line + "…"
    return line


def compact_json(value: Any) -> str:
    try:
        return compact(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))
    except (TypeError, ValueError):
        return compact(repr(value))


_FIXED_LABELS: Final = {"harness_start": "run start", "harness_end": "run end"}


def node_label(node: Any) -> str:
    """Compact one-line label of a flat-graph node."""
    if isinstance(node, TextNode):
        return compact(node.content) or "text"
    if isinstance(node, ReasoningNode):
        text = node.content
        return compact("thinking: " + text) if text else "thinking..."
    if isinstance(node, ToolCallNode):
        return compact(node.name)
    if isinstance(node, ToolResultNode):
        return compact(node.name + " result")
    if isinstance(node, ToolProgressNode):
        return compact(node.name + " progress")
    if isinstance(node, UserNode):
        content = node.content
        return (compact(content) or "user") if isinstance(content, str) else "[media]"
    if isinstance(node, ErrorNode):
        return compact("error: " + node.message)
    if isinstance(node, UsageNode):
        return f"usage {node.input_tokens}/{node.output_tokens}"
    if isinstance(node, RelayNode):
        return compact(f"permission: {node.tool}")
    fixed = _FIXED_LABELS.get(node.kind)
    return fixed if fixed is not None else compact(node.kind)


_MEMO_KEY: Final[dict[type[Any], Callable[[Any], Hashable]]] = {
    ToolCallNode: attrgetter("name"),
    ToolResultNode: attrgetter("name"),
    ToolProgressNode: attrgetter("name"),
    UsageNode: attrgetter("input_tokens", "output_tokens"),
    RelayNode: attrgetter("tool"),
    HarnessStartNode: type,
    HarnessEndNode: type,
}
"""Node types whose label depends only on these fields: labels are computed once per value."""


def node_columns(nodes: Sequence[Any]) -> tuple[list[str], list[str], list[str]]:
    """Every node's run id, kind and `node_label`, in one pass over the nodes (each node is read
    once: at 100k nodes a pass per column re-read every node from memory), computing each
    name-only label (tool calls, results, progress, usage, relays, lifecycle) once per distinct
    value. O(N).

    Tool calls, results and progress (about half of an agent conversation's nodes) are tested
    for by type identity and memoised by name inline; the other memoised types go through the
    `_MEMO_KEY` table."""
    runs: list[str] = []
    kinds: list[str] = []
    out: list[str] = []
    append = out.append
    kind_of_type = _KIND_OF_TYPE
    # node type -> (its labels by memo key, the key's getter): no (type, key) tuple per node
    memos: dict[type[Any], tuple[dict[Hashable, str], Callable[[Any], Hashable]]] = {}
    memos_get = memos.get
    memo_key = _MEMO_KEY
    call_labels: dict[str, str] = {}
    result_labels: dict[str, str] = {}
    progress_labels: dict[str, str] = {}
    by_name: dict[str, str] | None
    for node in nodes:
        cls = type(node)
        runs.append(node.run_id)
        kinds.append(kind_of_type[cls])  # every node class is in it
        if cls is ToolProgressNode:
            by_name = progress_labels
        elif cls is ToolCallNode:
            by_name = call_labels
        elif cls is ToolResultNode:
            by_name = result_labels
        elif cls is TextNode:  # `node_label`'s text rule, inline (a fifth of the nodes, unmemoised)
            append(compact(node.content) or "text")
            continue
        elif cls is ReasoningNode:  # and its reasoning rule
            text = node.content
            append(compact("thinking: " + text) if text else "thinking...")
            continue
        else:
            by_name = None
        if by_name is not None:
            name = node.name
            label = by_name.get(name)
            if label is None:
                label = by_name[name] = node_label(node)
            append(label)
            continue
        memo = memos_get(cls)
        if memo is None:
            key_of = memo_key.get(cls)
            if key_of is None:
                append(node_label(node))
                continue
            memo = memos[cls] = ({}, key_of)
        labels, key_of = memo
        key = key_of(node)
        label = labels.get(key)
        if label is None:
            label = labels[key] = node_label(node)
        append(label)
    return runs, kinds, out


_BLOCK_CONTENT_KINDS: Final = frozenset({"text", "reasoning", "user", "error", "repl_input", "repl_output"})
"""Hypergraph block kinds whose label reads the block's content."""

_BLOCK_NAME_KINDS: Final = frozenset({"tool_call", "tool_result", "relay"})
"""Hypergraph block kinds whose label depends on one name of the first event (tool, relay tool)."""


def block_label(kind: str, event: Any, text: str) -> str:
    """Compact one-line label of a hypergraph block from its kind and first event (``text``: the
    start of a text or reasoning block's text, at least its first 161 characters, see
    `block_labels`)."""
    if kind == "text":
        return compact(text) or "text"
    if kind == "reasoning":
        return compact("thinking: " + text) if text else "thinking..."
    if kind == "tool_call":
        return compact(event.name)
    if kind == "tool_result":
        return compact(f"{event.name} result")
    if kind == "user":
        content = event.content
        return (compact(content) or "user") if isinstance(content, str) else "[media]"
    if kind == "error":
        return compact("error: " + event.message)
    if kind == "relay":
        return compact(f"permission: {event.tool}")
    if kind == "repl_input":
        return compact("repl: " + event.code)
    if kind == "repl_output":
        shown = event.error or event.stdout
        return compact("output: " + shown) if shown else "output"
    if kind == "repl_progress":
        return "repl progress"
    if kind == "usage":
        return f"usage {event.input_tokens}/{event.output_tokens}"
    fixed = _FIXED_LABELS.get(kind)
    return fixed if fixed is not None else compact_json(kind)


def block_labels(
    kinds: list[str],
    first_chunks: list[int],
    events: tuple[Any, ...],
    records: list[Any],
    n_chunks: int,
    head_limit: int,
) -> list[str]:
    """`block_label` of every block, given per block its kind and first chunk (``events``: every
    chunk's event by index) and its record (``records``; read for text and reasoning blocks
    only). Labels that depend on the kind only, or on a tool name, are computed once per value.
    A text or reasoning label reads the head the record keeps (``head``: its text, at least its
    first ``head_limit`` characters) when the version holds every chunk of the block (its last
    chunk below ``n_chunks``), else joins the version's chunks until ``head_limit`` characters
    (`compact` reads no more). O(blocks); a per-block loop, for the compiled build."""
    out: list[str] = []
    by_kind: dict[str, str] = {}
    by_name: dict[str, dict[Any, str]] = {kind: {} for kind in _BLOCK_NAME_KINDS}
    for i in range(len(kinds)):
        kind = kinds[i]
        label = by_kind.get(kind)
        if label is not None:
            out.append(label)
            continue
        if kind == "text" or kind == "reasoning":
            text = _block_text_head(records[i], events, n_chunks, head_limit)
            if kind == "text":
                out.append(compact(text) or "text")
            else:
                out.append(compact("thinking: " + text) if text else "thinking...")
            continue
        event = events[first_chunks[i]]
        memo = by_name.get(kind)
        if memo is not None:
            name = event.tool if kind == "relay" else event.name
            label = memo.get(name)
            if label is None:
                label = memo[name] = block_label(kind, event, "")
            out.append(label)
            continue
        if kind == "usage":  # (distinct per block, mostly: no memo)
            out.append(f"usage {event.input_tokens}/{event.output_tokens}")
            continue
        label = block_label(kind, event, "")
        if kind not in _BLOCK_CONTENT_KINDS:
            by_kind[kind] = label
        out.append(label)
    return out


def _block_text_head(record: Any, events: tuple[Any, ...], n_chunks: int, limit: int) -> str:
    """See `block_labels`: the head first, then the last chunk (the reducer appends a chunk
    before it extends the head)."""
    head = record.head
    chunks = record.chunks
    if head is not None and chunks[-1] < n_chunks:
        return str(head)
    text = ""
    for chunk in chunks:
        if chunk >= n_chunks:
            break
        text += events[chunk].content
        if len(text) >= limit:
            break
    return text[:limit]

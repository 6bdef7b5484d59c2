"""Queries over the tool calls, relays (permission requests) and usage of one `Conversation`
version. O(answer size) plus O(log n) lookups unless stated.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from convograph.events.types import Error, Relay, ToolCall, ToolResult
from convograph.hypergraph.records import RelayInfo, ToolCallInfo, chunk_id, stored_block
from convograph.hypergraph.store import (
    EMPTY,
    UsageTotals,
    prefix,
)

if TYPE_CHECKING:
    from convograph.hypergraph.model import Conversation

# --- tools, relays, usage ----------------------------------------------------------------------------


def _live(index: int | None, limit: int) -> int | None:
    return index if index is not None and index < limit else None


def _nth(items: Sequence[int], k: int) -> int | None:
    return items[k] if 0 <= k < len(items) else None


def tool_call(conv: Conversation, call_id: str, occurrence: int = -1) -> ToolCallInfo | None:
    """Everything known about one tool call, or None if neither call nor result has arrived.

    A call id reused by an agent across iterations has several occurrences: the k-th
    ``tool_call`` pairs with the k-th result and the k-th relay of that id; ``occurrence`` picks
    one (default: the latest). O(log n + progress chunks)."""
    s = conv._store
    nb = conv._n_blocks
    calls = prefix(s.call_blocks.get(call_id, EMPTY), nb)
    results = prefix(s.result_blocks.get(call_id, EMPTY), nb)
    count = max(len(calls), len(results))
    if count == 0:
        return None
    k = occurrence if occurrence >= 0 else count + occurrence
    call_b = _nth(calls, k)
    result_b = _nth(results, k)
    if call_b is None and result_b is None:
        return None
    relay_b = _nth(prefix(s.relays_by_call.get(call_id, EMPTY), nb), k)
    relay_event: Relay | None = None
    if relay_b is not None:
        relay_event = s.events[s.blocks[relay_b].chunks[0]]  # type: ignore[assignment]
    name: str = "unknown"
    call_input: Any = None
    if call_b is not None:
        call_event = s.events[s.blocks[call_b].chunks[0]]
        assert isinstance(call_event, ToolCall)
        name, call_input, run_id = call_event.name, call_event.input, s.blocks[call_b].run
    elif relay_event is not None:
        name, call_input, run_id = relay_event.tool, relay_event.params, relay_event.run_id
    else:
        run_id = s.blocks[result_b].run  # type: ignore[index]
    status: Literal["pending", "complete", "error", "denied"] = "pending"
    output: Any = None
    error: str | None = None
    if result_b is not None:
        result_event = s.events[s.blocks[result_b].chunks[0]]
        if isinstance(result_event, Error):
            status, error, output = "error", result_event.message, {"error": result_event.message}
        else:
            assert isinstance(result_event, ToolResult)
            output = result_event.output
            if call_b is None:
                name = result_event.name if name == "unknown" else name
            status = "complete"
            if isinstance(output, dict):
                if output.get("status") == "denied":
                    status = "denied"
                elif "error" in output:
                    status, error = "error", str(output["error"])
    progress: Sequence[int] = prefix(s.progress.get(call_id, EMPTY), conv._n_chunks)
    if len(calls) > 1 and progress:  # keep the progress between this call and the next one
        low = s.blocks[calls[k]].chunks[0] if k < len(calls) else 0
        high = s.blocks[calls[k + 1]].chunks[0] if k + 1 < len(calls) else conv._n_chunks
        progress = [i for i in progress if low <= i < high]
    return ToolCallInfo(
        call_id=call_id,
        name=name,
        input=call_input,
        status=status,
        synthesized=call_b is None,
        run_id=run_id,
        call_block_id=s.blocks[call_b].id if call_b is not None else None,
        result_block_id=s.blocks[result_b].id if result_b is not None else None,
        output=output,
        error=error,
        relay_id=relay_event.id if relay_event is not None else None,
        progress_chunk_ids=tuple(chunk_id(i) for i in progress),
    )


def tool_call_for_block(conv: Conversation, block_id: str) -> ToolCallInfo | None:
    """The tool call (the right occurrence of its id) that a tool_call / tool_result / tool_error /
    tool_progress / relay block belongs to. O(log n)."""
    block = stored_block(conv, block_id)
    s = conv._store
    event: Any = s.events[block.chunks[0]]
    if block.kind == "tool_call":
        call_id: str = event.id
        occurrence = bisect_left(s.call_blocks.get(call_id, EMPTY), block.index)
    elif block.kind in ("tool_result", "tool_error"):
        call_id = event.id if block.kind == "tool_result" else block.key.removesuffix(":result")
        occurrence = bisect_left(s.result_blocks.get(call_id, EMPTY), block.index)
    elif block.kind == "relay":
        call_id = event.tool_call_id
        occurrence = bisect_left(s.relays_by_call.get(call_id, EMPTY), block.index)
    elif block.kind == "tool_progress":
        call_id = event.tool_call_id
        calls = prefix(s.call_blocks.get(call_id, EMPTY), conv._n_blocks)
        occurrence = max(0, bisect_left(calls, block.index) - 1)
    else:
        return None
    return tool_call(conv, call_id, occurrence)


def _relay_record(conv: Conversation, block_index: int) -> RelayInfo:
    s = conv._store
    block = s.blocks[block_index]
    event = s.events[block.chunks[0]]
    assert isinstance(event, Relay)
    decision = s.decisions.get_at(event.id, conv._version)
    status: Literal["pending", "approved", "denied", "resolved"]
    if decision is not None:
        status = "approved" if decision.approved else "denied"
    elif prefix(s.call_blocks.get(event.tool_call_id, EMPTY), conv._n_blocks) or prefix(
        s.result_blocks.get(event.tool_call_id, EMPTY), conv._n_blocks
    ):
        status = "resolved"
    else:
        status = "pending"
    return RelayInfo(
        relay_id=event.id,
        tool_call_id=event.tool_call_id,
        tool=event.tool,
        params=event.params,
        run_id=block.run,
        block_id=block.id,
        status=status,
        decision=decision,
    )


def relays(conv: Conversation) -> tuple[RelayInfo, ...]:
    """Every relay in arrival order with its status. O(relays)."""
    return tuple(_relay_record(conv, b) for b in prefix(conv._store.relays, conv._n_blocks))


def pending_relays(conv: Conversation) -> tuple[RelayInfo, ...]:
    """Relays still waiting for a decision. O(relays)."""
    return tuple(r for r in relays(conv) if r.status == "pending")


def relay_info(conv: Conversation, relay_id: str) -> RelayInfo | None:
    index = _live(conv._store.relay_block.get(relay_id), conv._n_blocks)
    return None if index is None else _relay_record(conv, index)


def usage_totals(conv: Conversation, run_id: str | None = None) -> UsageTotals:
    """Summed ``usage`` events of the whole conversation (O(log n)) or of one run (O(its usage
    events))."""
    s = conv._store
    if run_id is None:
        count = bisect_left(s.usage_chunks, conv._n_chunks)
        if count == 0:
            return UsageTotals()
        i, o, r, c = s.usage_sums[count - 1]
        return UsageTotals(
            input_tokens=i, output_tokens=o, cache_read_tokens=r, cache_creation_tokens=c, calls=count
        )
    totals = [0, 0, 0, 0]
    chunks = prefix(s.run_usage.get(run_id, EMPTY), conv._n_chunks)
    for index in chunks:
        event: Any = s.events[index]
        totals[0] += event.input_tokens
        totals[1] += event.output_tokens
        totals[2] += event.cache_read_tokens or 0
        totals[3] += event.cache_creation_tokens or 0
    return UsageTotals(
        input_tokens=totals[0],
        output_tokens=totals[1],
        cache_read_tokens=totals[2],
        cache_creation_tokens=totals[3],
        calls=len(chunks),
    )

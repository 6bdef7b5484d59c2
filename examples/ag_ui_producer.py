"""An AG-UI producer, as an agent built on the AG-UI Python SDK sends its events, posted to a
convograph server: the run lands as a conversation (thread, messages, DAG, live stream).

    convograph serve &
    python examples/ag_ui_producer.py [--server http://127.0.0.1:8321] [--conversation flights]

Run it twice: the second post stores nothing new (event ids come from the AG-UI ids).
"""

from __future__ import annotations

import argparse
import json

import httpx
from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)
from ag_ui.encoder import EventEncoder


def run_events() -> list[BaseEvent]:
    """One run: the question in the run input, an answer that calls a tool, a subagent inside it."""
    question = UserMessage(id="q1", content="Which flight to Lisbon is cheapest on Friday?")
    return [
        RunStartedEvent(
            thread_id="flights",
            run_id="run-1",
            protocol_version="1.0",
            input=RunAgentInput(thread_id="flights", run_id="run-1", messages=[question]),
        ),
        TextMessageStartEvent(message_id="m1", role="assistant"),
        TextMessageContentEvent(message_id="m1", delta="Let me compare the fares."),
        TextMessageEndEvent(message_id="m1"),
        ToolCallStartEvent(tool_call_id="call-1", tool_call_name="compare_fares", parent_message_id="m1"),
        ToolCallArgsEvent(tool_call_id="call-1", delta='{"to": "LIS", "day": "friday"}'),
        ToolCallEndEvent(tool_call_id="call-1"),
        SubagentStartedEvent(subagent_run_id="pricer-1", name="pricer", parent_tool_call_id="call-1"),
        TextMessageStartEvent(message_id="p1", role="assistant", subagent_run_id="pricer-1"),
        TextMessageContentEvent(
            message_id="p1", delta="TP 1302: 120 EUR; FR 8354: 95 EUR.", subagent_run_id="pricer-1"
        ),
        TextMessageEndEvent(message_id="p1", subagent_run_id="pricer-1"),
        SubagentFinishedEvent(subagent_run_id="pricer-1"),
        ToolCallResultEvent(
            message_id="r1", tool_call_id="call-1", content='{"cheapest": "FR 8354", "price": 95}'
        ),
        TextMessageStartEvent(message_id="m2", role="assistant"),
        TextMessageContentEvent(message_id="m2", delta="FR 8354 at 95 EUR is the cheapest."),
        TextMessageEndEvent(message_id="m2"),
        RunFinishedEvent(thread_id="flights", run_id="run-1"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--server", default="http://127.0.0.1:8321")
    parser.add_argument("--conversation", default="flights")
    args = parser.parse_args()
    encoder = EventEncoder()
    body = "".join(encoder.encode(event) for event in run_events())
    with httpx.Client(base_url=args.server, timeout=30) as client:
        reply = client.post(
            f"/v1/conversations/{args.conversation}/ag-ui",
            content=body,
            headers={"Content-Type": encoder.get_content_type()},
        )
        reply.raise_for_status()
        print("stored:", json.dumps(reply.json()))
        messages = client.get(f"/v1/conversations/{args.conversation}/messages").json()
        print(json.dumps(messages, indent=2))


if __name__ == "__main__":
    main()

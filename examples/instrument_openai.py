"""Record an existing OpenAI tool-calling loop into convograph: the loop is unchanged, three lines
around it record every call (docs/integrations.md).

With a running ``convograph serve`` (the viewer at http://127.0.0.1:8321) and OpenAI:

    OPENAI_API_KEY=... python examples/instrument_openai.py

Offline, with the scripted model server standing in for OpenAI:

    convograph model-server examples/instrument-script.json    # prints OPENAI_BASE_URL=...
    OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 OPENAI_API_KEY=test python examples/instrument_openai.py

``CONVOGRAPH_SINK`` says where the conversation goes (default ``http://127.0.0.1:8321``; an event
log URL such as ``sqlite:///events.db`` records in process instead); ``OPENAI_MODEL`` picks the
model (default ``gpt-4o-mini``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import openai

from convograph.instrument import instrument

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Today's weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def weather(city: str) -> dict[str, Any]:
    return {"city": city, "forecast": "sunny", "celsius": {"Paris": 24, "Rome": 27}.get(city, 20)}


def ask(client: openai.OpenAI, question: str, model: str) -> str:
    """A plain tool loop: call the model, run the tools it asks for, until it answers."""
    messages: list[Any] = [
        {"role": "system", "content": "You answer weather questions with the weather tool."},
        {"role": "user", "content": question},
    ]
    while True:
        message = (
            client.chat.completions.create(model=model, messages=messages, tools=TOOLS).choices[0].message
        )
        messages.append(message.model_dump(include={"role", "content", "tool_calls"}, exclude_none=True))
        if not message.tool_calls:
            return message.content or ""
        for call in message.tool_calls:
            result = weather(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})


def main() -> None:
    client = openai.OpenAI()
    sink = os.environ.get("CONVOGRAPH_SINK", "http://127.0.0.1:8321")
    recording = instrument(client, sink=sink, conversation_id="weather-demo")
    print(
        ask(
            client, "What is the weather in Paris and in Rome?", os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
        )
    )
    if recording.uninstrument():  # stores what is queued (for at most 10 s)
        print(f"recorded into {sink} as conversation {recording.conversation_id!r}")
    else:
        print(f"could not store the conversation in {sink} (is convograph serve running?)")


if __name__ == "__main__":
    main()

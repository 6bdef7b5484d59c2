"""Chat apps written the way people write them against the real SDKs, for the instrumentation
tests and benchmark: a multi-turn conversation with a tool call and its result, the whole history
re-sent on every call, the model's answer appended as the SDK returned it (a response object, a
message rebuilt from the stream, or a stream helper's final message).

Modes: ``plain`` (no streaming), ``stream`` (``stream=True``), ``helper`` (the SDK's stream helper:
``chat.completions.stream()``, ``responses.stream()``, ``messages.stream()``).
"""

from __future__ import annotations

import json
from typing import Any, Final

from convograph.testing import Reply, Say, ScriptUsage, Think, ToolUse

SYSTEM: Final = "You are a weather assistant. Be brief."
QUESTION: Final = "What is the weather in Paris?"
WEATHER: Final = "sunny, 24 C"
THANKS: Final = "Thanks!"
ANSWERS: Final = ("Let me check.", "Sunny and 24 degrees in Paris.", "You're welcome!")

CHAT_TOOLS: Final = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
RESPONSES_TOOLS: Final = [
    {
        "type": "function",
        "name": "weather",
        "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "strict": False,
    }
]
ANTHROPIC_TOOLS: Final = [
    {
        "name": "weather",
        "description": "Weather for a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]


def script() -> list[Reply]:
    """The model's side: think, answer and call the tool; answer from the result; say goodbye."""
    return [
        Reply(
            content=[
                Think(text="The user wants the weather; I should call the tool.", signature="sig-weather-1"),
                Say(text=ANSWERS[0]),
                ToolUse(name="weather", arguments={"city": "Paris"}),
            ],
            usage=ScriptUsage(input_tokens=120, output_tokens=30, cache_read_tokens=64),
        ),
        Reply(content=[Say(text=ANSWERS[1])], usage=ScriptUsage(input_tokens=180, output_tokens=12)),
        Reply(content=[Say(text=ANSWERS[2])], usage=ScriptUsage(input_tokens=200, output_tokens=5)),
    ]


# -- Chat Completions ---------------------------------------------------------------------------------


def _chat_kwargs(messages: list[Any], mode: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"model": "gpt-test", "messages": messages, "tools": CHAT_TOOLS}
    if mode != "plain":
        kwargs["stream_options"] = {"include_usage": True}
    return kwargs


def _chat_message(content: str | None, calls: list[dict[str, str]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls
        ]
    return message


class ChatAccumulator:
    """Rebuilds the assistant message from streamed chunks, as apps do."""

    def __init__(self) -> None:
        self.text = ""
        self.calls: dict[int, dict[str, str]] = {}

    def add(self, chunk: Any) -> None:
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                self.text += delta.content
            for call in delta.tool_calls or ():
                entry = self.calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] = call.id or entry["id"]
                if call.function is not None:
                    entry["name"] += call.function.name or ""
                    entry["arguments"] += call.function.arguments or ""

    def message(self) -> dict[str, Any]:
        return _chat_message(self.text or None, list(self.calls.values()))


def _plain_message(completion: Any) -> dict[str, Any]:
    """The response's message as a request message (its fields an assistant message takes)."""
    message: dict[str, Any] = completion.choices[0].message.model_dump(
        include={"role", "content", "tool_calls"}, exclude_none=True
    )
    return message


def _helper_message(completion: Any) -> dict[str, Any]:
    message = completion.choices[0].message
    calls = [
        {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
        for c in message.tool_calls or ()
    ]
    return _chat_message(message.content, calls)


def chat_turn(client: Any, messages: list[Any], mode: str) -> Any:
    """One call; returns the assistant message to append (the response's own object for ``plain``)."""
    kwargs = _chat_kwargs(messages, mode)
    if mode == "plain":
        return _plain_message(client.chat.completions.create(**kwargs))
    if mode == "stream":
        accumulator = ChatAccumulator()
        for chunk in client.chat.completions.create(**kwargs, stream=True):
            accumulator.add(chunk)
        return accumulator.message()
    with client.chat.completions.stream(**kwargs) as stream:
        for _ in stream:
            pass
        return _helper_message(stream.get_final_completion())


async def chat_turn_async(client: Any, messages: list[Any], mode: str) -> Any:
    kwargs = _chat_kwargs(messages, mode)
    if mode == "plain":
        return _plain_message(await client.chat.completions.create(**kwargs))
    if mode == "stream":
        accumulator = ChatAccumulator()
        async for chunk in await client.chat.completions.create(**kwargs, stream=True):
            accumulator.add(chunk)
        return accumulator.message()
    async with client.chat.completions.stream(**kwargs) as stream:
        async for _ in stream:
            pass
        return _helper_message(await stream.get_final_completion())


def chat_start() -> list[Any]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]


def chat_after(messages: list[Any], answer: Any, turn: int) -> None:
    """Append the answer, then the tool result (after the first turn) or the next question."""
    messages.append(answer)
    if turn == 0:
        for call in answer["tool_calls"]:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": WEATHER})
    elif turn == 1:
        messages.append({"role": "user", "content": THANKS})


# -- Responses ---------------------------------------------------------------------------------------


def _responses_kwargs(items: list[Any]) -> dict[str, Any]:
    return {"model": "gpt-test", "input": items, "instructions": SYSTEM, "tools": RESPONSES_TOOLS}


def responses_turn(client: Any, items: list[Any], mode: str) -> list[Any]:
    """One call; returns the output items to append (the SDK's own objects)."""
    kwargs = _responses_kwargs(items)
    if mode == "plain":
        return list(client.responses.create(**kwargs).output)
    if mode == "stream":
        output: list[Any] = []
        for event in client.responses.create(**kwargs, stream=True):
            if event.type == "response.completed":
                output = list(event.response.output)
        return output
    with client.responses.stream(**kwargs) as stream:
        for _ in stream:
            pass
        return list(stream.get_final_response().output)


async def responses_turn_async(client: Any, items: list[Any], mode: str) -> list[Any]:
    kwargs = _responses_kwargs(items)
    if mode == "plain":
        return list((await client.responses.create(**kwargs)).output)
    if mode == "stream":
        output: list[Any] = []
        async for event in await client.responses.create(**kwargs, stream=True):
            if event.type == "response.completed":
                output = list(event.response.output)
        return output
    async with client.responses.stream(**kwargs) as stream:
        async for _ in stream:
            pass
        return list((await stream.get_final_response()).output)


def responses_start() -> list[Any]:
    return [{"role": "user", "content": QUESTION}]


def responses_after(items: list[Any], output: list[Any], turn: int) -> None:
    items.extend(output)
    if turn == 0:
        for item in output:
            if item.type == "function_call":
                items.append({"type": "function_call_output", "call_id": item.call_id, "output": WEATHER})
    elif turn == 1:
        items.append({"role": "user", "content": THANKS})


# -- Anthropic Messages ---------------------------------------------------------------------------------


def _messages_kwargs(messages: list[Any]) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 4096,
        "system": SYSTEM,
        "messages": messages,
        "tools": ANTHROPIC_TOOLS,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }


class MessagesAccumulator:
    """Rebuilds the assistant content blocks from raw stream events, as apps do."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json: dict[int, str] = {}

    def add(self, event: Any) -> None:
        if event.type == "content_block_start":
            self.blocks[event.index] = event.content_block.model_dump(exclude_none=True)
        elif event.type == "content_block_delta":
            block, delta = self.blocks[event.index], event.delta
            if delta.type == "text_delta":
                block["text"] += delta.text
            elif delta.type == "thinking_delta":
                block["thinking"] += delta.thinking
            elif delta.type == "signature_delta":
                block["signature"] = delta.signature
            elif delta.type == "input_json_delta":
                self.json[event.index] = self.json.get(event.index, "") + delta.partial_json
        elif event.type == "content_block_stop" and event.index in self.json:
            self.blocks[event.index]["input"] = json.loads(self.json[event.index] or "{}")

    def content(self) -> list[dict[str, Any]]:
        return [self.blocks[i] for i in sorted(self.blocks)]


def messages_turn(client: Any, messages: list[Any], mode: str) -> list[Any]:
    """One call; returns the assistant content to append (the response's own blocks when the SDK
    gives them)."""
    kwargs = _messages_kwargs(messages)
    if mode == "plain":
        return list(client.messages.create(**kwargs).content)
    if mode == "stream":
        accumulator = MessagesAccumulator()
        for event in client.messages.create(**kwargs, stream=True):
            accumulator.add(event)
        return accumulator.content()
    with client.messages.stream(**kwargs) as stream:
        for _ in stream.text_stream:
            pass
        return list(stream.get_final_message().content)


async def messages_turn_async(client: Any, messages: list[Any], mode: str) -> list[Any]:
    kwargs = _messages_kwargs(messages)
    if mode == "plain":
        return list((await client.messages.create(**kwargs)).content)
    if mode == "stream":
        accumulator = MessagesAccumulator()
        async for event in await client.messages.create(**kwargs, stream=True):
            accumulator.add(event)
        return accumulator.content()
    async with client.messages.stream(**kwargs) as stream:
        async for _ in stream.text_stream:
            pass
        return list((await stream.get_final_message()).content)


def messages_start() -> list[Any]:
    return [{"role": "user", "content": QUESTION}]


def messages_after(messages: list[Any], content: list[Any], turn: int) -> None:
    messages.append({"role": "assistant", "content": content})
    if turn == 0:
        results = [
            {"type": "tool_result", "tool_use_id": _field(block, "id"), "content": WEATHER}
            for block in content
            if _field(block, "type") == "tool_use"
        ]
        messages.append({"role": "user", "content": results})
    elif turn == 1:
        messages.append({"role": "user", "content": THANKS})


def _field(block: Any, name: str) -> Any:
    return block[name] if isinstance(block, dict) else getattr(block, name)


APPS: Final = {
    "chat": (chat_start, chat_turn, chat_turn_async, chat_after),
    "responses": (responses_start, responses_turn, responses_turn_async, responses_after),
    "messages": (messages_start, messages_turn, messages_turn_async, messages_after),
}
"""``api -> (start, turn, turn_async, after)``: a conversation is ``history = start()``, then for
turn 0..2: ``answer = turn(client, history, mode)``; ``after(history, answer, turn)``."""


def run_app(api: str, client: Any, mode: str) -> list[Any]:
    """The three-turn conversation on a sync client; returns the final history."""
    start, turn, _, after = APPS[api]
    history = start()
    for index in range(3):
        after(history, turn(client, history, mode), index)
    return history


async def run_app_async(api: str, client: Any, mode: str) -> list[Any]:
    start, _, turn_async, after = APPS[api]
    history = start()
    for index in range(3):
        after(history, await turn_async(client, history, mode), index)
    return history

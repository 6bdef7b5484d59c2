"""An agent you did not write, watched in convograph: plain ``openai`` SDK calls, traced by the
OpenTelemetry project's own instrumentation, exported over OTLP/HTTP to ``convograph serve``.

    convograph serve &                         # http://127.0.0.1:8321
    python examples/otlp_openai.py             # then open http://127.0.0.1:8321/
    python examples/otlp_openai.py --server http://127.0.0.1:9000 --conversation demo-otlp
    python examples/otlp_openai.py --content logs   # messages as log records, to /v1/logs

The model is convograph's scripted model server (`convograph.testing.ModelServer`, the OpenAI wire
format on 127.0.0.1), so no API key is needed; point ``base_url`` at a real provider and nothing else
changes. What the script does is what an application does: set up the SDK's tracer provider with
the OTLP exporter, instrument ``openai``, and run its tool loop inside one span of its own, which
carries ``gen_ai.conversation.id`` so both model calls land in one conversation. It prints the
conversation as convograph stored it.

``--content spans`` (the default) has the instrumentation record messages on its spans
(``SPAN_ONLY``); ``--content logs`` has it send them as log records (``EVENT_ONLY``, what most
instrumentations do by default), exported with the SDK's log exporter to ``/v1/logs``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import httpx
import openai
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from convograph.testing import ModelServer
from convograph.testing.model_script import Reply, Say, ScriptUsage, ToolUse

TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
SCRIPT = [
    Reply(
        content=[ToolUse(name="get_weather", arguments={"city": "Paris"}, id="call_1")],
        usage=ScriptUsage(input_tokens=48, output_tokens=12),
    ),
    Reply(
        content=[Say(text="It is rainy in Paris, 14 °C.")],
        usage=ScriptUsage(input_tokens=80, output_tokens=9),
    ),
]


def run_agent(client: openai.OpenAI, tracer: Any, conversation: str) -> None:
    """The application's own loop: ask, run the tool the model asks for, ask again."""
    messages: list[Any] = [{"role": "user", "content": "What's the weather in Paris?"}]
    with tracer.start_as_current_span("weather turn") as span:
        span.set_attribute("gen_ai.conversation.id", conversation)
        first = client.chat.completions.create(model="gpt-demo", messages=messages, tools=TOOLS)
        call: Any = first.choices[0].message.tool_calls[0]
        function = {"name": call.function.name, "arguments": call.function.arguments}
        messages.append(
            {"role": "assistant", "tool_calls": [{"id": call.id, "type": "function", "function": function}]}
        )
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "rainy, 14 °C"})
        client.chat.completions.create(model="gpt-demo", messages=messages, tools=TOOLS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--server", default="http://127.0.0.1:8321", help="a running convograph serve")
    parser.add_argument("--conversation", default="otlp-weather", help="gen_ai.conversation.id to use")
    parser.add_argument(
        "--content", choices=["spans", "logs"], default="spans", help="where the messages travel"
    )
    args = parser.parse_args()
    # message content is opt-in: on the spans, or as log records (both need the latest GenAI
    # conventions, which util-genai >= 1.0 always uses and older versions take with this opt-in)
    os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    os.environ.setdefault(
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
        "SPAN_ONLY" if args.content == "spans" else "EVENT_ONLY",
    )
    try:
        httpx.get(f"{args.server}/healthz", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        print(
            f"no convograph server at {args.server} ({exc}); start one with `convograph serve`",
            file=sys.stderr,
        )
        return 2

    resource = Resource.create({"service.name": "weather-app"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{args.server}/v1/traces")))
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(OTLPLogExporter(endpoint=f"{args.server}/v1/logs"))
    )
    OpenAIInstrumentor().instrument(tracer_provider=provider, logger_provider=logger_provider)
    with ModelServer(SCRIPT) as model:
        client = openai.OpenAI(base_url=model.openai_base_url, api_key="not-needed", max_retries=0)
        run_agent(client, provider.get_tracer("weather-app"), args.conversation)
    logger_provider.shutdown()  # flushes the exporters
    provider.shutdown()

    # The conversation's agent span (the application's own span) arrives last; until then its
    # messages already show. Print the request history convograph keeps:
    history = httpx.get(
        f"{args.server}/v1/conversations/{args.conversation}/messages?format=openai", timeout=10
    )
    history.raise_for_status()
    print(json.dumps(history.json(), indent=2, ensure_ascii=False))
    print(f"\nopen {args.server}/c/{args.conversation} to see the thread", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Adapters between convograph's one native event model and external protocols.

One subpackage per protocol (pydantic-ai's layout, docs/integrations.md): each turns its wire
format into convograph events and, where the protocol has a direction out, events back into it.
Nothing here changes the event model; adapters only read and produce `convograph.events` values.

- `convograph.integrations.otlp`: OpenTelemetry (OTLP/HTTP traces carrying GenAI
  semantic-convention spans) in (`POST /v1/traces`) and out (`convograph export --format otlp`,
  ``convograph serve --otlp-endpoint``).
"""

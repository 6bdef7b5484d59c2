"""Adapters between convograph conversations and other agent / chat-UI / tracing protocols.

One module (or subpackage) per external protocol (pydantic-ai's layout); nothing here changes the
event model, adapters only read and produce `convograph.events` values:

- `ui_stream` is the shared base that turns stored convograph events into protocol-neutral turn /
  step / part / tool callbacks and owns their state; `ag_ui` (AG-UI events out, AG-UI streams in)
  and `ai_sdk` (the Vercel AI SDK UI message stream) subclass it and only override leaf hooks and
  the encoding.
- `otlp`: OpenTelemetry (OTLP/HTTP traces carrying GenAI semantic-convention spans) in
  (``POST /v1/traces``) and out (``convograph export --format otlp``, ``convograph serve
  --otlp-endpoint``).
"""

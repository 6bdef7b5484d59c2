"""OpenTelemetry in and out: OTLP/HTTP traces of GenAI semantic-convention spans (and the log
records carrying their messages) <-> conversations.

- `wire`: what OTLP/HTTP bodies share (encodings, gzip, errors, values); `decode`: trace bodies ->
  `Span` values (`model`), `decode_logs`: log bodies -> `LogRecord` values; `serialize` the way
  back (spans -> OTLP/JSON or protobuf);
- `messages`: a span's messages, whichever shape the instrumentation recorded them in, and `logs`:
  GenAI message event log records as the span events they stand for;
- `genai`: spans -> convograph events, the one mapping (its docstring has the rules), with
  `content` for messages (identities chained across spans);
- `ingest`: `OtlpIngestor`, which stores mapped spans and logged messages in an event log
  (routing, parent links, holds, `blobs`; its memory in `ingest_state`), behind ``POST /v1/traces``
  and ``POST /v1/logs`` (`http`);
- `encode`: conversation events -> GenAI spans (``convograph export --format otlp``), and
  `forward`: the server's forwarder to an OTLP endpoint.

docs/integrations.md ("OpenTelemetry") documents what maps to what and the limits.
"""

from convograph.integrations.otlp.decode import Decoded, OtlpError, decode_request, decompress
from convograph.integrations.otlp.decode_logs import DecodedLogs, decode_logs_request
from convograph.integrations.otlp.ingest import ConversationBlobs, IngestReport, OtlpIngestor
from convograph.integrations.otlp.model import LogRecord, Span, SpanEvent

__all__ = [
    "ConversationBlobs",
    "Decoded",
    "DecodedLogs",
    "IngestReport",
    "LogRecord",
    "OtlpError",
    "OtlpIngestor",
    "Span",
    "SpanEvent",
    "decode_logs_request",
    "decode_request",
    "decompress",
]

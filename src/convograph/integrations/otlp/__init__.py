"""OpenTelemetry in and out: OTLP/HTTP traces of GenAI semantic-convention spans <-> conversations.

- `decode`: OTLP/HTTP bodies (protobuf or JSON, gzip) -> `Span` values (`model`), and `serialize`
  the way back (spans -> OTLP/JSON or protobuf);
- `messages`: a span's messages, whichever shape the instrumentation recorded them in;
- `genai`: spans -> convograph events, the one mapping (its docstring has the rules), with
  `content` for messages (identities chained across spans);
- `ingest`: `OtlpIngestor`, which stores mapped spans in an event log (routing, parent links,
  holds, blobs), behind ``POST /v1/traces`` (`http`);
- `encode`: conversation events -> GenAI spans (``convograph export --format otlp``), and
  `forward`: the server's forwarder to an OTLP endpoint.

docs/integrations.md ("OpenTelemetry") documents what maps to what and the limits.
"""

from convograph.integrations.otlp.decode import Decoded, OtlpError, decode_request, decompress
from convograph.integrations.otlp.ingest import ConversationBlobs, IngestReport, OtlpIngestor
from convograph.integrations.otlp.model import Span, SpanEvent

__all__ = [
    "ConversationBlobs",
    "Decoded",
    "IngestReport",
    "OtlpError",
    "OtlpIngestor",
    "Span",
    "SpanEvent",
    "decode_request",
    "decompress",
]

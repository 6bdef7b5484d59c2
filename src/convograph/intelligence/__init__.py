"""Context intelligence: Amplifier hook events → a FalkorDB property graph (seed 004, layer 1).

Modules, one concern each: `envelope` (validation), `labels` (triple-label rule), `lifters`
(FieldLifters), `layer1` (pure graph model), `engine` (FalkorDB embedded/server), `writer`
(schema + UNWIND batches), `journal` (durable ingest journal), `ingest` (journal → graph applier),
`blobs` (content-addressed blob store), `query` (read-only Cypher), `service`
(`IntelligenceService`), `tools` (agent tools), `http` (Litestar routes).
"""

from __future__ import annotations

from convograph.intelligence.envelope import Envelope, EnvelopeError, parse_envelope
from convograph.intelligence.labels import derive_labels
from convograph.intelligence.query import AccessDenied, CypherResult, QueryError
from convograph.intelligence.service import IntelligenceService

__all__ = [
    "AccessDenied",
    "CypherResult",
    "Envelope",
    "EnvelopeError",
    "IntelligenceService",
    "QueryError",
    "derive_labels",
    "parse_envelope",
]

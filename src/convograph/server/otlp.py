"""``POST /v1/traces`` and ``POST /v1/logs`` on the server: the OTLP/HTTP receivers of
`convograph.integrations.otlp.http`, mounted with the server's keys, limits, caches and metrics.

A route checks the caller (a key with the ``write`` scope; the workspace is the ``workspace``
query parameter, else the one workspace a restricted key names), then hands the body to
`convograph.integrations.otlp.http.receive`. Every failure is a ``google.rpc.Status`` in the
request's encoding, as the OTLP specification requires.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, post

from convograph.integrations.otlp.forward import OtlpForwarder
from convograph.integrations.otlp.http import (
    LOGS,
    TRACES,
    OtlpReceiver,
    Signal,
    receive,
    reply_media_of,
    status_response,
)
from convograph.integrations.otlp.ingest import ConversationBlobs, OtlpIngestor
from convograph.server.errors import ApiError
from convograph.server.state import ServerState, principal_of, server_state
from convograph.store import AppendResult

__all__ = ["export_logs", "export_traces", "open_forwarder", "open_receiver"]

# The OTLP specification defines these routes' bodies, replies and error shapes (protobuf or JSON,
# partial success, google.rpc.Status): OTLP exporters speak it, not OpenAPI clients, and the
# document's rule that every error is {"error": ...} does not hold here. docs/server.md.


@post(
    "/v1/traces",
    summary="OTLP/HTTP trace export (GenAI spans become conversation events)",
    tags=["integrations"],
    status_code=200,
    include_in_schema=False,
)
async def export_traces(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Store the GenAI spans of an ``ExportTraceServiceRequest`` (docs/integrations.md)."""
    return await _receive(request, TRACES)


@post(
    "/v1/logs",
    summary="OTLP/HTTP log export (GenAI message events join their spans' conversations)",
    tags=["integrations"],
    status_code=200,
    include_in_schema=False,
)
async def export_logs(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Store the GenAI message events of an ``ExportLogsServiceRequest`` (docs/integrations.md)."""
    return await _receive(request, LOGS)


async def _receive(request: Request[Any, Any, Any], signal: Signal) -> Response[bytes]:
    content_type = request.headers.get("content-type")
    state = server_state(request)
    try:
        principal = principal_of(request)
        if not principal.allows("write"):
            raise ApiError(403, "this API key lacks the 'write' scope")
    except ApiError as exc:
        return status_response(exc.status, exc.message, reply_media_of(content_type))
    workspace = request.query_params.get("workspace")
    if workspace is None and principal.workspaces is not None and len(principal.workspaces) == 1:
        workspace = next(iter(principal.workspaces))
    response, report = await receive(
        signal,
        state.otlp,
        await request.body(),
        content_type=content_type,
        content_encoding=request.headers.get("content-encoding"),
        max_body_bytes=state.config.max_body_bytes,
        prefix=f"{workspace}:" if workspace else "",
        can_write=principal.can_reach_conversation,
    )
    if report is not None:
        state.metrics.events_accepted += report.accepted_events
        state.metrics.events_duplicate += report.duplicate_events
    return response


def open_receiver(state: ServerState) -> OtlpReceiver:
    """The receiver for a running server: stored batches update the server's caches and feed the
    context-intelligence graph like ``POST /v1/conversations/{cid}/events``; oversized values go to
    the context-intelligence blob store when it runs (else they stay inline)."""

    def stored(cid: str, result: AppendResult) -> None:
        state.appended(cid, result)
        if state.feeder is not None and result.accepted:
            state.feeder.mark(cid)

    async def deleted(cid: str) -> None:
        state.conversations.forget(cid)
        state.conversation_list.deleted(cid)
        if state.feeder is not None:
            await state.feeder.forget(cid)

    blobs = ConversationBlobs(state.intelligence.blobs) if state.intelligence is not None else None
    receiver = OtlpReceiver(
        OtlpIngestor(state.log, on_stored=stored, on_deleted=deleted, blobs=blobs), state.metrics.gauges
    )
    receiver.start()
    return receiver


def open_forwarder(state: ServerState) -> OtlpForwarder:
    """``--otlp-endpoint``: a started forwarder, its state in ``<data-dir>/otlp-forward.json``."""
    config = state.config
    assert config.otlp_endpoint is not None
    forwarder = OtlpForwarder(
        state.log,
        config.otlp_endpoint,
        headers=config.otlp_headers,
        state_path=config.data_dir / "otlp-forward.json",
    )
    forwarder.start()
    state.metrics.gauges["convograph_otlp_spans_forwarded"] = lambda: forwarder.spans_sent
    return forwarder

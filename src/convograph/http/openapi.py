"""What ``/openapi.json`` declares for routes that read their raw body and answer ready-made bytes.

The handlers decode their own request bodies (to give precise errors) and return `Response[bytes]`
or a `Stream`, so Litestar sees neither shape. `documented(...)` returns the route-decorator
arguments that declare them, with Litestar's own mechanisms and schemas generated from msgspec types:

- the request body: a dependency whose ``data`` parameter has the body's type. Litestar documents
  a ``data`` parameter of any dependency in scope as the request body, but only resolves the
  dependencies a handler asks for, so this one never runs: the handler still reads the raw body;
- the replies: one `ResponseSpec` per status: the success reply's type and media type, and the
  `ErrorBody` (``{"error": {"code", "message", "details"?}}``) for each error status the route
  answers (`STANDARD_ERRORS` for every guarded route, plus the route's own);
- msgspec Structs as they are on the wire (`WireStructSchemaPlugin`, an OpenAPI schema plugin of
  the app): ``additionalProperties: false`` where unknown fields are refused, and without the
  events' internal ``__extra__`` slot (unknown fields are kept and sent flattened), and with
  ``int | float`` fields as ``number`` (Litestar's ``oneOf: [integer, number]`` refuses every
  integer: it matches both);
- a body also accepted as NDJSON, or a second success media type (the DAG's SVG): an
  ``operation_class`` that adds it to the operation Litestar generated.

Nothing here changes what a route accepts or returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Final

import msgspec
from litestar._openapi.schema_generation.plugins.struct import StructSchemaPlugin
from litestar.di import Provide
from litestar.openapi import ResponseSpec
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIResponse, Operation, RequestBody, Schema
from litestar.openapi.spec.enums import OpenAPIType
from litestar.params import ParameterKwarg, PathParameter, QueryParameter

from convograph.events.types import EXTRA_FIELD
from convograph.http.errors import ErrorBody
from convograph.store import CONVERSATION_ID_PATTERN

if TYPE_CHECKING:
    from litestar._openapi.schema_generation import SchemaCreator
    from litestar.typing import FieldDefinition

__all__ = [
    "ERROR_DESCRIPTIONS",
    "JSON",
    "NDJSON",
    "SSE",
    "STANDARD_ERRORS",
    "SVG",
    "ConversationId",
    "WireStructSchemaPlugin",
    "documented",
    "one_of",
    "reply",
]

JSON: Final = "application/json"
NDJSON: Final = "application/x-ndjson"
SSE: Final = "text/event-stream"
SVG: Final = "image/svg+xml"

STANDARD_ERRORS: Final = (401, 403, 503)
"""Every guarded route: no or an unknown API key, a key lacking the scope (or the workspace), a
backend (event log, graph engine, context-intelligence service) that is down."""

ERROR_DESCRIPTIONS: Final[Mapping[int, str]] = {
    400: "Bad request: a malformed body, query parameter or id",
    401: "Missing or unknown API key",
    403: "The API key lacks the scope or the workspace",
    404: "Unknown conversation, message, relay, session or blob",
    409: "The command does not apply here (e.g. a relay already decided), or a resume cursor is past"
    " the conversation's last seq (cursor_past_head, details.lastSeq)",
    410: "The events asked for have expired from the event log",
    413: "The body or the batch is larger than the server accepts",
    415: "Unsupported Content-Type",
    422: "Invalid events: details lists every bad item; nothing was stored",
    429: "Too many requests at once (too_many_streams: live streams; too_many_queries: /cypher): see details and Retry-After",
    503: "A backend is unavailable; retry (see Retry-After)",
}


ConversationId = Annotated[
    str,
    PathParameter(
        description="1-128 characters: ASCII letters, digits and . _ : @ -, not starting with punctuation.",
        schema_extra={"pattern": f"^{CONVERSATION_ID_PATTERN}$"},
    ),
]
"""A ``{cid}`` path parameter. Its pattern is only declared: the event log checks the id (400)."""


def one_of(name: str, *values: str) -> ParameterKwarg:
    """A string query parameter declared as one of ``values`` (the handler checks it: 400)."""
    return QueryParameter(name=name, schema_extra={"enum": list(values)})


def documented(
    ok: Any,
    *,
    status: int = 200,
    media_type: str = JSON,
    description: str = "Success",
    body: Any = None,
    ndjson_body: bool = False,
    errors: Iterable[int] = (),
    also: Mapping[int, ResponseSpec] | None = None,
    also_media: Iterable[str] = (),
) -> dict[str, Any]:
    """Route-decorator arguments (``@get(..., **documented(...))``) declaring a route's replies
    and request body.

    ``ok``: the type of the success reply (``None``: no content), answered with ``status`` as
    ``media_type``. ``body``: the type of the JSON request body the handler decodes itself;
    ``ndjson_body``: the body may also be NDJSON, each line one item of ``body``'s list form.
    ``errors``: the route's own error statuses, besides `STANDARD_ERRORS` (every route using this
    is guarded). ``also``: further replies (e.g. a 202); ``also_media``: further media types of
    the success reply, each carrying a string (e.g. `SVG`)."""
    statuses = sorted({*errors, *STANDARD_ERRORS})
    responses: dict[int, ResponseSpec] = {
        status: reply(ok, description, media_type),
        **{code: reply(ErrorBody, ERROR_DESCRIPTIONS[code], JSON) for code in statuses},
        **(also or {}),
    }
    out: dict[str, Any] = {"responses": responses}
    if body is not None:
        out["dependencies"] = {"request_body": Provide(_body_marker(body))}
    also_media = tuple(also_media)
    if ndjson_body or also_media:
        out["operation_class"] = _operation_class(
            ndjson_body=ndjson_body, status=str(status), also_media=also_media
        )
    return out


def reply(kind: Any, description: str, media_type: str = JSON) -> ResponseSpec:
    """A reply of type ``kind`` (``None``: no content) for `documented`'s ``also``."""
    return ResponseSpec(
        data_container=kind, description=description, media_type=media_type, generate_examples=False
    )


def _body_marker(kind: Any) -> Any:
    """A dependency that only declares the request body's type (never resolved: see above)."""

    async def request_body(data: Any) -> None:  # pragma: no cover - never called
        return None

    request_body.__annotations__ = {"data": kind, "return": None}
    return request_body


def _operation_class(*, ndjson_body: bool, status: str, also_media: tuple[str, ...]) -> type[Operation]:
    @dataclass
    class DocumentedOperation(Operation):
        """The generated operation plus an NDJSON request body and/or extra success media types."""

        def __post_init__(self) -> None:
            if ndjson_body and isinstance(self.request_body, RequestBody):
                line = _ndjson_line_schema(self.request_body.content[JSON].schema)
                self.request_body.content[NDJSON] = OpenAPIMediaType(schema=line)
            ok = (self.responses or {}).get(status)
            if isinstance(ok, OpenAPIResponse):
                extra = {
                    name: OpenAPIMediaType(schema=Schema(type=OpenAPIType.STRING)) for name in also_media
                }
                ok.content = {**(ok.content or {}), **extra}

    return DocumentedOperation


def _ndjson_line_schema(json_schema: Any) -> Any:
    """The schema of one NDJSON line: the item schema of the JSON body's array alternative."""
    for alternative in getattr(json_schema, "one_of", None) or ():
        if isinstance(alternative, Schema) and alternative.type == OpenAPIType.ARRAY and alternative.items:
            return alternative.items
    return Schema(type=OpenAPIType.OBJECT, description="one JSON object per line")


class WireStructSchemaPlugin(StructSchemaPlugin):
    """Litestar's msgspec Struct schemas, as the Structs are on the wire (see the module docstring)."""

    def to_openapi_schema(self, field_definition: FieldDefinition, schema_creator: SchemaCreator) -> Schema:
        schema = super().to_openapi_schema(field_definition, schema_creator)
        if schema.properties is not None:
            schema.properties.pop(EXTRA_FIELD, None)
            for prop in schema.properties.values():
                _drop_integer_next_to_number(prop)
        if getattr(field_definition.type_, "__struct_config__", None) is not None:
            config: msgspec.structs.StructConfig = field_definition.type_.__struct_config__
            if config.forbid_unknown_fields:
                schema.additional_properties = False
        return schema


def _drop_integer_next_to_number(schema: Any) -> None:
    alternatives = schema.one_of if isinstance(schema, Schema) else None
    if alternatives and any(isinstance(a, Schema) and a.type == OpenAPIType.NUMBER for a in alternatives):
        schema.one_of = [
            a for a in alternatives if not (isinstance(a, Schema) and a.type == OpenAPIType.INTEGER)
        ]

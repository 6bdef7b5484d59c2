"""The harness interfaces: what a model provider is, what a model call asks for, and where a
harness's events go.

Seed 003 and upstream (specs §1, §6.5-6.7) define the producers:

- A **provider** makes one model call. ``invoke(request)`` is an async iterator of convograph
  events for that call: ``text`` / ``reasoning`` chunks (one ``id`` per block, stable across its
  chunks), raw ``tool_call`` events after the stream ends, one ``usage``, and ``error`` on failure.
  Every event carries ``parentId = request.parent_id`` (the agent's run id) and the ``runId`` of
  its attempt: each HTTP attempt is a fresh run, so a call without retries is one run, and a
  retried call is one run per attempt, each failed one ending with its ``error``. A provider never
  raises for an API failure: it yields ``error`` and returns; it never stops without saying why.
  **The call failed if and only if its last event is an** ``error``; earlier ``error`` events
  are attempts that were retried. Providers emit no ``harness_start`` / ``harness_end``
  (docs/harness.md).
- The **agent harness** runs the tool loop on a provider; the **REPL harness** runs the
  recursive-LM loop. Both read their history from, and write their events to, a `ConversationPort`.

Messages in a `ModelRequest` are in the provider's `Provider.message_format` (``"openai"``: Chat
Completions dicts; ``"anthropic"``: Messages-API dicts), i.e. exactly what
`convograph.projections.project_messages(..., format=provider.message_format)` returns, so the
history a model sees is convograph's own projection of the conversation's active path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from convograph.events import Event, Relay, RelayResolved

__all__ = ["ConversationPort", "MessageFormat", "ModelRequest", "Provider", "ToolSpec"]

MessageFormat = Literal["openai", "anthropic"]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model sees it: a name, a description and a JSON schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    """JSON Schema of the arguments object (``{"type": "object", "properties": ..., ...}``)."""


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model call. ``messages`` are in the provider's `Provider.message_format`."""

    model: str
    messages: Sequence[Mapping[str, Any]]
    system: str | None = None
    tools: Sequence[ToolSpec] = ()
    parent_id: str | None = None
    """``parentId`` of every event of the call: the calling agent's run id (absent for a bare call)."""
    max_tokens: int | None = None
    temperature: float | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    """Provider-specific extras passed through to the SDK call (e.g. Anthropic ``thinking``)."""


@runtime_checkable
class Provider(Protocol):
    """A model API behind one small interface (cf. httpx's transport)."""

    @property
    def message_format(self) -> MessageFormat:
        """The message format `ModelRequest.messages` must be in."""
        ...

    def invoke(self, request: ModelRequest) -> AsyncIterator[Event]:
        """The events of one model call (module docstring).

        Cancelling the task that iterates ends the call with one ``error`` event ("cancelled ...")
        returned by the interrupted pull; the next pull (or ``aclose()``) re-raises
        `asyncio.CancelledError`. The providers in `convograph.harness.providers` return a
        `ProviderCall`, whose ``aclose()`` on an unfinished call returns that ``error`` event."""
        ...


@runtime_checkable
class ConversationPort(Protocol):
    """Where a harness's events go and where its history comes from: an in-process event log, or a
    ``convograph serve`` reached through the client. Every event a harness emits carries an
    ``eventId``, so a retried ``emit`` is idempotent."""

    @property
    def conversation_id(self) -> str: ...

    async def emit(self, events: Sequence[Event]) -> None:
        """Append ``events`` to the conversation (durable, or queued for a durable write)."""
        ...

    async def flush(self) -> None:
        """Wait until every event emitted so far is stored (a harness calls it as its run ends, so
        a finished run is in the log); raise if they cannot be."""
        ...

    async def history(self, format: MessageFormat) -> list[dict[str, Any]]:
        """The request history of the conversation's active path, after every event emitted so far
        (`convograph.projections.project_messages`)."""
        ...

    async def relay_decision(self, relay_id: str) -> RelayResolved:
        """Wait until the relay ``relay_id`` is decided and return the decision. The wait survives a
        server restart (the decision is an event in the conversation's log)."""
        ...

    async def standing_grants(self) -> list[Relay]:
        """The permission relays of the conversation approved with ``always`` ("always allow"),
        as stored so far: their tool and parameters give the rules that approve later calls
        (`convograph.harness.permissions`)."""
        ...

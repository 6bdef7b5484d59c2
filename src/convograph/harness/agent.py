"""The agent harness: the tool loop on a provider (seed 003; upstream spec §6.4-6.5, its weak points
fixed).

One run (``runId`` = a fresh uuid7), as events into a `ConversationPort`:

1. ``user`` (when started with a task), then ``harness_start`` (``parentId`` = the user block, or
   the spawning tool call for a subagent).
2. Each turn: the history is the port's `ConversationPort.history` in the provider's format (for
   a root run, convograph's own messages projection of the conversation's active path, so an edit,
   a branch switch or a regenerate made in the viewer changes what the model sees next). The
   provider's ``text`` / ``reasoning`` / ``usage`` / ``error`` events pass through unchanged (their
   own ``runId``, ``parentId`` = this run); its raw tool calls are handled below.
3. No tool call: the run ends (``reason: "final"``). Otherwise each call, in the model's order:
   malformed arguments (``__toolParseError``), an unknown tool, or a ``deny`` policy give the
   ``tool_call`` and at once an error / denied ``tool_result``; ``ask`` emits a ``relay`` and waits
   for its decision (denied: a denied ``tool_result``, no ``tool_call``, as the seed says; the
   projections rebuild the call from the relay); approved calls get their ``tool_call`` and start
   at once, concurrently, each ``tool_result`` emitted when that tool finishes (not after the
   slowest). Then the next turn.
4. ``harness_end`` with ``reason``, ``iterations`` (model calls) and ``totalUsage`` (this run's
   calls plus its subagents').

End reasons: ``final``; ``max_turns`` (the last allowed turn is told to answer without tools; its
tool calls, if any, get an error result); ``max_tokens`` (checked before each turn); ``max_seconds``
and ``cancelled`` (in-flight tool calls get an error result, the provider stream is closed, a
running subagent ends "cancelled" too); ``error`` (the model call failed: an ``error`` event in this
run first). A run never stops without its ``harness_end``, and never raises for a model or tool
failure.

Ids: every event the harness emits carries a fresh ``eventId`` (provider events get one when they
have none), so a retried emit is idempotent. Tool calls are namespaced ``{runId}/{rawId}``; a raw id
the model reuses within the run becomes ``{runId}/{rawId}#{k}`` for its k-th use (upstream's
namespacing left those colliding, spec §6.5).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, get_args

import msgspec

from convograph.events import (
    Error,
    Event,
    HarnessEnd,
    HarnessStart,
    Relay,
    RelayResolved,
    Text,
    ToolCall,
    ToolProgress,
    ToolResult,
    TotalUsage,
    Usage,
    User,
)
from convograph.harness.base import ConversationPort, ModelRequest, Provider
from convograph.harness.context import ToolContext
from convograph.harness.ids import new_id
from convograph.harness.permissions import AskCallback, Decision, decision_event, granted, resolve_policy
from convograph.harness.ports import SubagentPort
from convograph.harness.runs import RunControl, RunHandle, open_run, provider_call
from convograph.harness.tools import Policy, Tool, ToolArgumentError, ToolOutput, to_output, tool
from convograph.harness.usage import UsageTotals
from convograph.hypergraph.turns import user_claim

if TYPE_CHECKING:
    from convograph.harness.serving import ServingPort

__all__ = ["Agent", "AgentResult", "AgentRun", "Budget"]

LAST_TURN_NOTE: Final = (
    "You have reached this run's turn limit: do not call tools any more; answer now with what you have."
)


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits of one run: model calls, tokens (input + output, subagents included) and wall time."""

    max_turns: int = 10
    max_tokens: int | None = None
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {self.max_turns}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, got {self.max_tokens}")
        if self.max_seconds is not None and self.max_seconds <= 0:
            raise ValueError(f"max_seconds must be positive, got {self.max_seconds}")


@dataclass(frozen=True, slots=True)
class AgentResult:
    """How a run ended. ``text`` is the last model turn's text (the answer when ``reason`` is
    ``"final"``); ``error`` says what failed when ``reason`` is ``"error"``."""

    run_id: str
    reason: str
    text: str
    iterations: int
    usage: TotalUsage
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason == "final"


class Agent:
    """A model with tools, permissions and budgets. `start` or `run` it on a conversation port."""

    kind: ClassVar[str] = "agent"
    """What the server lists a serving agent as (`convograph.harness.serving.Servable`)."""

    def __init__(
        self,
        provider: Provider,
        *,
        model: str,
        tools: Sequence[Tool] = (),
        system: str | None = None,
        permissions: Mapping[str, Policy] | None = None,
        ask: AskCallback | None = None,
        budget: Budget | None = None,
        tool_timeout: float = 120.0,
        relay_timeout: float | None = None,
        name: str = "agent",
        max_tokens: int | None = None,
        temperature: float | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        names = [t.name for t in tools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"tool names must be unique; repeated: {', '.join(duplicates)}")
        for tool_name, policy in (permissions or {}).items():
            if policy not in get_args(Policy):
                raise ValueError(f"permission for {tool_name!r} must be allow, deny or ask, got {policy!r}")
        if tool_timeout <= 0:
            raise ValueError(f"tool_timeout must be positive, got {tool_timeout}")
        self.provider = provider
        self.model = model
        self.tools: dict[str, Tool] = {t.name: t for t in tools}
        self.system = system
        self.permissions = dict(permissions or {})
        self.ask = ask
        self.budget = budget or Budget()
        self.tool_timeout = tool_timeout
        self.relay_timeout = relay_timeout
        self.name = name
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.options = dict(options or {})

    def as_tool(
        self, *, name: str | None = None, description: str | None = None, policy: Policy = "allow"
    ) -> Tool:
        """This agent as a tool another agent can call: its one argument is the ``task``; the call
        runs this agent as a subagent (`ToolContext.spawn`) and returns its answer (``{context,
        result}`` = the answer text). A subagent that ends without an answer is an error result.
        The call has no time limit of its own: the subagent's budget bounds it."""
        agent = self
        tool_name = name or self.name

        async def run_subagent(task: str, ctx: ToolContext) -> ToolOutput:
            result = await ctx.spawn(agent, task)
            if not result.ok:
                detail = f": {result.error}" if result.error else ""
                raise RuntimeError(f"the {tool_name} agent ended without an answer ({result.reason}{detail})")
            return ToolOutput(context=result.text, result=result.text)

        run_subagent.__doc__ = (
            description
            or f"Hand a task to the {tool_name} agent, which works on it on its own and returns its answer."
        ) + "\n\nArgs:\n    task: Everything the agent needs to know to do the task."
        return tool(name=tool_name, policy=policy, timeout=math.inf)(run_subagent)

    def start(
        self,
        port: ConversationPort,
        task: str | None = None,
        *,
        parent_id: str | None = None,
        claim: str | None = None,
    ) -> AgentRun:
        """Start a run in the background (needs a running event loop) and return its handle.

        With ``task``, a ``user`` event holding it comes first and the run answers it; without,
        the run continues the conversation's active path as it stands. ``parent_id`` sets the
        run's ``parentId`` (default: the task's user block, or none). ``claim`` is the turn the
        run answers (`convograph.hypergraph.turns`; a task's own message is claimed by default):
        when another run already holds it, this one emits nothing and ends ``"claimed"``."""
        loop = _Loop(self, port, parent_id=parent_id, claim=claim)
        run = asyncio.create_task(loop.run(task), name=f"convograph-agent-{loop.run_id}")
        return RunHandle(loop.run_id, loop.control, run)

    async def run(
        self,
        port: ConversationPort,
        task: str | None = None,
        *,
        parent_id: str | None = None,
        claim: str | None = None,
    ) -> AgentResult:
        """`start`, then wait for the end. Cancelling the caller cancels the run (it still emits its
        ``harness_end``, reason ``"cancelled"``) and re-raises."""
        return await self.start(port, task, parent_id=parent_id, claim=claim).wait()

    async def serve(self, port: ServingPort, **options: Any) -> None:
        """Serve the conversation behind ``port`` until cancelled: answer every message, edit and
        regenerate that leaves it awaiting a reply, one run at a time
        (`convograph.harness.serving.serve`, whose keyword options this takes)."""
        from convograph.harness.serving import serve

        await serve(self, port, **options)


AgentRun = RunHandle[AgentResult]
"""Handle of a running agent (`RunHandle`): ``wait()`` for its `AgentResult`, or ``cancel()``."""


@dataclass(slots=True)
class _Turn:
    """One model call: its text, raw tool calls, and the error it ended with (if it failed)."""

    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    error: str | None = None


class _Loop:
    """State of one run; `run` is the coroutine behind `AgentRun`."""

    def __init__(
        self, agent: Agent, port: ConversationPort, *, parent_id: str | None, claim: str | None = None
    ) -> None:
        self.agent = agent
        self.port = port
        self.run_id = new_id()
        self.parent_id = parent_id
        self.claim = claim
        self.usage = UsageTotals()
        self.iterations = 0
        self.text = ""
        self.control = RunControl()
        self._tool_tasks: set[asyncio.Task[None]] = set()
        self._open_calls: dict[str, str] = {}  # namespaced call id -> tool name, until its result
        self._raw_uses: dict[str, int] = {}

    # -- lifecycle -------------------------------------------------------------------------------

    async def run(self, task: str | None) -> AgentResult:
        budget = self.agent.budget
        self.control.bind(budget.max_seconds)
        reason, error = "error", None
        try:
            claim = self.claim
            if task is not None:
                user_run = new_id()
                await self.emit(User(run_id=user_run, content=task))
                self.parent_id = self.parent_id or f"{user_run}:user"
                claim = claim or user_claim(f"{user_run}:user")
            start = HarnessStart(
                run_id=self.run_id,
                parent_id=self.parent_id,
                agent_id=self.agent.name,
                max_iterations=budget.max_turns,
                event_id=claim,
            )
            if not await open_run(self.port, start):
                return AgentResult(self.run_id, "claimed", "", 0, TotalUsage(input_tokens=0, output_tokens=0))
            reason, error = await self._turns()
        except asyncio.CancelledError:
            reason = self.control.stopped()
        except Exception as exc:  # a port or harness failure: still end the run with an event
            reason, error = "error", f"{type(exc).__name__}: {exc}"
        finally:
            self.control.release()
        return await self._finish(reason, error)

    async def _finish(self, reason: str, error: str | None) -> AgentResult:
        for task in self._tool_tasks:
            task.cancel()
        if self._tool_tasks:
            await asyncio.gather(*self._tool_tasks, return_exceptions=True)
        for call_id, name in list(self._open_calls.items()):
            await self._result(call_id, name, {"error": f"not run to the end: the run stopped ({reason})"})
        if error is not None:
            await self.emit(Error(run_id=self.run_id, parent_id=self.parent_id, message=error))
        total = self.usage.total()
        await self.emit(
            HarnessEnd(
                run_id=self.run_id,
                parent_id=self.parent_id,
                agent_id=self.agent.name,
                reason=reason,
                iterations=self.iterations,
                total_usage=total,
            )
        )
        await self.port.flush()  # a finished run is in the log
        return AgentResult(self.run_id, reason, self.text, self.iterations, total, error)

    async def emit(self, event: Event) -> None:
        """Emit one event with an ``eventId`` (kept if it has one)."""
        if event.event_id is None:
            event = msgspec.structs.replace(event, event_id=new_id())
        await self.port.emit([event])

    # -- turns -----------------------------------------------------------------------------------

    async def _turns(self) -> tuple[str, str | None]:
        budget = self.agent.budget
        while True:
            if self.iterations >= budget.max_turns:
                return "max_turns", None
            if budget.max_tokens is not None and self.usage.tokens >= budget.max_tokens:
                return "max_tokens", None
            last = self.iterations == budget.max_turns - 1
            self.iterations += 1
            turn = await self._model_turn(last=last)
            self.text = turn.text
            if turn.error is not None:
                return "error", f"model call failed: {turn.error}"
            if not turn.calls:
                return "final", None
            if last:
                for call in turn.calls:
                    call_id = self._namespace(call.id)
                    await self._call_event(call_id, call.name, call.input)
                    await self._result(
                        call_id, call.name, {"error": "turn limit reached: tools are disabled"}
                    )
                return "max_turns", None
            await self._tool_calls(turn.calls)

    async def _model_turn(self, *, last: bool) -> _Turn:
        agent = self.agent
        provider = agent.provider
        messages = await self.port.history(provider.message_format)
        if not messages:
            return _Turn(error="the conversation has no message to answer (start the run with a task)")
        system = agent.system
        if last:
            system = f"{system}\n\n{LAST_TURN_NOTE}" if system else LAST_TURN_NOTE
        request = ModelRequest(
            model=agent.model,
            messages=messages,
            system=system,
            tools=[t.spec for t in agent.tools.values()],
            parent_id=self.run_id,
            max_tokens=agent.max_tokens,
            temperature=agent.temperature,
            options=agent.options,
        )
        turn = _Turn()
        failed = False
        texts: list[str] = []
        async with provider_call(provider, request, self.emit) as stream:
            async for event in stream:
                if isinstance(event, ToolCall):
                    turn.calls.append(event)
                    failed = False
                    continue
                await self.emit(event)
                failed = isinstance(event, Error)
                if isinstance(event, Error):
                    turn.error = event.message
                elif isinstance(event, Usage):
                    self.usage.add(event)
                elif isinstance(event, Text):
                    texts.append(event.content)
        turn.text = "".join(texts)
        if not failed:
            turn.error = None
        return turn

    # -- tool calls ------------------------------------------------------------------------------

    def _namespace(self, raw_id: str) -> str:
        uses = self._raw_uses.get(raw_id, 0) + 1
        self._raw_uses[raw_id] = uses
        return f"{self.run_id}/{raw_id}" if uses == 1 else f"{self.run_id}/{raw_id}#{uses}"

    async def _tool_calls(self, calls: list[ToolCall]) -> None:
        agent = self.agent
        started: list[asyncio.Task[None]] = []
        for call in calls:
            call_id = self._namespace(call.id)
            name, arguments = call.name, call.input
            if isinstance(arguments, dict) and arguments.get("__toolParseError"):
                await self._call_event(call_id, name, arguments)
                message = (
                    f"Tool call had malformed arguments. Parse error: {arguments.get('parseError')} "
                    f"Raw arguments: {arguments.get('rawArguments')}"
                )
                await self._result(call_id, name, {"error": message})
                continue
            tool = agent.tools.get(name)
            if tool is None:
                await self._call_event(call_id, name, arguments)
                known = ", ".join(sorted(agent.tools)) or "none"
                await self._result(
                    call_id, name, {"error": f"unknown tool {name!r}; available tools: {known}"}
                )
                continue
            policy = resolve_policy(tool, agent.permissions)
            if policy == "deny":
                await self._call_event(call_id, name, arguments)
                await self._result(call_id, name, {"status": "denied", "reason": "denied by policy"})
                continue
            if policy == "ask":
                decision = await self._ask(call_id, tool, arguments)
                if not decision.approved:
                    reason = decision.reason or "denied by the user"
                    await self._result(call_id, name, {"status": "denied", "reason": reason})
                    continue
            await self._call_event(call_id, name, arguments)
            started.append(asyncio.create_task(self._execute(tool, call_id, arguments)))
            self._tool_tasks.update(started)
        await asyncio.gather(*started)
        self._tool_tasks.clear()

    async def _call_event(self, call_id: str, name: str, arguments: Any) -> None:
        self._open_calls[call_id] = name
        await self.emit(
            ToolCall(run_id=self.run_id, parent_id=self.parent_id, id=call_id, name=name, input=arguments)
        )

    async def _result(self, call_id: str, name: str, output: Any) -> None:
        self._open_calls.pop(call_id, None)
        await self.emit(
            ToolResult(run_id=self.run_id, parent_id=self.parent_id, id=call_id, name=name, output=output)
        )

    async def _execute(self, tool: Tool, call_id: str, arguments: Any) -> None:
        timeout = tool.timeout if tool.timeout is not None else self.agent.tool_timeout
        context = ToolContext(
            tool_call_id=call_id,
            tool_name=tool.name,
            run_id=self.run_id,
            conversation_id=self.port.conversation_id,
            _progress=lambda content: self._progress(call_id, tool.name, content),
            _spawn=lambda agent, task: self._spawn(agent, task, call_id),
        )
        limit = asyncio.timeout(None if math.isinf(timeout) else timeout)
        try:
            async with limit:
                value = await tool.call(arguments, context)
            output = to_output(value)
        except ToolArgumentError as exc:
            output = {"error": f"invalid arguments for tool {tool.name!r}: {exc}"}
        except TimeoutError as exc:
            if not limit.expired():
                output = {"error": f"{type(exc).__name__}: {exc}"}
            else:
                output = {"error": f"tool {tool.name!r} timed out after {timeout:g} s"}
        except Exception as exc:
            output = {"error": f"{type(exc).__name__}: {exc}"}
        await self._result(call_id, tool.name, output)

    async def _progress(self, call_id: str, name: str, content: Any) -> None:
        await self.emit(
            ToolProgress(
                run_id=self.run_id,
                parent_id=self.parent_id,
                id=new_id(),
                tool_call_id=call_id,
                name=name,
                content=content,
            )
        )

    async def _spawn(self, agent: Agent, task: str, call_id: str) -> AgentResult:
        port = SubagentPort(self.port, task, anchor=call_id)
        run = agent.start(port, parent_id=call_id)
        result = await run.wait()
        self.usage.add_total(result.usage)
        return result

    # -- permissions -----------------------------------------------------------------------------

    async def _ask(self, call_id: str, tool: Tool, arguments: Any) -> RelayResolved | Decision:
        params = arguments if isinstance(arguments, dict) else {"input": arguments}
        grant = granted(await self.port.standing_grants(), tool.name, params, tool.always_allows)
        if grant is not None:
            return Decision(True, f"always allowed (relay {grant.id})")
        relay = Relay(
            run_id=self.run_id,
            parent_id=self.parent_id,
            id=new_id(),
            kind="permission",
            tool_call_id=call_id,
            tool=tool.name,
            params=params,
            event_id=new_id(),
        )
        self._open_calls[call_id] = tool.name
        await self.emit(relay)
        waiter = asyncio.ensure_future(self.port.relay_decision(relay.id))
        callback = self.agent.ask
        try:
            if callback is not None:
                await self._ask_callback(callback, relay, waiter)
            timeout = self.agent.relay_timeout
            try:
                return await asyncio.wait_for(asyncio.shield(waiter), timeout)
            except TimeoutError:
                refusal = Decision(False, f"no decision within {timeout:g} s")
                await self.port.emit([decision_event(relay, refusal)])
                return await waiter
        finally:
            waiter.cancel()

    async def _ask_callback(
        self, callback: AskCallback, relay: Relay, waiter: asyncio.Future[RelayResolved]
    ) -> None:
        """Race the callback against a decision from elsewhere; record the callback's answer."""
        asked = asyncio.ensure_future(callback(relay))
        try:
            racing: list[asyncio.Future[Any]] = [asked, waiter]
            await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not asked.done():
                asked.cancel()
        if waiter.done() or asked.cancelled():
            return
        try:
            answer = asked.result()
        except Exception as exc:
            answer = Decision(False, f"the permission callback failed: {type(exc).__name__}: {exc}")
        if answer is not None:
            await self.port.emit([decision_event(relay, answer)])

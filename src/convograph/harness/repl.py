"""The REPL harness: the recursive-language-model loop (seed 003 ``repl_*`` events; upstream spec
§6.7) with a Python REPL.

One run, as events into a `ConversationPort`:

1. ``user`` (the task, for a root run), ``harness_start`` with ``maxIterations`` (and ``depth``
   when above 0).
2. Each iteration ``i`` (0-based): the model is called with the REPL system prompt and the run's
   history: for a root run, the conversation's messages projection of the active path as the run
   starts (earlier turns, then the task), for a child run its prompt; then the run's own turns and
   the REPL feedback (kept by the run: the projection shows no extraction errors or restarts). Its ``text`` / ``reasoning`` /
   ``usage`` are re-tagged with this run's id (the provider's block ids kept), as upstream does, so
   the REPL view folds them into the turn. Exactly one ```python (or ```repl) block is expected:
   none or several gives an ``error`` event and feedback, and the loop goes on. The code becomes
   ``repl_input`` (``id`` = a fresh call id, ``iteration``), runs in the `Sandbox` (persistent
   scope) with its output streamed live as ``repl_progress`` (``id`` = the call id, so one turn's
   progress is one block), then ``repl_output`` (``stdout`` = stdout and stderr in order, ``error``,
   ``done``, ``durationMs``, ``truncated``). A crash or timeout of the interpreter is an error
   output; the next turn gets a fresh interpreter and the model is told.
3. ``FINAL(value)`` / ``FINAL_VAR(name)``: ``done: true``, then the answer as a ``text`` event, and
   the run ends (``reason: "final"``).
4. ``harness_end`` with ``reason`` (``final``, ``max_iterations``, ``max_tokens``,
   ``max_seconds``, ``cancelled``, ``error``: a failed model call, not upstream's
   ``max_iterations``), ``iterations`` and ``totalUsage`` (children included).

``llm_query(prompt)`` in the code is a child run whose ``parentId`` is the ``repl_input`` id: a
child REPL run (``depth + 1``) while ``depth < max_depth``, else one plain model call (its events
keep their own run id). The child's answer is returned to the code; its failure raises there.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import msgspec

from convograph.events import (
    Error,
    Event,
    HarnessEnd,
    HarnessStart,
    Reasoning,
    ReplInput,
    ReplOutput,
    ReplProgress,
    Text,
    TotalUsage,
    Usage,
    User,
)
from convograph.harness.base import ConversationPort, ModelRequest, Provider
from convograph.harness.ids import new_id
from convograph.harness.repl_prompt import extract_code, feedback, no_single_block, system_prompt
from convograph.harness.runs import RunControl, RunHandle, open_run, provider_call
from convograph.harness.sandbox import ExecResult, Sandbox, SandboxLimits, Stream
from convograph.harness.usage import UsageTotals
from convograph.hypergraph.turns import user_claim

if TYPE_CHECKING:
    from convograph.harness.serving import ServingPort

__all__ = ["ReplHarness", "ReplResult", "ReplRun"]


@dataclass(frozen=True, slots=True)
class ReplResult:
    """How a REPL run ended: ``answer`` is the ``FINAL`` text (None unless ``reason == "final"``)."""

    run_id: str
    reason: str
    answer: str | None
    iterations: int
    usage: TotalUsage
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason == "final"


ReplRun = RunHandle[ReplResult]


@dataclass(frozen=True, slots=True)
class ReplHarness:
    """A model that works through a Python REPL. `start` or `run` it on a conversation port.

    ``sub_provider`` / ``sub_model`` answer ``llm_query`` (default: the same); ``max_depth`` is how
    deep child REPL runs go (0: every ``llm_query`` is one plain model call); ``max_prompt_chars``
    bounds one ``llm_query`` prompt; ``system`` is appended to the REPL system prompt."""

    kind: ClassVar[str] = "repl"
    """What the server lists a serving REPL harness as (`convograph.harness.serving.Servable`)."""
    provider: Provider
    model: str
    sub_provider: Provider | None = None
    sub_model: str | None = None
    system: str | None = None
    max_iterations: int = 20
    max_depth: int = 0
    max_tokens: int | None = None
    max_seconds: float | None = None
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    max_prompt_chars: int = 100_000
    name: str = "repl"
    model_max_tokens: int | None = None
    temperature: float | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    context: Any = None
    """The REPL's ``context`` for runs started without one (a harness serving a conversation
    about one document)."""

    def __post_init__(self) -> None:
        if self.max_iterations < 1:
            raise ValueError(f"max_iterations must be at least 1, got {self.max_iterations}")
        if self.max_depth < 0:
            raise ValueError(f"max_depth must be 0 or more, got {self.max_depth}")

    def start(
        self,
        port: ConversationPort,
        task: str | None = None,
        *,
        context: Any = None,
        parent_id: str | None = None,
        claim: str | None = None,
    ) -> ReplRun:
        """Start a run in the background and return its handle. ``context`` (any JSON-able value)
        is the REPL's ``context`` variable; the model sees only its size and first characters.
        Without ``task`` the run answers the conversation's active path as it stands. ``claim``:
        as `convograph.harness.Agent.start` (a run that loses it ends ``"claimed"``, silent)."""
        if context is None:
            context = self.context
        return self._start(port, task, context=context, parent_id=parent_id, depth=0, root=True, claim=claim)

    async def run(
        self,
        port: ConversationPort,
        task: str | None = None,
        *,
        context: Any = None,
        parent_id: str | None = None,
        claim: str | None = None,
    ) -> ReplResult:
        """`start`, then wait for the end (cancelling the caller cancels the run)."""
        return await self.start(port, task, context=context, parent_id=parent_id, claim=claim).wait()

    async def serve(self, port: ServingPort, **options: Any) -> None:
        """Serve the conversation behind ``port`` (`convograph.harness.serving.serve`): each reply
        it awaits is a REPL run over the active path (``context`` stays None)."""
        from convograph.harness.serving import serve

        await serve(self, port, **options)

    def _start(
        self,
        port: ConversationPort,
        task: str | None,
        *,
        context: Any,
        parent_id: str | None,
        depth: int,
        root: bool,
        claim: str | None = None,
    ) -> ReplRun:
        loop = _ReplLoop(self, port, parent_id=parent_id, depth=depth)
        run = asyncio.create_task(loop.run(task, context, root, claim), name=f"convograph-repl-{loop.run_id}")
        return RunHandle(loop.run_id, loop.control, run)


@dataclass(slots=True)
class _ModelTurn:
    text: str = ""
    error: str | None = None


class _ReplLoop:
    """State of one REPL run; `run` is the coroutine behind its handle."""

    def __init__(
        self, agent: ReplHarness, port: ConversationPort, *, parent_id: str | None, depth: int
    ) -> None:
        self.agent = agent
        self.port = port
        self.run_id = new_id()
        self.parent_id = parent_id
        self.depth = depth
        self.control = RunControl()
        self.usage = UsageTotals()
        self.iterations = 0
        self.answer: str | None = None
        self.messages: list[dict[str, Any]] = []

    async def emit(self, event: Event) -> None:
        if event.event_id is None:
            event = msgspec.structs.replace(event, event_id=new_id())
        await self.port.emit([event])

    async def run(self, task: str | None, context: Any, root: bool, claim: str | None = None) -> ReplResult:
        agent = self.agent
        self.control.bind(agent.max_seconds)
        reason, error = "error", None
        try:
            if root and task is not None:
                user_run = new_id()
                await self.emit(User(run_id=user_run, content=task))
                self.parent_id = self.parent_id or f"{user_run}:user"
                claim = claim or user_claim(f"{user_run}:user")
            start = HarnessStart(
                run_id=self.run_id,
                parent_id=self.parent_id,
                agent_id=agent.name,
                max_iterations=agent.max_iterations,
                depth=self.depth or None,
                event_id=claim,
            )
            if not await open_run(self.port, start):
                return ReplResult(
                    self.run_id, "claimed", None, 0, TotalUsage(input_tokens=0, output_tokens=0)
                )
            self.messages = [{"role": "user", "content": task or ""}]
            if root:  # earlier turns of the conversation (its active path), ending with the task
                self.messages = await self.port.history(agent.provider.message_format) or self.messages
            system = system_prompt(context, agent.limits, extra=agent.system)
            async with Sandbox(agent.limits, context=context) as sandbox:
                reason, error = await self._iterate(sandbox, system)
        except asyncio.CancelledError:
            reason = self.control.stopped()
        except Exception as exc:  # a port or sandbox failure: the run still ends with an event
            reason, error = "error", f"{type(exc).__name__}: {exc}"
        finally:
            self.control.release()
        if error is not None:
            await self.emit(Error(run_id=self.run_id, parent_id=self.parent_id, message=error))
        total = self.usage.total()
        await self.emit(
            HarnessEnd(
                run_id=self.run_id,
                parent_id=self.parent_id,
                agent_id=agent.name,
                reason=reason,
                iterations=self.iterations,
                total_usage=total,
            )
        )
        await self.port.flush()  # a finished run is in the log
        return ReplResult(self.run_id, reason, self.answer, self.iterations, total, error)

    async def _iterate(self, sandbox: Sandbox, system: str) -> tuple[str, str | None]:
        agent = self.agent
        for iteration in range(agent.max_iterations):
            if agent.max_tokens is not None and self.usage.tokens >= agent.max_tokens:
                return "max_tokens", None
            self.iterations = iteration + 1
            turn = await self._model_turn(system)
            if turn.error is not None:
                return "error", f"model call failed: {turn.error}"
            self.messages.append({"role": "assistant", "content": turn.text or "(empty response)"})
            blocks = extract_code(turn.text)
            if len(blocks) != 1:
                problem = no_single_block(len(blocks))
                await self.emit(Error(run_id=self.run_id, parent_id=self.parent_id, message=problem))
                self.messages.append({"role": "user", "content": f"<error>\n{problem}\n</error>"})
                continue
            result = await self._execute(sandbox, blocks[0], iteration)
            if result.final is not None:
                self.answer = result.final
                await self.emit(
                    Text(run_id=self.run_id, parent_id=self.parent_id, id=new_id(), content=result.final)
                )
                return "final", None
            self.messages.append({"role": "user", "content": feedback(result, iteration)})
        return "max_iterations", None

    async def _execute(self, sandbox: Sandbox, code: str, iteration: int) -> ExecResult:
        """``repl_input``, the execution with live ``repl_progress``, ``repl_output``."""
        call_id = new_id()
        run_id, parent_id = self.run_id, self.parent_id
        await self.emit(
            ReplInput(run_id=run_id, parent_id=parent_id, id=call_id, code=code, iteration=iteration)
        )

        async def on_output(stream: Stream, chunk: str) -> None:
            await self.emit(
                ReplProgress(run_id=run_id, parent_id=parent_id, id=call_id, chunk=chunk, stream=stream)
            )

        async def on_query(prompt: str) -> str:
            return await self._llm_query(prompt, call_id)

        result = await sandbox.execute(code, on_output=on_output, on_query=on_query)
        await self.emit(
            ReplOutput(
                run_id=run_id,
                parent_id=parent_id,
                id=call_id,
                stdout=result.output,
                error=result.error,
                done=result.final is not None,
                iteration=iteration,
                duration_ms=result.duration_ms,
                truncated=result.truncated or None,
            )
        )
        return result

    async def _model_turn(self, system: str) -> _ModelTurn:
        """One call of the root model; its events re-tagged with this run's id."""
        agent = self.agent
        request = ModelRequest(
            model=agent.model,
            messages=list(self.messages),
            system=system,
            parent_id=self.run_id,
            max_tokens=agent.model_max_tokens,
            temperature=agent.temperature,
            options=agent.options,
        )
        turn = _ModelTurn()
        texts: list[str] = []
        failed = False
        async with provider_call(agent.provider, request, self._record_model_event) as stream:
            async for event in stream:
                if not isinstance(event, Text | Reasoning | Usage | Error):
                    continue  # no tools are offered: a stray raw tool call is ignored
                await self._record_model_event(event)
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

    async def _record_model_event(self, event: Event) -> None:
        """A root model event, re-tagged with this run's id (the REPL view folds it into the turn)."""
        await self.emit(msgspec.structs.replace(event, run_id=self.run_id, parent_id=self.parent_id))

    async def _llm_query(self, prompt: str, call_id: str) -> str:
        """Answer one ``llm_query`` from the code: a child run (module docstring)."""
        agent = self.agent
        if len(prompt) > agent.max_prompt_chars:
            raise ValueError(
                f"the prompt has {len(prompt)} characters; the limit is {agent.max_prompt_chars}"
            )
        sub_provider = agent.sub_provider or agent.provider
        sub_model = agent.sub_model or agent.model
        if self.depth < agent.max_depth:
            child_agent = dataclasses.replace(agent, provider=sub_provider, model=sub_model, system=None)
            handle = child_agent._start(
                self.port, prompt, context=None, parent_id=call_id, depth=self.depth + 1, root=False
            )
            result = await handle.wait()
            self.usage.add_total(result.usage)
            if result.answer is None:
                detail = f": {result.error}" if result.error else ""
                raise RuntimeError(f"the child run ended without an answer ({result.reason}{detail})")
            return result.answer
        request = ModelRequest(
            model=sub_model, messages=[{"role": "user", "content": prompt}], parent_id=call_id
        )
        texts: list[str] = []
        error: str | None = None
        async with provider_call(sub_provider, request, self.emit) as stream:
            async for event in stream:
                await self.emit(event)
                if isinstance(event, Error):
                    error = event.message
                else:
                    error = None
                    if isinstance(event, Usage):
                        self.usage.add(event)
                    elif isinstance(event, Text):
                        texts.append(event.content)
        if error is not None:
            raise RuntimeError(error)
        return "".join(texts)

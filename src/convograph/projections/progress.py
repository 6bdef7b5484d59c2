"""Progress accumulators: fold a tool's ``tool_progress`` contents into one state per call.

A registry maps a tool name to an `Accumulator` (``init()`` and ``reduce(state, content)``). Users
extend it per tool name with `register_accumulator` (process-wide default registry) or by passing
their own `ProgressRegistry` to a projection. A tool without an accumulator gets ``progress =
None`` as upstream does, unless the registry has a ``fallback`` (for example `KeepLatest()`).

Built in, registered for ``exec``: `ExecAccumulator` (seed/spec §4.1): state
``{"stdout": str, "stderr": str, "metrics": dict | None}``; ``{"channel": "stdout"|"stderr",
"data": str}`` appends to that channel, a content with a numeric ``pid`` replaces ``metrics``
(latest snapshot wins), anything else is ignored.

Reducers must not mutate ``state``; return a new value. An accumulator may also offer
``fold(state, content)``, which updates a state only its caller holds in place (`fold_step`: a
thread build folds each call view's own state so, making no copy per chunk). Cost: one ``reduce`` call per progress
event (the thread projection indexes progress by call id, so nothing rescans the graph).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from convograph.projections.exec_progress import changes_exec, fold_exec

__all__ = [
    "Accumulator",
    "CollectAll",
    "ExecAccumulator",
    "KeepLatest",
    "ProgressRegistry",
    "default_registry",
    "fold_step",
    "register_accumulator",
]


@runtime_checkable
class Accumulator(Protocol):
    """Folds the progress contents of one tool call into a state."""

    def init(self) -> Any: ...

    def reduce(self, state: Any, content: Any) -> Any: ...


_EXEC_INIT: dict[str, Any] = {"stdout": "", "stderr": "", "metrics": None}
"""`ExecAccumulator.init`'s state, copied per call (never handed out itself)."""


class ExecAccumulator:
    """stdout / stderr chunks concatenated per channel; the latest metrics snapshot kept."""

    def init(self) -> dict[str, Any]:
        return _EXEC_INIT.copy()  # (a copy of a small dict is cheaper than building it)

    def reduce(self, state: dict[str, Any], content: Any) -> dict[str, Any]:
        if not changes_exec(content):
            return state
        return self.fold(state.copy(), content)  # (a new state: reducers never mutate theirs)

    def fold(self, state: dict[str, Any], content: Any) -> dict[str, Any]:
        """`reduce` that updates ``state`` in place and returns it: for a state only its caller
        holds (`fold_step`), so a long stream makes no copy per chunk."""
        return fold_exec(state, content)


def fold_step(accumulator: Accumulator) -> Callable[[Any, Any], Any]:
    """``step(state, content) -> state`` for ``accumulator``: its in-place ``fold`` when it has one
    (`ExecAccumulator`), else its ``reduce``. For a caller that alone holds the state it folds
    (a thread build's call view)."""
    if type(accumulator) is ExecAccumulator:
        return fold_exec  # (the compiled function itself: no method call per chunk)
    step: Callable[[Any, Any], Any] = getattr(accumulator, "fold", accumulator.reduce)
    return step


class KeepLatest:
    """The newest content wins (``None`` before any)."""

    def init(self) -> Any:
        return None

    def reduce(self, state: Any, content: Any) -> Any:
        return content


class CollectAll:
    """Every content, in arrival order, as a tuple."""

    def init(self) -> tuple[Any, ...]:
        return ()

    def reduce(self, state: tuple[Any, ...], content: Any) -> tuple[Any, ...]:
        return (*state, content)


class ProgressRegistry:
    """Tool name -> `Accumulator`, with a fallback for unregistered tools (``None``: no progress)."""

    __slots__ = ("_by_tool", "fallback")

    def __init__(
        self,
        accumulators: dict[str, Accumulator] | None = None,
        *,
        fallback: Accumulator | None = None,
    ) -> None:
        self._by_tool: dict[str, Accumulator] = dict(accumulators or {})
        self.fallback = fallback

    def register(self, tool: str, accumulator: Accumulator) -> None:
        """Use ``accumulator`` for every call of ``tool`` (replaces an earlier one)."""
        if not isinstance(accumulator, Accumulator):
            raise TypeError(f"accumulator for {tool!r} needs init() and reduce(state, content)")
        self._by_tool[tool] = accumulator

    def unregister(self, tool: str) -> None:
        """Forget the accumulator for ``tool`` (no error when there is none)."""
        self._by_tool.pop(tool, None)

    @property
    def folds_nothing(self) -> bool:
        """True when no tool has an accumulator and there is no fallback: every ``progress`` is
        ``None``, so a projection can skip progress nodes."""
        return not self._by_tool and self.fallback is None

    def get(self, tool: str) -> Accumulator | None:
        return self._by_tool.get(tool, self.fallback)

    def copy(self) -> ProgressRegistry:
        return ProgressRegistry(self._by_tool, fallback=self.fallback)

    def accumulate(self, tool: str, contents: Iterable[Any]) -> Any:
        """Fold ``contents`` with the accumulator for ``tool``; ``None`` when there is none."""
        accumulator = self.get(tool)
        if accumulator is None:
            return None
        state = accumulator.init()
        for content in contents:
            state = accumulator.reduce(state, content)
        return state

    def __contains__(self, tool: object) -> bool:
        return tool in self._by_tool


default_registry = ProgressRegistry({"exec": ExecAccumulator()})
"""The registry projections use unless given another."""


def register_accumulator(tool: str, accumulator: Accumulator) -> None:
    """Register ``accumulator`` for ``tool`` in the process-wide `default_registry`."""
    default_registry.register(tool, accumulator)

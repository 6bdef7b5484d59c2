"""The REPL harness's words to the model: the system prompt, code extraction, and the feedback
after each execution (upstream's 2026-03-04 design: exactly one code block per turn, feedback as
tagged text)."""

from __future__ import annotations

import json
import re
from typing import Any, Final

from convograph.harness.sandbox import ExecResult, SandboxLimits

__all__ = ["extract_code", "feedback", "no_single_block", "system_prompt"]

_FENCE: Final = re.compile(r"```[ \t]*(?:python|py|repl)[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)

RESTARTED: Final = (
    "<sandbox_restarted>The interpreter was stopped and started again: every variable you defined "
    "is gone. `context`, `llm_query`, `llm_query_batched`, `FINAL` and `FINAL_VAR` are there again."
    "</sandbox_restarted>"
)


def extract_code(text: str) -> list[str]:
    """The ```python (or ```py, ```repl) fenced blocks of ``text``, in order."""
    return [match.group(1) for match in _FENCE.finditer(text)]


def no_single_block(count: int) -> str:
    """The error for a turn with ``count`` code blocks (not exactly one)."""
    if count == 0:
        return "Response contained no code block. Expected exactly one ```python block per turn."
    return f"Response contained {count} code blocks. Expected exactly one ```python block per turn."


def feedback(result: ExecResult, iteration: int) -> str:
    """What the model reads after an execution."""
    truncated = ' truncated="true"' if result.truncated else ""
    shown = result.output.rstrip("\n") or "(no output)"
    parts = [f'<repl_output iteration="{iteration}"{truncated}>\n{shown}\n</repl_output>']
    if result.error is not None:
        parts.append(f"<error>\n{result.error}\n</error>")
    if result.restarted:
        parts.append(RESTARTED)
    return "\n".join(parts)


def _describe(context: Any, prefix_chars: int) -> str:
    if context is None:
        return "`context` is None (the task is in the user message)."
    text = context if isinstance(context, str) else json.dumps(context, ensure_ascii=False, default=str)
    prefix = text[:prefix_chars]
    more = "…" if len(text) > prefix_chars else ""
    return (
        f"`context` is a {type(context).__name__} of {len(text)} characters"
        f"{' (as JSON)' if not isinstance(context, str) else ''}. It begins:\n{prefix}{more}"
    )


def system_prompt(context: Any, limits: SandboxLimits, *, extra: str | None, prefix_chars: int = 200) -> str:
    """The REPL system prompt: the environment, the rules, and metadata about ``context`` (never
    the context itself: the model reads it through code)."""
    network = "has network access" if limits.allow_network else "has no network access"
    prompt = f"""You solve the task by writing Python code that runs in a persistent REPL.

Each of your replies contains exactly one fenced code block (```python ... ```). It is executed;
you then see what it printed (at most {limits.max_output} characters: print summaries, not whole
documents) and any error. Variables persist between replies.

Available in the REPL:
- `context`: the data for the task. {_describe(context, prefix_chars)}
- `llm_query(prompt: str) -> str`: ask a language model (useful on chunks of `context`);
  `llm_query_batched(prompts: list[str]) -> list[str]` asks several at once.
- `FINAL(answer)`: end with `answer` as the final answer (as text). `FINAL_VAR(name)`: end with the
  value of the variable `name`.

Limits: each execution may take {limits.timeout:g} seconds; the interpreter {network}. If it
crashes or runs out of time it is restarted and your variables are lost.

Work step by step: look at the context, compute, check, then call FINAL."""
    return f"{prompt}\n\n{extra}" if extra else prompt

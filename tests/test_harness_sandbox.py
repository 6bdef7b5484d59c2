"""The REPL sandbox: a real child interpreter with limits (time, memory, output, network)."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest

from convograph.harness import ExecResult, Sandbox, SandboxLimits
from convograph.harness.sandbox import Stream, network_namespace_available


class Recorder:
    def __init__(self) -> None:
        self.chunks: list[tuple[Stream, str]] = []
        self.prompts: list[str] = []

    async def output(self, stream: Stream, chunk: str) -> None:
        self.chunks.append((stream, chunk))

    async def query(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if prompt == "fail":
            raise RuntimeError("the model is down")
        return prompt.upper()


async def run(sandbox: Sandbox, code: str, recorder: Recorder | None = None) -> ExecResult:
    recorder = recorder or Recorder()
    return await sandbox.execute(code, on_output=recorder.output, on_query=recorder.query)


@pytest.fixture
async def sandbox() -> Sandbox:
    box = Sandbox(SandboxLimits(timeout=5, memory_bytes=512 * 1024**2, max_output=100), context={"n": 3})
    yield box  # type: ignore[misc]
    await box.close()


async def test_a_persistent_scope_with_repl_echo_and_live_output(sandbox: Sandbox) -> None:
    recorder = Recorder()
    first = await run(sandbox, "x = context['n']\nprint('hello')\nx * 2", recorder)
    assert (first.output, first.error, first.final, first.restarted) == ("hello\n6\n", None, None, False)
    assert recorder.chunks == [("stdout", "hello\n"), ("stdout", "6\n")]
    second = await run(sandbox, "import sys\nprint('careful', file=sys.stderr)\nx + 1")
    assert second.output == "careful\n4\n"


async def test_errors_come_back_as_a_traceback_of_the_code(sandbox: Sandbox) -> None:
    result = await run(sandbox, "def f():\n    return 1 / 0\nf()")
    assert result.error is not None
    assert result.error.startswith('Traceback (most recent call last):\n  File "<repl>", line 3')
    assert result.error.endswith("ZeroDivisionError: division by zero")
    assert "sandbox_child" not in result.error
    assert (await run(sandbox, "exit(2)")).error.endswith("SystemExit: 2")  # type: ignore[union-attr]
    assert (await run(sandbox, "1 +")).error is not None  # a syntax error
    assert (await run(sandbox, "'still alive'")).output == "'still alive'\n"


async def test_final_and_final_var_stop_the_code(sandbox: Sandbox) -> None:
    result = await run(sandbox, "print('before')\nFINAL(42)\nprint('after')")
    assert (result.output, result.final) == ("before\n", "42")
    answer = await run(sandbox, "answer = {'a': 1}\nFINAL_VAR('answer')")
    assert answer.final == "{'a': 1}"
    missing = await run(sandbox, "FINAL_VAR('nope')")
    assert missing.final is None
    assert "NameError: FINAL_VAR: no variable named 'nope'" in (missing.error or "")
    caught = await run(sandbox, "try:\n    FINAL('x')\nexcept Exception:\n    print('caught')")
    assert caught.final == "x"  # FINAL is not an Exception the code can swallow


async def test_llm_query_asks_the_parent(sandbox: Sandbox) -> None:
    recorder = Recorder()
    result = await run(sandbox, "print(llm_query('abc'))\nprint(llm_query_batched(['x', 'y']))", recorder)
    assert result.output == "ABC\n['X', 'Y']\n"
    assert recorder.prompts == ["abc", "x", "y"]
    failed = await run(sandbox, "llm_query('fail')")
    assert "RuntimeError: llm_query failed: RuntimeError: the model is down" in (failed.error or "")


async def test_a_timeout_kills_the_interpreter_and_the_next_run_starts_fresh() -> None:
    async with Sandbox(SandboxLimits(timeout=0.5)) as box:
        await run(box, "x = 1")
        timed_out = await run(box, "while True:\n    pass")
        assert timed_out.error == "TimeoutError: the execution took longer than 0.5 s and was killed"
        assert timed_out.restarted
        fresh = await run(box, "x")
        assert "NameError: name 'x' is not defined" in (fresh.error or "")
        assert not fresh.restarted


async def test_a_crash_is_an_error_and_a_restart(sandbox: Sandbox) -> None:
    crashed = await run(sandbox, "import os\nos._exit(3)")
    assert crashed.error == "the interpreter process died (exit status 3)"
    assert crashed.restarted
    assert (await run(sandbox, "context")).output == "{'n': 3}\n"  # the context is loaded again


async def test_the_memory_limit(sandbox: Sandbox) -> None:
    result = await run(sandbox, "block = bytearray(1024 ** 3)")
    assert result.error == "MemoryError: the code went over the sandbox's memory limit"
    if sandbox.isolation == "network namespace" or os.geteuid() != 0:  # else root may raise it back
        raised = await run(sandbox, "import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))")
        assert "ValueError" in (raised.error or "")


async def test_output_is_cut_for_the_model_and_a_flood_is_killed() -> None:
    limits = SandboxLimits(max_output=100, hard_output_limit=50_000, timeout=10)
    async with Sandbox(limits) as box:
        recorder = Recorder()
        long = await run(box, "print('y' * 1000)", recorder)
        assert (len(long.output), long.truncated) == (100, True)
        assert sum(len(chunk) for _, chunk in recorder.chunks) == 100
        flood = await run(box, "while True:\n    print('z' * 1000)")
        assert flood.error == "the code wrote more than 50000 characters and was killed"
        assert flood.restarted


async def test_the_network_is_blocked_unless_allowed(sandbox: Sandbox) -> None:
    refused = await run(sandbox, "import socket\nsocket.create_connection(('127.0.0.1', 9))")
    assert "PermissionError: network access is disabled in this sandbox" in (refused.error or "")
    if network_namespace_available() and shutil.which("curl"):
        assert sandbox.isolation == "network namespace"
        code = "import subprocess\nprint(subprocess.run(['curl', '-sS', '-m', '3', 'http://1.1.1.1'], capture_output=True).returncode)"
        assert (await run(sandbox, code)).output.strip() != "0"  # a subprocess cannot reach out either
    async with Sandbox(SandboxLimits(allow_network=True)) as open_box:
        allowed = await run(open_box, "import socket\ns = socket.socket()\ns.close()\nprint('ok')")
        assert allowed.output == "ok\n"
        assert open_box.isolation == "none"


async def test_the_child_gets_no_secrets_and_no_stdin(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    result = await run(sandbox, "import os\nprint(sorted(os.environ))\ninput()")
    assert "OPENAI_API_KEY" not in result.output
    assert "EOFError" in (result.error or "")
    assert (
        await run(sandbox, "import os\nos.getcwd().startswith('/tmp') or os.getcwd()")
    ).output.strip() != "False"


async def test_subprocess_output_reaches_the_output(sandbox: Sandbox) -> None:
    result = await run(sandbox, "import os\nos.system('echo from-a-shell')")
    assert "from-a-shell\n" in result.output


async def test_close_kills_the_process() -> None:
    box = Sandbox()
    await run(box, "import os\npid = os.getpid()")
    pid_text = (await run(box, "pid")).output.strip()
    await box.close()
    await asyncio.sleep(0.05)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_text), 0)

"""Permissions: "always allow" rules (upstream's derivation) and their use by the agent loop."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from convograph.events import Event, Relay, RelayResolved, ToolCall
from convograph.harness import Agent, Decision, LogPort, tool
from convograph.harness.permissions import derive_rule, granted, rule_matches
from convograph.testing import MemoryEventLog
from convograph.testing.providers import ScriptedCall, ScriptedProvider, ScriptedTurn


def test_a_value_with_a_space_grants_its_first_word_and_any_rest() -> None:
    assert derive_rule({"command": "cat /tmp/x"}) == {"command": "cat **"}
    assert derive_rule({"path": "/tmp/x", "n": 3}) == {"path": "/tmp/x", "n": "3"}
    rule = derive_rule({"command": "cat /tmp/x"})
    assert rule_matches(rule, {"command": "cat /etc/hosts"})
    assert rule_matches(rule, {"command": "cat a b c"})
    assert not rule_matches(rule, {"command": "rm -rf /"})
    assert not rule_matches(rule, {"command": "cat"})  # the first word alone is another command
    assert not rule_matches(rule, {"command": "catalog x"})
    assert not rule_matches(rule, {"command": "cat x", "sudo": True})  # other names: asked again
    assert not rule_matches({"path": "/tmp/x"}, {"path": "/tmp/y"})


def test_the_first_matching_grant_of_the_tool_is_found() -> None:
    grants = [
        Relay(
            run_id="a", id="r1", kind="permission", tool_call_id="a/c1", tool="exec", params={"cmd": "ls -la"}
        ),
        Relay(
            run_id="a",
            id="r2",
            kind="permission",
            tool_call_id="a/c2",
            tool="write",
            params={"path": "a.txt"},
        ),
    ]
    assert granted(grants, "exec", {"cmd": "ls /"}) is grants[0]
    assert granted(grants, "write", {"path": "a.txt"}) is grants[1]
    assert granted(grants, "write", {"path": "b.txt"}) is None
    assert granted(grants, "exec", {"path": "a.txt"}) is None


@tool(policy="ask")
def shell(cmd: str) -> str:
    """Run a shell command."""
    return f"ran {cmd}"


def _calls(*commands: str) -> ScriptedTurn:
    return ScriptedTurn(
        tool_calls=[ScriptedCall("shell", {"cmd": c}, id=f"c{n}") for n, c in enumerate(commands)]
    )


async def events_of(port: LogPort) -> list[Event]:
    return [stored.event for stored in await port._log.read(port.conversation_id)]  # type: ignore[attr-defined]


@pytest.fixture
async def port() -> AsyncIterator[LogPort]:
    async with LogPort(MemoryEventLog(), "always") as opened:
        yield opened


async def test_an_always_approval_stands_for_later_matching_calls(port: LogPort) -> None:
    """The first ``cat`` is asked and approved with always; later ``cat`` calls (this run, and
    another agent's run on the conversation) run without a relay; an ``rm`` is asked again."""
    asked: list[dict[str, object]] = []

    async def decide(relay: Relay) -> Decision:
        asked.append(relay.params)
        return Decision(str(relay.params["cmd"]).startswith("cat"), always=True)

    provider = ScriptedProvider(
        [_calls("cat a.txt"), _calls("cat b.txt", "rm -rf /"), ScriptedTurn(text="ok")]
    )
    await Agent(provider, model="m", tools=[shell], ask=decide).run(port, "look")
    assert asked == [{"cmd": "cat a.txt"}, {"cmd": "rm -rf /"}]
    events = await events_of(port)
    decisions = [e for e in events if isinstance(e, RelayResolved)]
    assert [(d.approved, d.always) for d in decisions] == [
        (True, True),
        (False, False),
    ]  # a denial never stands

    second = ScriptedProvider([_calls("cat c.txt"), ScriptedTurn(text="ok")])
    await Agent(second, model="m", tools=[shell], ask=decide).run(port, "again")
    assert asked == [{"cmd": "cat a.txt"}, {"cmd": "rm -rf /"}]  # not asked: the grant is in the log
    events = await events_of(port)
    ran = [e.input for e in events if isinstance(e, ToolCall)]
    assert ran == [{"cmd": "cat a.txt"}, {"cmd": "cat b.txt"}, {"cmd": "cat c.txt"}]


def _same_folder(granted: object, asked: object) -> bool:
    """A file tool's own rule: an always-allowed write approves later writes in the same folder."""
    assert isinstance(granted, dict)
    assert isinstance(asked, dict)
    folder = str(granted["path"]).rsplit("/", 1)[0] + "/"
    return set(asked) == {"path"} and str(asked["path"]).startswith(folder) and ".." not in str(asked["path"])


@tool(policy="ask", always_allows=_same_folder)
def write(path: str) -> str:
    """Write a file."""
    return f"wrote {path}"


@tool(policy="ask", always_allows=lambda granted, asked: 1 / 0 > 0)
def broken(path: str) -> str:
    """A tool whose rule fails."""
    return f"ran {path}"


def _writes(tool_name: str, *paths: str) -> ScriptedTurn:
    return ScriptedTurn(
        tool_calls=[ScriptedCall(tool_name, {"path": p}, id=f"w{n}") for n, p in enumerate(paths)]
    )


async def test_a_tool_gives_its_own_always_allow_rule(port: LogPort) -> None:
    """``always_allows`` replaces the derived rule (upstream's derivePermission): a grant for
    ``/tmp/out/a.txt`` approves ``/tmp/out/b.txt`` (which the derived rule, an exact value, would
    not) and not ``/etc/passwd``."""
    asked: list[object] = []

    async def decide(relay: Relay) -> Decision:
        asked.append((relay.params or {})["path"])
        return Decision(True, always=True)

    provider = ScriptedProvider(
        [
            _writes("write", "/tmp/out/a.txt"),
            _writes("write", "/tmp/out/b.txt", "/etc/passwd"),
            ScriptedTurn(text="ok"),
        ]
    )
    await Agent(provider, model="m", tools=[write], ask=decide).run(port, "write")
    assert asked == ["/tmp/out/a.txt", "/etc/passwd"]
    assert granted([], "write", {"path": "x"}, _same_folder) is None


async def test_a_failing_always_allow_rule_asks_instead(
    port: LogPort, caplog: pytest.LogCaptureFixture
) -> None:
    asked: list[object] = []

    async def decide(relay: Relay) -> Decision:
        asked.append((relay.params or {})["path"])
        return Decision(True, always=True)

    provider = ScriptedProvider([_writes("broken", "a"), _writes("broken", "a"), ScriptedTurn(text="ok")])
    await Agent(provider, model="m", tools=[broken], ask=decide).run(port, "go")
    assert asked == ["a", "a"]  # the rule raised: asked again rather than approved
    assert "always_allows rule failed" in caplog.text


def test_always_allows_must_be_a_function() -> None:
    with pytest.raises(TypeError, match="always_allows must be a function"):
        tool(policy="ask", always_allows="cat **")  # type: ignore[call-overload]

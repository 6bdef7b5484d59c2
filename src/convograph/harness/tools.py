"""Tools: typed Python functions the agent harness offers to the model.

``@tool`` turns a function (sync or async) into a `Tool`: its name, its description (the
docstring's summary), and the JSON schema of its arguments derived from the signature: each
parameter's annotation gives its type (``str``, ``int``, ``float``, ``bool``, ``list[...]``,
``dict[str, ...]``, ``Literal[...]``, ``X | None``, enums, ``TypedDict``, dataclasses, msgspec
``Struct`` s, or pydantic models), its default makes it optional, and the docstring's ``Args:``
section (Google style) or ``:param name:`` lines describe it. A parameter annotated
`ToolContext` is not an argument: the harness passes the call's context there.

Arguments from the model are checked against the same types before the call (`Tool.convert`), so
a wrong type is a clear error result naming the field, never a call with bad data.

What a tool returns becomes its ``tool_result`` output ``{context, result}`` (seed 003,
`to_output`): a `ToolOutput` as given; a string as both; anything else as ``result`` (plain data)
with its compact JSON as ``context``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import json
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args, get_origin, overload

import msgspec

from convograph.harness.base import ToolSpec

if TYPE_CHECKING:
    from convograph.harness.context import ToolContext

__all__ = ["AlwaysAllows", "Policy", "Tool", "ToolArgumentError", "ToolOutput", "to_output", "tool"]

Policy = Literal["allow", "deny", "ask"]
"""Permission policy of a tool: run it, refuse it, or ask a human through a ``relay``."""
AlwaysAllows = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]
"""``(granted parameters, asked parameters) -> bool``: a tool's own "Always allow" rule."""


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's result as seed 003 shapes it: ``context`` is what the model reads, ``result`` the
    structured value (for programs and the viewer)."""

    context: str
    result: Any = None


class ToolArgumentError(ValueError):
    """The model's arguments do not fit the tool's signature (the message names the field)."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model can call. Build one with `tool`."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    """JSON schema of the arguments object."""
    function: Callable[..., Any]
    policy: Policy = "allow"
    timeout: float | None = None
    """Seconds a call may take (None: the agent's default)."""
    context_parameter: str | None = None
    """Name of the parameter that receives the `ToolContext`, if any."""
    always_allows: AlwaysAllows | None = None
    """How an "Always allow" of this tool generalises (upstream's ``derivePermission``):
    ``always_allows(granted, asked)``, whether the parameters of a call approved with "always"
    approve a later call's; None: `convograph.harness.permissions.derive_rule`'s rule."""
    _arguments: Any = field(default=None, repr=False, compare=False)
    """The type the arguments are converted to (a msgspec Struct or a pydantic model)."""

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)

    def convert(self, arguments: Any) -> dict[str, Any]:
        """The keyword arguments for ``arguments`` (the model's JSON object), checked and converted
        to the annotated types. Raises `ToolArgumentError` naming the problem."""
        if not isinstance(arguments, Mapping):
            raise ToolArgumentError(f"arguments must be a JSON object, got {type(arguments).__name__}")
        kind = self._arguments
        if hasattr(kind, "model_validate"):  # pydantic
            import pydantic

            try:
                model = kind.model_validate(dict(arguments))
            except pydantic.ValidationError as exc:
                raise ToolArgumentError(_pydantic_message(exc)) from None
            return {name: getattr(model, name) for name in type(model).model_fields}
        try:
            value = msgspec.convert(dict(arguments), kind, strict=False)
        except msgspec.ValidationError as exc:
            raise ToolArgumentError(str(exc)) from None
        return {name: getattr(value, name) for name in kind.__struct_fields__}

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> Any:
        """Run the function with converted ``arguments`` (a sync function runs in a worker thread, so
        it never blocks the event loop; a timed-out sync call keeps running to its end there)."""
        kwargs = self.convert(arguments)
        if self.context_parameter is not None:
            kwargs[self.context_parameter] = context
        if inspect.iscoroutinefunction(self.function):
            return await self.function(**kwargs)
        result = await asyncio.to_thread(self.function, **kwargs)
        if inspect.isawaitable(result):
            return await result
        return result


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    policy: Policy = "allow",
    timeout: float | None = None,
    always_allows: AlwaysAllows | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    policy: Policy = "allow",
    timeout: float | None = None,
    always_allows: AlwaysAllows | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a `Tool` of a function: ``@tool`` or ``@tool(policy="ask", timeout=30)``;
    ``always_allows``: the tool's own "Always allow" rule (`Tool.always_allows`).

    Raises `TypeError` naming the parameter when a signature cannot become a schema (``*args``,
    a parameter without annotation, a type with no JSON form)."""
    if always_allows is not None and not callable(always_allows):
        raise TypeError("always_allows must be a function (granted parameters, asked parameters) -> bool")

    def build(fn: Callable[..., Any]) -> Tool:
        built = _build(fn, name=name, description=description, policy=policy, timeout=timeout)
        return built if always_allows is None else dataclasses.replace(built, always_allows=always_allows)

    return build if function is None else build(function)


def _build(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    policy: Policy,
    timeout: float | None,
) -> Tool:
    from convograph.harness.context import ToolContext

    tool_name = name or fn.__name__
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tool_name):
        raise TypeError(f"tool name {tool_name!r} must match [A-Za-z0-9_-]{{1,64}} (what the APIs accept)")
    if policy not in ("allow", "deny", "ask"):
        raise TypeError(f"tool {tool_name!r}: policy must be 'allow', 'deny' or 'ask', got {policy!r}")
    summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: list[tuple[str, Any, Any]] = []
    context_parameter: str | None = None
    for param in inspect.signature(fn).parameters.values():
        annotation = hints.get(param.name, inspect.Parameter.empty)
        if annotation is ToolContext:
            context_parameter = param.name
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(
                f"tool {tool_name!r}: parameter {param.name!r} must be a plain or keyword parameter"
            )
        if annotation is inspect.Parameter.empty:
            raise TypeError(f"tool {tool_name!r}: parameter {param.name!r} needs a type annotation")
        doc = arg_docs.get(param.name)
        if doc:
            annotation = Annotated[annotation, msgspec.Meta(description=doc)]
        default = msgspec.NODEFAULT if param.default is inspect.Parameter.empty else param.default
        fields.append((param.name, annotation, default))
    arguments, schema = _arguments_type(tool_name, fields)
    return Tool(
        name=tool_name,
        description=description if description is not None else summary,
        parameters=schema,
        function=fn,
        policy=policy,
        timeout=timeout,
        context_parameter=context_parameter,
        _arguments=arguments,
    )


def _arguments_type(tool_name: str, fields: list[tuple[str, Any, Any]]) -> tuple[Any, dict[str, Any]]:
    """The type arguments convert to, and its JSON schema (an object schema, ``$defs`` inline)."""
    if any(_mentions_pydantic(annotation) for _, annotation, _ in fields):
        return _pydantic_arguments(tool_name, fields)
    struct = msgspec.defstruct(
        f"{tool_name}_arguments",
        [(n, a) if d is msgspec.NODEFAULT else (n, a, _default(d)) for n, a, d in fields],
        kw_only=True,
        forbid_unknown_fields=True,
    )
    try:
        (_,), components = msgspec.json.schema_components([struct], ref_template="#/$defs/{name}")
    except TypeError as exc:
        reason = str(exc).strip().splitlines()[-1]
        raise TypeError(f"tool {tool_name!r}: a parameter type has no JSON schema ({reason})") from None
    schema = dict(components.pop(struct.__name__))
    schema.pop("title", None)
    schema.pop("additionalProperties", None)
    schema.setdefault("properties", {})
    if components:
        schema["$defs"] = components
    return struct, schema


def _default(value: Any) -> Any:
    if isinstance(value, list | dict | set):
        return msgspec.field(default_factory=lambda: type(value)(value))
    return value


def _mentions_pydantic(annotation: Any) -> bool:
    if isinstance(annotation, type) and hasattr(annotation, "model_json_schema"):
        return True
    return any(_mentions_pydantic(arg) for arg in get_args(annotation) if arg is not None)


def _pydantic_arguments(tool_name: str, fields: list[tuple[str, Any, Any]]) -> tuple[Any, dict[str, Any]]:
    import pydantic

    definitions: dict[str, Any] = {}
    for name, annotation, default in fields:
        if get_origin(annotation) is Annotated:  # msgspec.Meta -> pydantic Field description
            base, *extras = get_args(annotation)
            doc = next((m.description for m in extras if isinstance(m, msgspec.Meta)), None)
            annotation = Annotated[base, pydantic.Field(description=doc)]
        definitions[name] = (annotation, ... if default is msgspec.NODEFAULT else default)
    model = pydantic.create_model(
        f"{tool_name}_arguments", __config__=pydantic.ConfigDict(extra="forbid"), **definitions
    )
    schema = dict(model.model_json_schema(ref_template="#/$defs/{model}"))
    schema.pop("title", None)
    schema.pop("additionalProperties", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return model, schema


def _pydantic_message(exc: Any) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ()))
        parts.append(f"{error.get('msg')} - at `$.{where}`" if where else str(error.get("msg")))
    return "; ".join(parts)


_ARGS_HEADER = re.compile(r"^(Args|Arguments|Parameters):\s*$")
_SECTION = re.compile(r"^[A-Z][A-Za-z ]*:\s*$")
_SPHINX_PARAM = re.compile(r"^:param\s+(?:\S+\s+)?(\w+):\s*(.*)$")
_ENTRY = re.compile(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The summary (the text before the first section) and each argument's description, from a
    Google ``Args:`` section or Sphinx ``:param x:`` lines. ``doc`` is `inspect.getdoc`'s text."""
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    entry_indent: int | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        sphinx = _SPHINX_PARAM.match(stripped)
        if sphinx:
            section, current = "sphinx", sphinx.group(1)
            args[current] = sphinx.group(2)
            continue
        if _ARGS_HEADER.match(stripped):
            section, current, entry_indent = "args", None, None
            continue
        if _SECTION.match(stripped) or stripped.startswith(":"):
            section, current = "other", None
            continue
        if section is None:
            summary.append(line)
            continue
        if not stripped or section == "other":
            continue
        indent = len(line) - len(line.lstrip())
        entry = _ENTRY.match(stripped)
        if section == "args" and entry and (entry_indent is None or indent <= entry_indent):
            entry_indent = indent
            current = entry.group(1)
            args[current] = entry.group(2)
        elif current is not None:
            args[current] = f"{args[current]} {stripped}".strip()
    return "\n".join(summary).strip(), args


def to_output(value: Any) -> dict[str, Any]:
    """A tool's return value as its ``tool_result`` output ``{"context", "result"}``."""
    if isinstance(value, ToolOutput):
        return {"context": value.context, "result": _plain(value.result)}
    if isinstance(value, str):
        return {"context": value, "result": value}
    if value is None:
        return {"context": "", "result": None}
    plain = _plain(value)
    return {"context": json.dumps(plain, ensure_ascii=False, separators=(",", ":")), "result": plain}


def _plain(value: Any) -> Any:
    """``value`` as plain JSON data (Structs, dataclasses, enums, pydantic models, ...)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, enum.Enum):
        return value.value
    return msgspec.to_builtins(value, enc_hook=str)

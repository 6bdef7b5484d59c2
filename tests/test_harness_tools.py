"""Tools: JSON schema from signatures and docstrings, argument checking, outputs."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Literal, TypedDict

import msgspec
import pydantic
import pytest

from convograph.harness import Tool, ToolArgumentError, ToolContext, ToolOutput, tool
from convograph.harness.tools import to_output


class Address(TypedDict):
    street: str
    zip: int


class Point(msgspec.Struct):
    x: float
    y: float


@dataclasses.dataclass
class Window:
    start: int
    end: int


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Filter(pydantic.BaseModel):
    field: str
    values: list[str]


def test_schema_from_a_google_docstring() -> None:
    @tool
    def search(query: str, limit: int = 10, exact: bool = False, unit: Literal["km", "mi"] = "km") -> str:
        """Search the index.

        Longer explanation on a second paragraph.

        Args:
            query: What to look for,
                over two lines.
            limit (int): At most this many hits.
            exact: Match whole words only.

        Returns:
            The hits.
        """
        return query

    assert search.name == "search"
    assert search.description == "Search the index.\n\nLonger explanation on a second paragraph."
    assert search.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for, over two lines."},
            "limit": {"type": "integer", "default": 10, "description": "At most this many hits."},
            "exact": {"type": "boolean", "default": False, "description": "Match whole words only."},
            "unit": {"enum": ["km", "mi"], "default": "km"},
        },
        "required": ["query"],
    }
    assert search.spec.name == "search"


def test_schema_from_sphinx_params_and_nested_types() -> None:
    @tool(name="ship", description="Ship a parcel.")
    async def ship_parcel(
        to: Address, sizes: list[float], where: Point, window: Window | None = None, color: Color = Color.RED
    ) -> None:
        """Ignored summary.

        :param to: destination address
        :param sizes: box sizes in cm
        """

    params = ship_parcel.parameters
    assert ship_parcel.name == "ship"
    assert ship_parcel.description == "Ship a parcel."
    assert params["required"] == ["to", "sizes", "where"]
    assert params["properties"]["to"] == {"$ref": "#/$defs/Address", "description": "destination address"}
    assert params["properties"]["sizes"] == {
        "type": "array",
        "items": {"type": "number"},
        "description": "box sizes in cm",
    }
    assert set(params["$defs"]) == {"Address", "Point", "Window", "Color"}
    assert params["$defs"]["Address"]["properties"]["zip"] == {"type": "integer"}


def test_the_context_parameter_is_not_an_argument() -> None:
    @tool
    async def fetch(url: str, ctx: ToolContext) -> str:
        """Fetch."""
        return url

    assert list(fetch.parameters["properties"]) == ["url"]
    assert fetch.context_parameter == "ctx"


def test_arguments_are_converted_and_checked() -> None:
    @tool
    def plan(where: Point, when: Window, count: int = 1, tags: list[str] | None = None) -> None:
        """Plan."""

    kwargs = plan.convert({"where": {"x": 1, "y": 2.5}, "when": {"start": 1, "end": 2}})
    assert kwargs == {"where": Point(1.0, 2.5), "when": Window(1, 2), "count": 1, "tags": None}
    with pytest.raises(ToolArgumentError, match=r"Expected `int`, got `str` - at `\$.count`"):
        plan.convert({"where": {"x": 1, "y": 2}, "when": {"start": 1, "end": 2}, "count": "many"})
    with pytest.raises(ToolArgumentError, match="missing required field `where`"):
        plan.convert({})
    with pytest.raises(ToolArgumentError, match="unknown field `colour`"):
        plan.convert({"where": {"x": 1, "y": 2}, "when": {"start": 1, "end": 2}, "colour": "red"})
    with pytest.raises(ToolArgumentError, match="must be a JSON object, got list"):
        plan.convert([1, 2])


def test_mutable_defaults_are_not_shared() -> None:
    @tool
    def collect(items: list[str] = []) -> list[str]:  # noqa: B006 - the point of the test
        """Collect."""
        return items

    first = collect.convert({})["items"]
    first.append("x")
    assert collect.convert({})["items"] == []


def test_pydantic_models_as_parameters() -> None:
    @tool
    def query(flt: Filter, limit: int = 5) -> str:
        """Query.

        Args:
            flt: The filter.
        """
        return flt.field

    props = query.parameters["properties"]
    assert props["flt"]["description"] == "The filter."
    assert query.parameters["required"] == ["flt"]
    assert "Filter" in query.parameters["$defs"]
    kwargs = query.convert({"flt": {"field": "a", "values": ["x"]}})
    assert kwargs == {"flt": Filter(field="a", values=["x"]), "limit": 5}
    with pytest.raises(ToolArgumentError, match=r"flt\.values"):
        query.convert({"flt": {"field": "a"}})


async def test_sync_and_async_functions_are_called() -> None:
    @tool
    def double(n: int) -> int:
        """Double."""
        return 2 * n

    @tool
    async def triple(n: int) -> int:
        """Triple."""
        return 3 * n

    context: Any = None
    assert await double.call({"n": 4}, context) == 8
    assert await triple.call({"n": 4}, context) == 12


def test_bad_tool_definitions_name_the_problem() -> None:
    def no_annotation(x) -> None:  # type: ignore[no-untyped-def]
        """x"""

    def star(*args: int) -> None:
        """x"""

    with pytest.raises(TypeError, match="parameter 'x' needs a type annotation"):
        tool(no_annotation)
    with pytest.raises(TypeError, match="parameter 'args' must be a plain or keyword parameter"):
        tool(star)
    with pytest.raises(TypeError, match=r"must match \[A-Za-z0-9_-\]"):
        tool(name="has space")(star)
    with pytest.raises(TypeError, match="policy must be"):
        tool(policy="sometimes")(star)  # type: ignore[arg-type]

    def anything(x: Any) -> None:
        """x"""

    def opaque(x: complex) -> None:
        """x"""

    assert isinstance(tool(anything), Tool)  # `Any` is "any JSON value"
    with pytest.raises(TypeError, match=r"has no JSON schema \(type <class 'complex'> is not supported\)"):
        tool(opaque)


def test_outputs_follow_the_seed_shape() -> None:
    assert to_output("hi") == {"context": "hi", "result": "hi"}
    assert to_output(None) == {"context": "", "result": None}
    assert to_output({"a": [1, 2]}) == {"context": '{"a":[1,2]}', "result": {"a": [1, 2]}}
    assert to_output(ToolOutput("summary", {"rows": 3})) == {"context": "summary", "result": {"rows": 3}}
    assert to_output(Point(1, 2)) == {"context": '{"x":1,"y":2}', "result": {"x": 1, "y": 2}}
    assert to_output(Filter(field="f", values=[])) == {
        "context": '{"field":"f","values":[]}',
        "result": {"field": "f", "values": []},
    }
    assert to_output(Color.BLUE) == {"context": '"blue"', "result": "blue"}

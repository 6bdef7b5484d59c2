"""The code's shape, checked: no function over 80 lines, no module over 600, no import cycle and
no module reaching up the data flow (producers -> events -> log -> reducers -> projections / graph
store -> API). What is over today is listed by name in `KNOWN`; an entry that is fixed must leave
the list (the test fails on a stale entry), and nothing new may join it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "convograph"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600

KNOWN_LONG_FUNCTIONS: set[str] = set()
KNOWN_LONG_MODULES: set[str] = set()
KNOWN_CYCLES: set[frozenset[str]] = set()
LAYERS = {
    # a package: the packages it must not import (they sit downstream of it)
    "convograph.events": ("server", "cli", "web", "store", "intelligence", "harness", "integrations"),
    "convograph.graph": ("server", "cli", "web", "store", "intelligence", "harness", "integrations"),
    "convograph.hypergraph": ("server", "cli", "web", "store", "intelligence", "harness", "integrations"),
    "convograph.projections": ("server", "cli", "web", "store", "intelligence", "harness", "integrations"),
    "convograph.store": ("server", "cli", "web", "harness", "integrations"),
    "convograph.harness": ("server", "cli", "web"),
    "convograph.integrations": ("server", "cli", "web"),
    "convograph.intelligence": ("server", "cli", "web", "harness"),
    "convograph.http": ("server", "cli", "web", "harness", "integrations", "intelligence"),
}
KNOWN_LAYER_BREAKS: set[str] = set()


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _runtime_imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Modules of the package that ``module`` imports when it runs (a lazy import in a function
    body counts; an ``if TYPE_CHECKING:`` import does not)."""
    tree = ast.parse(path.read_text())
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in known else base)
        elif isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
    return {target for target in targets if target in known and target != module}


def _cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative). O(V + E)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


def _import_graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _runtime_imports(name, path, known) for name, path in known.items()}


def test_no_function_is_over_80_lines() -> None:
    long: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for function in _functions(ast.parse(path.read_text())):
            if (function.end_lineno or function.lineno) - function.lineno + 1 > MAX_FUNCTION_LINES:
                long.add(f"{path.relative_to(SRC)}:{function.name}")
    assert long - KNOWN_LONG_FUNCTIONS == set(), "new functions over 80 lines"
    assert KNOWN_LONG_FUNCTIONS - long == set(), "fixed: remove them from KNOWN_LONG_FUNCTIONS"


def test_no_module_is_over_600_lines() -> None:
    big = {
        str(path.relative_to(SRC))
        for path in PACKAGE.rglob("*.py")
        if path.read_text().count("\n") > MAX_MODULE_LINES
    }
    assert big - KNOWN_LONG_MODULES == set(), "new modules over 600 lines"
    assert KNOWN_LONG_MODULES - big == set(), "fixed: remove them from KNOWN_LONG_MODULES"


def test_no_import_cycles() -> None:
    cycles = _cycles(_import_graph())
    assert cycles - KNOWN_CYCLES == set(), "new import cycles"
    assert KNOWN_CYCLES - cycles == set(), "fixed: remove them from KNOWN_CYCLES"


def test_no_module_reaches_up_the_data_flow() -> None:
    breaks: set[str] = set()
    for module, imports in _import_graph().items():
        for layer, downstream in LAYERS.items():
            if module == layer or module.startswith(layer + "."):
                forbidden = tuple(f"convograph.{name}" for name in downstream)
                breaks.update(
                    f"{module} -> {target}"
                    for target in imports
                    if any(target == f or target.startswith(f + ".") for f in forbidden)
                )
    assert breaks - KNOWN_LAYER_BREAKS == set(), "modules reaching up the data flow"
    assert KNOWN_LAYER_BREAKS - breaks == set(), "fixed: remove them from KNOWN_LAYER_BREAKS"


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {frozenset({"a", "b", "c"})}
    assert _cycles({"a": {"b"}, "b": set()}) == set()

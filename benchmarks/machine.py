"""A machine-speed reference printed beside benchmark results, so runs on different machines of
the same kind can be compared.

Machines of one kind run the same code at very different speeds (docs/benchmarks-history.md records 1.4-3x
between sessions, and 20-45 % drift within one session). `speed_reference` times a fixed pure-Python
workload shaped like the projections' and the planner's inner loops (list indexing and appends,
dict gets and sets, attribute reads, small string work) at the moment of the run: divide a figure by
it to compare runs made on different days. It is a calibration, not a target: the reference has no
meaning of its own.
"""

from __future__ import annotations

import time
from typing import Final

REFERENCE_ITEMS: Final = 200_000


class _Item:
    __slots__ = ("name", "parent", "run")

    def __init__(self, name: str, parent: int, run: str) -> None:
        self.name = name
        self.parent = parent
        self.run = run


def _workload(items: list[_Item]) -> int:
    depth = [0] * len(items)
    last: dict[str, int] = {}
    labels: list[str] = []
    append = labels.append
    total = 0
    for i, item in enumerate(items):
        parent = item.parent
        d = depth[parent] + 1 if parent >= 0 else 0
        depth[i] = d
        previous = last.get(item.run)
        if previous is not None and previous > total:
            total = previous
        last[item.run] = i
        append(item.name[:8].upper())
    return total + len(labels) + sum(depth)


def speed_reference(repeat: int = 5) -> float:
    """CPU milliseconds (best of ``repeat``) of the fixed reference workload on this machine now:
    `REFERENCE_ITEMS` items, ~0.3 s in all."""
    items = [_Item(f"tool_{i % 97}", i - 1 if i % 7 else -1, f"run{i // 23}") for i in range(REFERENCE_ITEMS)]
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        _workload(items)
        best = min(best, time.process_time() - start)
    return best * 1000


def describe() -> str:
    """One line for a benchmark header: the speed reference, and which of the modules listed in
    `convograph._native` run compiled (mypyc) in this process."""
    import convograph.projections  # noqa: F401  (imports every listed module)
    from convograph._native import compiled_modules_in_use

    modules = compiled_modules_in_use()
    compiled = [name for name, is_compiled in modules.items() if is_compiled]
    interpreted = [name for name, is_compiled in modules.items() if not is_compiled]
    return (
        f"speed reference {speed_reference():.1f} ms CPU (benchmarks/machine.py; lower is faster); "
        f"compiled: {', '.join(compiled) or 'none'}; interpreted: {', '.join(interpreted) or 'none'}"
    )


if __name__ == "__main__":
    print(describe())

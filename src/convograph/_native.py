"""Compiled modules: which modules may run compiled (mypyc), and where a checkout keeps them.

A few per-item hot paths (the DAG layout engine and its inputs) are plain, strictly typed Python
that `scripts/build-native` compiles with mypyc, the compiler that ships with mypy. The source is
the only implementation: the compiled module is the same code, and without it (no C compiler, or
``CONVOGRAPH_NATIVE=0``) the same module runs interpreted, with the same results (the golden and
DAG tests run both ways, see `scripts/test`).

A checkout keeps the built extensions apart from the sources, in ``src/convograph/.native/``, with
a manifest of the sources' SHA-256 and the interpreter's cache tag. A package whose modules are
listed calls `compiled_path` first thing in its ``__init__`` and puts the result in front of its
``__path__``, so the import system finds the extension before the ``.py``, only while the manifest
matches the sources byte for byte: a module edited since its build runs interpreted (with a
`RuntimeWarning` that names it) until the next build, never a stale compiled copy. O(size of the
listed sources) once per package import (a hash of ~60 kB).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = [
    "COMPILED_MODULES",
    "NATIVE_DIR",
    "NO_BUILD",
    "compiled_modules_in_use",
    "compiled_path",
    "source_digest",
    "stale_reason",
]

COMPILED_MODULES: Final = (
    "convograph.projections.dag",
    "convograph.projections.placement",
    "convograph.projections.feeder",
    "convograph.projections.feed",
    "convograph.projections.thread_updates",
    "convograph.projections.thread_views",
    "convograph.projections.exec_progress",
    "convograph.projections.dag_coordinates",
    "convograph.projections.dag_input",
    "convograph.projections.dag_labels",
    "convograph.projections.dag_lanes",
    "convograph.projections.dag_layering",
    "convograph.projections.dag_svg",
)
"""The modules `scripts/build-native` compiles. Each must define no msgspec Struct (or other class
with class keywords or a metaclass): mypyc builds native classes and drops those options."""

PACKAGE_DIR: Final = Path(__file__).resolve().parent
NATIVE_DIR: Final = PACKAGE_DIR / ".native"
"""Where a checkout's compiled modules live (git-ignored): ``<package path>/<module>.<ext>``."""
MANIFEST: Final = NATIVE_DIR / "manifest.json"
DISABLE_VARIABLE: Final = "CONVOGRAPH_NATIVE"
"""Set to ``0`` to run every module interpreted."""


def source_digest(module: str) -> str:
    """SHA-256 of a listed module's source file."""
    return hashlib.sha256(source_path(module).read_bytes()).hexdigest()


def source_path(module: str) -> Path:
    parts = module.split(".")
    if parts[0] != "convograph":
        raise ValueError(f"not a convograph module: {module!r}")
    return PACKAGE_DIR.joinpath(*parts[1:]).with_suffix(".py")


def build_tag() -> str:
    """What an extension is built for: the interpreter's cache tag and extension suffix."""
    return f"{sys.implementation.cache_tag} {sysconfig.get_config_var('EXT_SUFFIX')}"


NO_BUILD: Final = "no build"
"""`stale_reason` when there is no readable manifest (nothing was built, or it was removed)."""


def stale_reason(modules: Sequence[str], native_dir: Path = NATIVE_DIR) -> str | None:
    """Why the build in ``native_dir`` cannot serve ``modules``: None when its manifest matches
    their sources and this interpreter, `NO_BUILD` when there is no readable manifest, else what
    differs. O(size of the modules' sources)."""
    try:
        manifest = json.loads((native_dir / MANIFEST.name).read_text())
        built: dict[str, str] = manifest["modules"]
        tag = manifest["tag"]
        stale = [m for m in modules if built.get(m) != source_digest(m)]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return NO_BUILD
    if tag != build_tag():
        return f"built for {tag!r}, running {build_tag()!r}"
    return f"{stale} changed" if stale else None


def compiled_path(package: str, native_dir: Path = NATIVE_DIR) -> list[str]:
    """The directory to put in front of ``package``'s ``__path__``: ``[dir]`` when every listed
    module of the package has a built extension whose manifest entry (``native_dir /
    manifest.json``) matches its source, else ``[]`` (interpreted). Disabled by
    ``CONVOGRAPH_NATIVE=0``. Warns when a build exists but is stale."""
    if os.environ.get(DISABLE_VARIABLE, "1") == "0":
        return []
    modules = [m for m in COMPILED_MODULES if m.rpartition(".")[0] == package]
    if not modules:
        return []
    reason = stale_reason(modules, native_dir)
    if reason is None:
        return [str(native_dir.joinpath(*package.split(".")[1:]))]
    if reason != NO_BUILD:
        warnings.warn(
            f"convograph: compiled modules of {package} are stale ({reason}); running them "
            "interpreted (slower, same results). Rebuild: scripts/build-native",
            RuntimeWarning,
            stacklevel=2,
        )
    return []


def compiled_modules_in_use() -> dict[str, bool]:
    """Per listed module that is imported: whether it runs compiled (an extension module)."""
    suffixes = (".so", ".pyd")
    return {
        name: str(getattr(sys.modules[name], "__file__", "")).endswith(suffixes)
        for name in COMPILED_MODULES
        if name in sys.modules
    }

"""`convograph._native`: compiled modules are used only when fresh, and CI runs them compiled.

`scripts/test` runs this file, the golden digests and the DAG tests a second time with
``CONVOGRAPH_NATIVE=0``: the same tests pass compiled and interpreted.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from convograph import _native

PROJECTIONS = "convograph.projections"


def write_manifest(native_dir: Path, modules: dict[str, str], tag: str | None = None) -> None:
    native_dir.mkdir(parents=True, exist_ok=True)
    manifest = {"tag": tag if tag is not None else _native.build_tag(), "modules": modules}
    (native_dir / "manifest.json").write_text(json.dumps(manifest))


def fresh_digests() -> dict[str, str]:
    return {module: _native.source_digest(module) for module in _native.COMPILED_MODULES}


def test_a_fresh_build_goes_in_front_of_the_package_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(_native.DISABLE_VARIABLE, raising=False)
    write_manifest(tmp_path, fresh_digests())
    assert _native.compiled_path(PROJECTIONS, tmp_path) == [str(tmp_path / "projections")]


def test_no_build_means_interpreted_without_a_warning(
    tmp_path: Path, recwarn: pytest.WarningsRecorder
) -> None:
    assert _native.compiled_path(PROJECTIONS, tmp_path / "absent") == []
    assert not recwarn.list


def test_an_edited_source_is_never_run_from_its_stale_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(_native.DISABLE_VARIABLE, raising=False)
    digests = fresh_digests()
    digests["convograph.projections.dag"] = "0" * 64
    write_manifest(tmp_path, digests)
    with pytest.warns(RuntimeWarning, match=r"stale .*convograph\.projections\.dag.* scripts/build-native"):
        assert _native.compiled_path(PROJECTIONS, tmp_path) == []


def test_a_build_for_another_interpreter_is_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_native.DISABLE_VARIABLE, raising=False)
    write_manifest(tmp_path, fresh_digests(), tag="cpython-399 .cpython-399-x.so")
    with pytest.warns(RuntimeWarning, match="built for 'cpython-399"):
        assert _native.compiled_path(PROJECTIONS, tmp_path) == []


def test_an_unreadable_manifest_means_interpreted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_native.DISABLE_VARIABLE, raising=False)
    tmp_path.joinpath("manifest.json").write_text("{not json")
    assert _native.compiled_path(PROJECTIONS, tmp_path) == []


def test_the_switch_turns_a_fresh_build_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_manifest(tmp_path, fresh_digests())
    monkeypatch.setenv(_native.DISABLE_VARIABLE, "0")
    assert _native.compiled_path(PROJECTIONS, tmp_path) == []


def test_a_package_without_listed_modules_gets_nothing(tmp_path: Path) -> None:
    write_manifest(tmp_path, fresh_digests())
    assert _native.compiled_path("convograph.graph", tmp_path) == []


def test_source_paths_are_inside_the_package() -> None:
    for module in _native.COMPILED_MODULES:
        assert _native.source_path(module).is_file()
    with pytest.raises(ValueError, match="not a convograph module"):
        _native.source_path("os.path")


def test_the_listed_modules_run_as_the_build_and_the_switch_say() -> None:
    """Compiled exactly when this checkout's build is fresh and not switched off; in CI (where
    `scripts/bootstrap` builds) always compiled, unless the run switched it off."""
    import convograph.projections.dag  # noqa: F401  (every listed module is imported)

    switched_off = os.environ.get(_native.DISABLE_VARIABLE) == "0"
    manifest = _native.NATIVE_DIR / "manifest.json"
    fresh = manifest.is_file() and json.loads(manifest.read_text()) == {
        "tag": _native.build_tag(),
        "modules": fresh_digests(),
    }
    expected = fresh and not switched_off
    if os.environ.get("CI") == "true" and not switched_off:
        assert fresh, "CI: scripts/bootstrap should have built the compiled modules (scripts/build-native)"
    assert _native.compiled_modules_in_use() == dict.fromkeys(_native.COMPILED_MODULES, expected)
    for module in _native.COMPILED_MODULES:
        loaded_from = Path(str(sys.modules[module].__file__))
        assert (loaded_from.parent.parent == _native.NATIVE_DIR) is expected

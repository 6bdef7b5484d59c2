"""Compile `convograph._native.COMPILED_MODULES` with mypyc into ``src/convograph/.native/``.

Run by `scripts/bootstrap` (through `scripts/build-native`); does nothing when the manifest already
matches the sources and the interpreter. ``--force`` rebuilds anyway. Needs mypy (a dev
dependency), setuptools and a C compiler; without them it says so and exits 1, and the modules run
interpreted. The sources stay untouched: the C files and objects go to a temporary directory, and
only the extensions and the manifest (written last, each replaced atomically) land in the package.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

# `convograph._native` by its path: importing the package would import (and warn about) the very
# modules this script rebuilds.
_spec = importlib.util.spec_from_file_location(
    "convograph_native_settings", Path(__file__).resolve().parents[1] / "src" / "convograph" / "_native.py"
)
assert _spec is not None
assert _spec.loader is not None
_native = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_native)


def build() -> None:
    from mypyc.build import mypycify
    from setuptools import setup

    src = _native.PACKAGE_DIR.parent
    digests = {m: _native.source_digest(m) for m in _native.COMPILED_MODULES}
    paths = [str(_native.source_path(m).relative_to(src)) for m in _native.COMPILED_MODULES]
    with tempfile.TemporaryDirectory(prefix="convograph-native-") as tmp:
        work = Path(tmp)
        cwd = os.getcwd()
        os.chdir(src)  # mypyc names modules by their path from here
        try:
            # (mypy options may go with the paths: its cache goes to the temporary directory too)
            options = [f"--cache-dir={work / 'mypy-cache'}"]
            extensions = mypycify([*options, *paths], separate=True, target_dir=str(work / "c"))
            setup(
                name="convograph-native",
                ext_modules=extensions,
                script_args=[
                    "--quiet",
                    "build_ext",
                    "--build-lib",
                    str(work / "lib"),
                    "--build-temp",
                    str(work / "obj"),
                ],
            )
        finally:
            os.chdir(cwd)
        built = sorted((work / "lib").rglob("*" + str(sysconfig.get_config_var("EXT_SUFFIX"))))
        if not built:
            raise SystemExit("build-native: mypyc produced no extension")
        _native.NATIVE_DIR.mkdir(exist_ok=True)
        _native.MANIFEST.unlink(missing_ok=True)  # stale until the new manifest lands
        for extension in built:
            relative = extension.relative_to(work / "lib" / "convograph")
            target = _native.NATIVE_DIR / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            staged = target.with_name(target.name + ".tmp")
            shutil.copyfile(extension, staged)
            os.replace(staged, target)  # a new inode: a process that has the old one loaded keeps it
    manifest = {"tag": _native.build_tag(), "modules": digests}
    staged = _native.MANIFEST.with_name("manifest.json.tmp")
    staged.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(staged, _native.MANIFEST)


def main() -> None:
    if "--force" not in sys.argv[1:] and _native.stale_reason(_native.COMPILED_MODULES) is None:
        return
    print(f"build-native: compiling {', '.join(_native.COMPILED_MODULES)} with mypyc", file=sys.stderr)
    try:
        build()
    except (Exception, SystemExit) as error:  # no compiler, no mypyc: run interpreted, say so
        print(f"build-native: failed ({error}); those modules run interpreted", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()

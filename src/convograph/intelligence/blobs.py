"""Content-addressed blob store for large payload fields (``ci-blob://{session_id}/{key}``).

Layout of `LocalBlobStore` (default ``<data-dir>/blobs``)::

    objects/<sha[:2]>/<sha256>                       the bytes, written once (temp + rename)
    refs/<sha256(session_id)>/<sha256(key)>.json     {"key", "sha256", "size", "workspaces": [...]}
    links/<sha[:2]>/<sha256>/<sha256(session_id)>-<sha256(key)>   one empty file per ref naming it

Paths are built from hex digests only, so no client-supplied string ever becomes a path segment:
traversal is impossible by construction, and `validate_key` still rejects odd keys with a clear
error. Identical content is stored once (dedupe across events and sessions). Every ref remembers
which workspaces wrote it so workspace-restricted readers only see their own blobs.

`forget_sessions` drops one workspace's refs of some sessions and deletes the objects no ref names
any more: each ref has a link file under its object's ``links`` directory (made before the ref
names the object, removed after the ref is gone), and an object goes with its last link, so a
forget costs O(refs of those sessions) instead of a sweep over every ref of the store (~1 s per
40,000 refs here, under the lock that `put` waits for). A crash between the steps can leak an
object, never delete one a ref names. A store written before the links gets them once, at open
(built aside and renamed into place, so a half-built set is never used).

`offload_fields` decides what leaves the event payload: the fields in `OFFLOAD_FIELDS` whose
compact JSON is at least ``threshold`` bytes are replaced by ``{"$blob_ref": uri, "sha256",
"bytes", "preview"}``. The key is ``{event base id}__{fingerprint[:12]}__{field}``: unique per
distinct event even when two share a millisecond (upstream §10 B4 overwrote them).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any, Protocol

import msgspec

__all__ = [
    "BLOB_SCHEME",
    "OFFLOAD_FIELDS",
    "BlobError",
    "BlobRef",
    "BlobStore",
    "LocalBlobStore",
    "MemoryBlobStore",
    "blob_uri",
    "offload_fields",
    "parse_blob_uri",
    "validate_key",
]

BLOB_SCHEME = "ci-blob://"
OFFLOAD_FIELDS = (
    "raw",
    "result",
    "messages",
    "mount_plan",
    "context_snapshot",
    "debug",
    "response",
    "block",
    "error",
)
_KEY = re.compile(r"^[^/\\\x00]{1,1024}$")
_json = msgspec.json.Encoder(order="sorted")  # canonical: live payloads and journal replays encode alike


class BlobError(ValueError):
    """Bad blob URI or key (``code`` is ``invalid_blob_uri`` or ``invalid_blob_key``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class BlobRef(msgspec.Struct, frozen=True):
    """Where a blob lives and what it is."""

    uri: str
    sha256: str
    size: int


def validate_key(value: str, what: str = "blob key") -> str:
    """Return ``value`` if it is a safe key/session id: 1-1024 chars, no ``/``, ``\\``, NUL, not dots."""
    if not isinstance(value, str) or not _KEY.match(value) or value in (".", ".."):
        raise BlobError(
            "invalid_blob_key", f"{what} {value!r} is not allowed (no '/', '\\', NUL; not '.' or '..')"
        )
    return value


def blob_uri(session_id: str, key: str) -> str:
    """``ci-blob://{session_id}/{key}``."""
    return f"{BLOB_SCHEME}{session_id}/{key}"


def parse_blob_uri(uri: str) -> tuple[str, str]:
    """``(session_id, key)`` of a ``ci-blob://`` URI; raises `BlobError` naming the problem."""
    if not isinstance(uri, str) or not uri.startswith(BLOB_SCHEME):
        raise BlobError("invalid_blob_uri", f"blob URI must start with {BLOB_SCHEME!r}: {uri!r}")
    rest = uri[len(BLOB_SCHEME) :]
    session_id, sep, key = rest.partition("/")
    if not sep or not session_id or not key:
        raise BlobError("invalid_blob_uri", f"blob URI must be ci-blob://<session_id>/<key>: {uri!r}")
    validate_key(session_id, "session id")
    validate_key(key)
    return session_id, key


class BlobStore(Protocol):
    """Where offloaded fields go. Implementations are safe to call from several threads."""

    def put(self, workspace: str, session_id: str, key: str, content: bytes) -> BlobRef: ...

    def get(self, session_id: str, key: str, workspaces: frozenset[str] | None = None) -> bytes | None: ...

    def list(self, session_id: str, workspaces: frozenset[str] | None = None) -> list[str]: ...

    def forget_sessions(self, workspace: str, session_ids: Collection[str]) -> int:
        """Remove ``workspace`` from the sessions' refs, delete refs no workspace holds and the
        objects no ref names (one sweep for all); returns how many refs were deleted."""
        ...


def _visible(ref_workspaces: Iterable[str], allowed: frozenset[str] | None) -> bool:
    return allowed is None or any(ws in allowed for ws in ref_workspaces)


class MemoryBlobStore:
    """In-memory `BlobStore` (tests, ephemeral services)."""

    def __init__(self) -> None:
        self._objects: dict[str, bytes] = {}
        self._refs: dict[str, dict[str, tuple[str, set[str]]]] = {}
        self._lock = threading.Lock()

    def put(self, workspace: str, session_id: str, key: str, content: bytes) -> BlobRef:
        sha = hashlib.sha256(content).hexdigest()
        with self._lock:
            self._objects.setdefault(sha, content)
            refs = self._refs.setdefault(session_id, {})
            _, workspaces = refs.setdefault(key, (sha, set()))
            workspaces.add(workspace)
        return BlobRef(blob_uri(session_id, key), sha, len(content))

    def get(self, session_id: str, key: str, workspaces: frozenset[str] | None = None) -> bytes | None:
        with self._lock:
            entry = self._refs.get(session_id, {}).get(key)
            if entry is None or not _visible(entry[1], workspaces):
                return None
            return self._objects[entry[0]]

    def list(self, session_id: str, workspaces: frozenset[str] | None = None) -> list[str]:
        with self._lock:
            refs = self._refs.get(session_id, {})
            return sorted(k for k, (_, ws) in refs.items() if _visible(ws, workspaces))

    def forget_sessions(self, workspace: str, session_ids: Collection[str]) -> int:
        with self._lock:
            deleted, candidates = 0, set[str]()
            for session_id in set(session_ids):
                refs = self._refs.get(session_id, {})
                gone = [key for key, (_, ws) in refs.items() if ws == {workspace}]
                for _, ws in refs.values():
                    ws.discard(workspace)
                candidates.update(refs.pop(key)[0] for key in gone)
                deleted += len(gone)
                if not refs:
                    self._refs.pop(session_id, None)
            live = {sha for session_refs in self._refs.values() for sha, _ in session_refs.values()}
            for sha in candidates - live:
                del self._objects[sha]
            return deleted


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class LocalBlobStore:
    """`BlobStore` on a local directory; see the module docstring for the layout."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        (self.root / "objects").mkdir(parents=True, exist_ok=True)
        (self.root / "refs").mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        if not (self.root / "links").is_dir():
            self._build_links()

    def _build_links(self) -> None:
        """Link every ref of a store written before the links (O(all refs), once)."""
        building = self.root / "links.building"
        if building.exists():
            shutil.rmtree(building)  # an earlier build cut short
        building.mkdir()
        for path in (self.root / "refs").glob("*/*.json"):
            ref = self._read_ref(path)
            if ref is not None:
                sha = ref["sha256"]
                directory = building / sha[:2] / sha
                directory.mkdir(parents=True, exist_ok=True)
                (directory / f"{path.parent.name}-{path.stem}").touch()
        building.rename(self.root / "links")

    def _link_dir(self, sha: str) -> Path:
        return self.root / "links" / sha[:2] / sha

    def _link(self, sha: str, ref_id: str) -> None:
        directory = self._link_dir(sha)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / ref_id).touch()

    def _unlink(self, sha: str, ref_id: str) -> None:
        """Drop one ref's link to ``sha``; the object goes with its last link."""
        directory = self._link_dir(sha)
        (directory / ref_id).unlink(missing_ok=True)
        try:
            directory.rmdir()
        except FileNotFoundError:
            pass  # no link at all: nothing names the object
        except OSError:
            return  # other refs still name it
        self._object_path(sha).unlink(missing_ok=True)

    def _object_path(self, sha: str) -> Path:
        return self.root / "objects" / sha[:2] / sha

    def _ref_path(self, session_id: str, key: str) -> Path:
        return self.root / "refs" / _digest(session_id) / f"{_digest(key)}.json"

    @staticmethod
    def _write_atomic(path: Path, content: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def put(self, workspace: str, session_id: str, key: str, content: bytes) -> BlobRef:
        sha = hashlib.sha256(content).hexdigest()
        obj = self._object_path(sha)
        ref_path = self._ref_path(session_id, key)
        ref_id = f"{ref_path.parent.name}-{ref_path.stem}"
        with self._lock:  # object, link and ref together: `forget_sessions` runs under the same lock
            if not obj.exists():
                self._write_atomic(obj, content)
            ref: dict[str, Any] = {"key": key, "sha256": sha, "size": len(content), "workspaces": []}
            if ref_path.exists():
                ref = msgspec.json.decode(ref_path.read_bytes())
            previous = ref["sha256"]
            if workspace not in ref["workspaces"] or previous != sha:
                self._link(sha, ref_id)  # before the ref names the object
                ref["workspaces"] = sorted({*ref["workspaces"], workspace})
                ref["sha256"], ref["size"] = sha, len(content)
                self._write_atomic(ref_path, _json.encode(ref))
                if previous != sha:  # the key now names other content
                    self._unlink(previous, ref_id)
        return BlobRef(blob_uri(session_id, key), sha, len(content))

    def _read_ref(self, path: Path) -> dict[str, Any] | None:
        try:
            return msgspec.json.decode(path.read_bytes())  # type: ignore[no-any-return]
        except (FileNotFoundError, msgspec.DecodeError):
            return None

    def get(self, session_id: str, key: str, workspaces: frozenset[str] | None = None) -> bytes | None:
        ref = self._read_ref(self._ref_path(session_id, key))
        if ref is None or not _visible(ref["workspaces"], workspaces):
            return None
        try:
            return self._object_path(ref["sha256"]).read_bytes()
        except FileNotFoundError:
            return None

    def list(self, session_id: str, workspaces: frozenset[str] | None = None) -> list[str]:
        directory = self.root / "refs" / _digest(session_id)
        if not directory.is_dir():
            return []
        keys = []
        for path in directory.glob("*.json"):
            ref = self._read_ref(path)
            if ref is not None and _visible(ref["workspaces"], workspaces):
                keys.append(ref["key"])
        return sorted(keys)

    def forget_sessions(self, workspace: str, session_ids: Collection[str]) -> int:
        """O(refs of ``session_ids``): each ref left to no workspace goes, then its link, then the
        object when that was its last link."""
        with self._lock:
            deleted = 0
            for session_id in set(session_ids):
                directory = self.root / "refs" / _digest(session_id)
                if not directory.is_dir():
                    continue
                for path in directory.glob("*.json"):
                    ref = self._read_ref(path)
                    if ref is None or workspace not in ref["workspaces"]:
                        continue
                    ref["workspaces"] = [ws for ws in ref["workspaces"] if ws != workspace]
                    if ref["workspaces"]:
                        self._write_atomic(path, _json.encode(ref))
                    else:
                        path.unlink()
                        self._unlink(ref["sha256"], f"{directory.name}-{path.stem}")
                        deleted += 1
                with contextlib.suppress(OSError):  # not empty: another workspace's refs remain
                    directory.rmdir()
            return deleted


def offload_fields(
    store: BlobStore,
    *,
    workspace: str,
    session_id: str,
    base_id: str,
    fingerprint: str,
    data: dict[str, Any],
    threshold: int,
    fields: tuple[str, ...] = OFFLOAD_FIELDS,
) -> dict[str, Any]:
    """A copy of ``data`` with large ``fields`` replaced by blob references (``data`` is unchanged).

    O(size of the offloaded fields). Deterministic: the same event always yields the same keys and
    content, so replays rewrite nothing (objects are content-addressed and written once).
    """
    out: dict[str, Any] | None = None
    for field in fields:
        value = data.get(field)
        if value is None:
            continue
        encoded = _json.encode(value)
        if len(encoded) < threshold:
            continue
        key = f"{base_id}__{fingerprint[:12]}__{field}"
        ref = store.put(workspace, session_id, key, encoded)
        if out is None:
            out = dict(data)
        out[field] = {
            "$blob_ref": ref.uri,
            "sha256": ref.sha256,
            "bytes": ref.size,
            "preview": encoded[:256].decode(errors="ignore"),
        }
    return data if out is None else out

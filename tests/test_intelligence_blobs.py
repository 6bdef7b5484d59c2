from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from convograph.intelligence.blobs import (
    BlobError,
    BlobStore,
    LocalBlobStore,
    MemoryBlobStore,
    offload_fields,
    parse_blob_uri,
)
from convograph.intelligence.blobs_pg import PostgresBlobStore


def _open(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if kind == "memory":
        return MemoryBlobStore()
    if kind == "postgres":
        return PostgresBlobStore(request.getfixturevalue("postgres_url"))
    return LocalBlobStore(tmp_path / "blobs")


@pytest.fixture(params=["memory", "local", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BlobStore]:
    opened = _open(request.param, request, tmp_path)
    yield opened
    if request.param == "postgres":
        opened.close()


@pytest.fixture(params=["local", "postgres"])
def durable_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A store that counts its objects: the SQLite file or PostgreSQL (shared by instances)."""
    opened = _open(request.param, request, tmp_path)
    yield opened
    opened.close()


def test_round_trip_list_and_workspace_visibility(store: BlobStore) -> None:
    ref = store.put("W1", "S1", "k1", b'{"a":1}')
    assert ref.uri == "ci-blob://S1/k1"
    assert ref.size == 7
    assert store.get("S1", "k1") == b'{"a":1}'
    assert store.get("S1", "k1", frozenset({"W1"})) == b'{"a":1}'
    assert store.get("S1", "k1", frozenset({"W2"})) is None
    store.put("W2", "S1", "k2", b"[]")
    assert store.list("S1") == ["k1", "k2"]
    assert store.list("S1", frozenset({"W2"})) == ["k2"]
    assert store.get("S1", "missing") is None
    assert store.list("nope") == []


def test_local_store_is_content_addressed_and_never_uses_names_as_paths(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    a = store.put("W", "S", "../../etc/passwd", b"same")
    b = store.put("W", "T", "k", b"same")
    assert a.sha256 == b.sha256
    assert store.object_count() == 1
    assert store.get("S", "../../etc/passwd") == b"same"
    assert [p.name for p in (tmp_path / "blobs").iterdir() if not p.name.startswith("blobs.sqlite3")] == []


@pytest.mark.parametrize(
    "uri",
    [
        "http://x/y",
        "ci-blob://",
        "ci-blob://S",
        "ci-blob://S/",
        "ci-blob:///k",
        "ci-blob://../k",
        "ci-blob://S/a/b",
    ],
)
def test_bad_uris_are_rejected(uri: str) -> None:
    with pytest.raises(BlobError):
        parse_blob_uri(uri)


def test_offload_replaces_only_large_listed_fields_deterministically(store: BlobStore) -> None:
    data = {"session_id": "S", "result": {"output": "x" * 5000}, "raw": {"small": 1}, "prompt": "y" * 9000}
    out = offload_fields(
        store,
        workspace="W",
        session_id="S",
        base_id="S__tool_post__1__c",
        fingerprint="f" * 64,
        data=data,
        threshold=4096,
    )
    assert data["result"] == {"output": "x" * 5000}  # input untouched
    ref = out["result"]
    assert ref["$blob_ref"] == "ci-blob://S/S__tool_post__1__c__ffffffffffff__result"
    assert ref["bytes"] == len(msgspec.json.encode(data["result"]))
    assert out["raw"] == {"small": 1}
    assert out["prompt"] == "y" * 9000  # not an offload field: prompts stay queryable
    session_id, key = parse_blob_uri(ref["$blob_ref"])
    assert msgspec.json.decode(store.get(session_id, key) or b"") == data["result"]
    again = offload_fields(
        store,
        workspace="W",
        session_id="S",
        base_id="S__tool_post__1__c",
        fingerprint="f" * 64,
        data=data,
        threshold=4096,
    )
    assert again == out


def test_forget_session_drops_refs_and_unreferenced_objects(store: BlobStore) -> None:
    store.put("W", "S", "only-here", b'"secret"')
    store.put("W", "S", "shared", b'"common"')
    store.put("W", "T", "other", b'"common"')  # the same content under another session
    store.put("W", "S", "both", b'"two workspaces"')
    store.put("W2", "S", "both", b'"two workspaces"')
    assert store.forget_sessions("W", ["S"]) == 2  # "both" stays for W2
    assert store.list("S") == ["both"]
    assert store.get("S", "both", frozenset({"W"})) is None
    assert store.get("S", "both", frozenset({"W2"})) == b'"two workspaces"'
    assert store.get("T", "other") == b'"common"'  # its object is still named by T's ref
    assert store.forget_sessions("W", ["S"]) == 0
    assert store.forget_sessions("W", ["nobody"]) == 0
    if isinstance(store, LocalBlobStore):
        assert not store.has_object(hashlib.sha256(b'"secret"').hexdigest())
        assert store.has_object(hashlib.sha256(b'"common"').hexdigest())
        assert store.has_object(hashlib.sha256(b'"two workspaces"').hexdigest())


def test_local_forget_lets_an_object_go_with_its_last_ref(durable_store: Any) -> None:
    store = durable_store
    for n in range(50):
        store.put("W", f"other-{n}", "k", f'"unrelated {n}"'.encode())
    store.put("W", "S", "a", b'"mine"')
    store.put("W", "S", "b", b'"shared"')
    store.put("W", "T", "b", b'"shared"')
    assert store.forget_sessions("W", ["S"]) == 2
    assert store.get("T", "b") == b'"shared"'  # still named by T's ref
    assert not store.has_object(hashlib.sha256(b'"mine"').hexdigest())
    assert store.has_object(hashlib.sha256(b'"shared"').hexdigest())
    assert store.forget_sessions("W", ["T"]) == 1
    assert not store.has_object(hashlib.sha256(b'"shared"').hexdigest())
    assert store.object_count() == 50


def test_a_key_given_new_content_lets_the_old_object_go(durable_store: Any) -> None:
    store = durable_store
    store.put("W", "S", "k", b'"first"')
    store.put("W", "T", "k", b'"first"')
    store.put("W", "S", "k", b'"second"')
    assert store.has_object(hashlib.sha256(b'"first"').hexdigest())  # T's ref still names it
    store.put("W", "T", "k", b'"second"')
    assert not store.has_object(hashlib.sha256(b'"first"').hexdigest())
    assert store.get("S", "k") == store.get("T", "k") == b'"second"'


def test_the_store_survives_a_reopen(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    store.put("W", "S", "k", b'"kept"')
    store.close()
    reopened = LocalBlobStore(tmp_path / "blobs")
    assert reopened.get("S", "k", frozenset({"W"})) == b'"kept"'
    assert reopened.list("S") == ["k"]


def _file_layout_ref(root: Path, session_id: str, key: str, content: bytes, workspaces: list[str]) -> None:
    """One ref of the file layout before 2026-11-27 (object file, ref file, link file)."""
    sha = hashlib.sha256(content).hexdigest()
    (root / "objects" / sha[:2]).mkdir(parents=True, exist_ok=True)
    (root / "objects" / sha[:2] / sha).write_bytes(content)
    session, name = hashlib.sha256(session_id.encode()).hexdigest(), hashlib.sha256(key.encode()).hexdigest()
    (root / "refs" / session).mkdir(parents=True, exist_ok=True)
    ref = {"key": key, "sha256": sha, "size": len(content), "workspaces": workspaces}
    (root / "refs" / session / f"{name}.json").write_bytes(msgspec.json.encode(ref))
    (root / "links" / sha[:2] / sha).mkdir(parents=True, exist_ok=True)
    (root / "links" / sha[:2] / sha / f"{session}-{name}").touch()


def test_a_store_of_the_file_layout_is_imported_once_at_open(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    _file_layout_ref(root, "S", "a", b'"mine"', ["W"])
    _file_layout_ref(root, "S", "b", b'"shared"', ["W"])
    _file_layout_ref(root, "T", "b", b'"shared"', ["W", "W2"])
    (root / "refs" / "broken").mkdir()
    (root / "refs" / "broken" / "x.json").write_bytes(b"{not json")  # skipped
    store = LocalBlobStore(root)
    assert not any((root / name).exists() for name in ("objects", "refs", "links"))
    assert store.list("S") == ["a", "b"]
    assert store.get("T", "b", frozenset({"W2"})) == b'"shared"'
    assert store.object_count() == 2
    assert store.forget_sessions("W", ["S"]) == 2
    assert store.get("T", "b") == b'"shared"'
    assert not store.has_object(hashlib.sha256(b'"mine"').hexdigest())
    store.close()
    (root / "objects" / "zz").mkdir(parents=True)  # an import cut short after removing refs/
    reopened = LocalBlobStore(root)
    assert not (root / "objects").exists()
    assert reopened.list("T") == ["b"]

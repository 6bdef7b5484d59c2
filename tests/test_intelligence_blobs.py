from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

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


@pytest.fixture(params=["memory", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> BlobStore:
    return MemoryBlobStore() if request.param == "memory" else LocalBlobStore(tmp_path / "blobs")


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
    objects = [p for p in (tmp_path / "blobs" / "objects").rglob("*") if p.is_file()]
    assert len(objects) == 1
    for path in (tmp_path / "blobs").rglob("*"):
        assert path.resolve().is_relative_to((tmp_path / "blobs").resolve())
        assert "passwd" not in path.name


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
        objects = {p.name for p in (store.root / "objects").glob("*/*")}

        assert hashlib.sha256(b'"secret"').hexdigest() not in objects
        assert hashlib.sha256(b'"common"').hexdigest() in objects
        assert hashlib.sha256(b'"two workspaces"').hexdigest() in objects


def test_local_forget_reads_only_the_forgotten_sessions_refs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Objects are deleted through their links, not by a sweep over every ref in the store."""
    store = LocalBlobStore(tmp_path / "blobs")
    for n in range(50):
        store.put("W", f"other-{n}", "k", f'"unrelated {n}"'.encode())
    store.put("W", "S", "a", b'"mine"')
    store.put("W", "S", "b", b'"shared"')
    store.put("W", "T", "b", b'"shared"')
    reads: list[Path] = []
    real = store._read_ref
    monkeypatch.setattr(store, "_read_ref", lambda path: reads.append(path) or real(path))
    assert store.forget_sessions("W", ["S"]) == 2
    assert len(reads) == 2  # S's two refs, nothing else
    assert store.get("T", "b") == b'"shared"'  # still linked from T's ref
    objects = {p.name for p in (store.root / "objects").glob("*/*")}
    assert hashlib.sha256(b'"mine"').hexdigest() not in objects
    assert hashlib.sha256(b'"shared"').hexdigest() in objects
    assert store.forget_sessions("W", ["T"]) == 1
    assert hashlib.sha256(b'"shared"').hexdigest() not in {
        p.name for p in (store.root / "objects").glob("*/*")
    }


def test_a_key_given_new_content_lets_the_old_object_go(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    store.put("W", "S", "k", b'"first"')
    store.put("W", "T", "k", b'"first"')
    store.put("W", "S", "k", b'"second"')
    objects = lambda: {p.name for p in (store.root / "objects").glob("*/*")}  # noqa: E731
    assert hashlib.sha256(b'"first"').hexdigest() in objects()  # T's ref still names it
    store.put("W", "T", "k", b'"second"')
    assert hashlib.sha256(b'"first"').hexdigest() not in objects()
    assert store.get("S", "k") == store.get("T", "k") == b'"second"'


def test_a_store_written_before_the_links_gets_them_once_at_open(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    store = LocalBlobStore(root)
    store.put("W", "S", "a", b'"mine"')
    store.put("W", "S", "b", b'"shared"')
    store.put("W", "T", "b", b'"shared"')
    shutil.rmtree(root / "links")  # the layout before links existed
    (root / "links.building" / "zz").mkdir(parents=True)  # and a build cut short
    reopened = LocalBlobStore(root)
    assert not (root / "links.building").exists()
    assert reopened.forget_sessions("W", ["S"]) == 2
    objects = {p.name for p in (root / "objects").glob("*/*")}
    assert hashlib.sha256(b'"mine"').hexdigest() not in objects
    assert reopened.get("T", "b") == b'"shared"'

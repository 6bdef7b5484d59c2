"""API keys: stored hashed, with scopes and an optional workspace restriction.

Key file (JSON, written by ``convograph keys create``)::

    {"keys": [{"id": "k1", "hash": "sha256:<hex>", "scopes": ["read", "write"],
               "workspaces": ["acme"], "name": "ci uploader"}]}

- Keys are random (32 bytes, urlsafe) and prefixed ``cg_``; only their SHA-256 is stored, so a
  leaked key file grants nothing. (A slow KDF adds nothing for high-entropy random keys.)
- Scopes: ``read`` (GET endpoints, streams, Cypher), ``write`` (ingest, relay decisions), ``admin``
  (deletes, dead-letter purge). ``admin`` implies the other two; ``write`` does not imply ``read``.
- ``workspaces``: when set, the key reaches only those workspaces: context-intelligence requests
  naming another workspace are refused, and conversations must be named ``<workspace>:<rest>``.
- No keys configured = local mode: every request is allowed, and the server refuses to bind a
  non-loopback address unless told to (``--allow-public-without-keys``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Final, Literal

import msgspec

__all__ = [
    "SCOPES",
    "ApiKey",
    "KeyRing",
    "Principal",
    "Scope",
    "generate_key",
    "hash_key",
    "new_api_key",
]

Scope = Literal["read", "write", "admin"]
SCOPES: Final[tuple[Scope, ...]] = ("read", "write", "admin")
KEY_PREFIX: Final = "cg_"


class ApiKey(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    hash: str
    scopes: tuple[Scope, ...] = ("read",)
    workspaces: tuple[str, ...] | None = None
    name: str | None = None


class _KeyFile(msgspec.Struct, kw_only=True):
    keys: list[ApiKey] = msgspec.field(default_factory=list)


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    """Who is calling: the key id (``"local"`` in local mode), scopes and workspace restriction."""

    key_id: str
    scopes: frozenset[str]
    workspaces: frozenset[str] | None

    def allows(self, scope: Scope) -> bool:
        return "admin" in self.scopes or scope in self.scopes

    def can_reach_workspace(self, workspace: str) -> bool:
        return self.workspaces is None or workspace in self.workspaces

    def can_reach_conversation(self, conversation_id: str) -> bool:
        if self.workspaces is None:
            return True
        workspace, sep, _ = conversation_id.partition(":")
        return bool(sep) and workspace in self.workspaces


LOCAL_PRINCIPAL: Final = Principal(key_id="local", scopes=frozenset(SCOPES), workspaces=None)


def hash_key(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


class KeyRing:
    """The configured keys, looked up by hash in O(1)."""

    def __init__(self, keys: Iterable[ApiKey] = ()) -> None:
        self._by_hash = {key.hash: key for key in keys}
        self._required = False

    def replace(self, keys: Iterable[ApiKey]) -> None:
        """Serve ``keys`` from now on (a refresh from the key database; one assignment, so a
        concurrent lookup sees the old set or the new one). Once a ring has held a key it stays
        enabled: revoking the last key locks every caller out instead of opening the server."""
        self._by_hash = {key.hash: key for key in keys}
        self._required = self._required or bool(self._by_hash)

    def keys(self) -> list[ApiKey]:
        return list(self._by_hash.values())

    @property
    def enabled(self) -> bool:
        """False in local mode (no keys configured, nor ever loaded from a key database)."""
        return bool(self._by_hash) or self._required

    def __len__(self) -> int:
        return len(self._by_hash)

    @classmethod
    def load(cls, path: Path | None) -> KeyRing:
        """Read a key file; a missing path means local mode. Raises ValueError naming the problem."""
        if path is None:
            return cls()
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"cannot read API key file {path}: {exc.strerror or exc}") from None
        try:
            parsed = msgspec.json.decode(data, type=_KeyFile)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ValueError(f"API key file {path} is invalid: {exc}") from None
        for key in parsed.keys:
            if not key.hash.startswith("sha256:") or len(key.hash) != 7 + 64:
                raise ValueError(f"API key file {path}: key {key.id!r} has a malformed hash")
        return cls(parsed.keys)

    def authenticate(self, presented: str) -> Principal | None:
        """The principal for a presented key, or None when it is unknown."""
        digest = hash_key(presented)
        key = self._by_hash.get(digest)
        if key is None or not hmac.compare_digest(key.hash, digest):
            return None
        return Principal(
            key_id=key.id,
            scopes=frozenset(key.scopes),
            workspaces=frozenset(key.workspaces) if key.workspaces is not None else None,
        )


def add_key_to_file(
    path: Path,
    *,
    key_id: str,
    scopes: Iterable[Scope],
    workspaces: Iterable[str] | None = None,
    name: str | None = None,
) -> str:
    """Create a key, append its hash to ``path`` (created if missing) and return the key itself.

    Raises ValueError naming the problem, before touching the file, for a blank key id, no scopes,
    an unknown scope, an empty workspace list or a blank workspace name, an id already in the file,
    or a file that is not a key file."""
    key, record = new_api_key(key_id=key_id, scopes=scopes, workspaces=workspaces, name=name)
    existing: list[ApiKey] = []
    if path.exists():
        try:
            existing = msgspec.json.decode(path.read_bytes(), type=_KeyFile).keys
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ValueError(f"API key file {path} is invalid: {exc}") from None
    if any(known.id == key_id for known in existing):
        raise ValueError(f"a key with id {key_id!r} already exists in {path}")
    existing.append(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(msgspec.to_builtins(_KeyFile(keys=existing)), indent=2)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text + "\n")
    tmp.chmod(0o600)
    tmp.replace(path)
    return key


def new_api_key(
    *, key_id: str, scopes: Iterable[Scope], workspaces: Iterable[str] | None = None, name: str | None = None
) -> tuple[str, ApiKey]:
    """A new random key and the record to store (its hash, never the key). Raises ValueError for a
    blank key id, no scopes, an unknown scope, an empty workspace list or a blank workspace name."""
    if not key_id.strip():
        raise ValueError("the key id must not be blank")
    scopes = tuple(dict.fromkeys(scopes))
    if not scopes:
        raise ValueError("a key needs at least one scope: read, write or admin")
    unknown = [scope for scope in scopes if scope not in SCOPES]
    if unknown:
        raise ValueError(f"unknown scope(s) {', '.join(map(str, unknown))}; use {', '.join(SCOPES)}")
    if workspaces is not None:
        workspaces = tuple(workspaces)
        if not workspaces:
            raise ValueError("workspaces must name at least one workspace (None: every workspace)")
        if any(not isinstance(name, str) or not name.strip() for name in workspaces):
            raise ValueError("workspace names must not be blank")
    key = generate_key()
    return key, ApiKey(id=key_id, hash=hash_key(key), scopes=scopes, workspaces=workspaces, name=name)

"""Detect a torn SQLite WAL tail left by a crash (https://www.sqlite.org/fileformat2.html#walformat).

SQLite silently discards WAL frames after the last valid commit frame when it recovers. That is
correct (those transactions were never acknowledged) but silent; `inspect_wal` finds and measures
them so the log can report the crash instead of hiding it.

A WAL file is a 32-byte header and frames of (24-byte header + one page). A frame is valid when its
salts equal the header's and its cumulative checksum matches; a valid frame whose "database size"
field is non-zero ends a transaction (a commit frame). Everything after the last valid commit frame
is the torn tail. Cost: O(WAL size), one pass, only run when a WAL exists at open (i.e. the previous
process did not close the log cleanly).
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from pathlib import Path

import msgspec

__all__ = ["WalReport", "inspect_wal"]

_MAGIC_LE = 0x377F0682
_MAGIC_BE = 0x377F0683


class WalReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a leftover WAL holds: ``committed_frames`` SQLite will replay, ``torn_bytes`` it will drop."""

    wal_bytes: int
    committed_frames: int
    torn_frames: int
    torn_bytes: int

    @property
    def torn(self) -> bool:
        return self.torn_bytes > 0

    def describe(self) -> str:
        return (
            f"torn WAL tail: {self.torn_bytes} bytes ({self.torn_frames} frame(s)) after the last "
            f"commit were discarded; {self.committed_frames} committed frame(s) recovered"
        )


def _checksum(data: bytes, big_endian: bool, s0: int, s1: int) -> tuple[int, int]:
    words = array("I", data)
    if big_endian != (sys.byteorder == "big"):
        words.byteswap()
    mask = 0xFFFFFFFF
    it = iter(words)
    for x0 in it:
        x1 = next(it)
        s0 = (s0 + x0 + s1) & mask
        s1 = (s1 + x1 + s0) & mask
    return s0, s1


def inspect_wal(db_path: str | os.PathLike[str]) -> WalReport | None:
    """Inspect ``<db_path>-wal``; None when there is none (or it is empty)."""
    wal = Path(f"{os.fspath(db_path)}-wal")
    try:
        raw = wal.read_bytes()
    except FileNotFoundError:
        return None
    if not raw:
        return None
    size = len(raw)
    if size < 32:
        return WalReport(wal_bytes=size, committed_frames=0, torn_frames=0, torn_bytes=size)
    magic, _version, page_size, _ckpt, salt1, salt2, c0, c1 = struct.unpack(">8I", raw[:32])
    if magic not in (_MAGIC_LE, _MAGIC_BE) or page_size < 512:
        return WalReport(wal_bytes=size, committed_frames=0, torn_frames=0, torn_bytes=size - 32)
    big = magic == _MAGIC_BE
    s0, s1 = _checksum(raw[:24], big, 0, 0)
    if (s0, s1) != (c0, c1):
        return WalReport(wal_bytes=size, committed_frames=0, torn_frames=0, torn_bytes=size - 32)
    frame_size = 24 + page_size
    offset = 32
    committed_end = 32
    committed = frames = 0
    while offset + frame_size <= size:
        _pgno, db_size, fs1, fs2, fc0, fc1 = struct.unpack(">6I", raw[offset : offset + 24])
        if (fs1, fs2) != (salt1, salt2):
            break
        s0, s1 = _checksum(raw[offset : offset + 8], big, s0, s1)
        s0, s1 = _checksum(raw[offset + 24 : offset + frame_size], big, s0, s1)
        if (s0, s1) != (fc0, fc1):
            break
        frames += 1
        offset += frame_size
        if db_size:
            committed = frames
            committed_end = offset
    # Frames with stale salts after the last commit are leftovers of an older WAL generation that a
    # checkpoint reset, not a crash: only count bytes whose salts match (or a partial frame).
    torn_frames = frames - committed
    torn_bytes = offset - committed_end
    tail = size - offset
    if tail and tail < frame_size:
        torn_bytes += tail
    elif tail >= 24:
        fs1, fs2 = struct.unpack(">2I", raw[offset + 8 : offset + 16])
        if (fs1, fs2) == (salt1, salt2):  # a frame of this generation that fails its checksum
            torn_frames += 1
            torn_bytes += min(tail, frame_size)
    return WalReport(
        wal_bytes=size, committed_frames=committed, torn_frames=torn_frames, torn_bytes=torn_bytes
    )

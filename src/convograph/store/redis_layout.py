"""How the Redis event log (`convograph.store.redis`) keeps a conversation: the append script,
stream entry ids (``<seq>-0``) and the meta hash's fields."""

from __future__ import annotations

from typing import Any, Final

import msgspec
import redis.exceptions

from convograph.store.base import ConversationInfo
from convograph.store.status import RunTally

__all__ = [
    "APPEND_SCRIPT",
    "FLOOR_TTL_MS",
    "INFO_FIELDS",
    "UNAVAILABLE",
    "info_from",
    "seq_of_stream_id",
    "stream_id_of_seq",
]

APPEND_SCRIPT: Final = """
local stream, meta, ids, convs, floor = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local cid, now, maxlen, ttl, base, n = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]),
    tonumber(ARGV[5]), tonumber(ARGV[6])
local archived_mode = ARGV[7 + n * 5]
if redis.call('EXISTS', meta) == 0 then
  if base < 0 then
    if archived_mode == '1' then return {'SEED'} end
    base = tonumber(redis.call('GET', floor) or '0')
  end
  redis.call('HSET', meta, 'last_seq', base, 'count', base, 'archived_seq', base)
end
local state = redis.call('HMGET', meta, 'last_seq', 'count', 'open', 'outcome')
local last = tonumber(state[1])
local count = tonumber(state[2])
local open = {}
if state[3] then open = cjson.decode(state[3]) end
local outcome = state[4] or 'idle'
local seen = {}
local seqs = {}
local ended = 0
for i = 0, n - 1 do
  local b = 7 + i * 5
  local eid, etype, run, flag, data = ARGV[b], ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  local dup = (flag == 'k')
  if not dup and eid ~= '' then
    if seen[eid] or redis.call('HEXISTS', ids, eid) == 1 then dup = true end
  end
  if dup then
    seqs[#seqs + 1] = 0
  else
    last = last + 1
    count = count + 1
    if maxlen > 0 then
      redis.call('XADD', stream, 'MAXLEN', '~', maxlen, last .. '-0', 'd', data, 't', now)
    else
      redis.call('XADD', stream, last .. '-0', 'd', data, 't', now)
    end
    if eid ~= '' then
      seen[eid] = true
      redis.call('HSET', ids, eid, last)
    end
    if etype == 'harness_start' then
      local found = false
      for _, r in ipairs(open) do if r == run then found = true end end
      if not found then open[#open + 1] = run end
    elseif etype == 'harness_end' or etype == 'error' then
      for j = #open, 1, -1 do if open[j] == run then table.remove(open, j) end end
      if etype == 'error' or flag == 'e' then outcome = 'error' else outcome = 'complete' end
      ended = 1
    end
    seqs[#seqs + 1] = last
  end
end
local encoded = '[]'
if #open > 0 then encoded = cjson.encode(open) end
redis.call('HSET', meta, 'last_seq', last, 'count', count, 'open', encoded, 'outcome', outcome,
    'last_activity', now)
if ttl > 0 then
  redis.call('PEXPIRE', stream, ttl)
  redis.call('PEXPIRE', meta, ttl)
  redis.call('PEXPIRE', ids, ttl)
end
redis.call('ZADD', convs, now, cid)
redis.call('SET', floor, last, 'PX', ARGV[8 + n * 5])
local finished = 0
if ended == 1 and #open == 0 then finished = 1 end
local archived = tonumber(redis.call('HGET', meta, 'archived_seq') or '0')
return {last, finished, last - archived, seqs}
"""
"""One append batch (`RedisEventLog.append`): dedup, seq assignment, XADD and the status fold,
atomically. ``KEYS``: stream, meta, ids, conversations, floor; ``ARGV``: as `RedisEventLog.append`
builds them."""

UNAVAILABLE: Final = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    OSError,
    redis.exceptions.ClusterError,  # a Redis Cluster with a master down / slots uncovered
    redis.exceptions.SlotNotCoveredError,
)
"""What a Redis that cannot be reached raises (`BackendUnavailable` to callers)."""
_open_decoder = msgspec.json.Decoder(list[str])


FLOOR_TTL_MS: Final = 30 * 86_400 * 1000
"""How long a conversation's floor key (its last seq) outlives its other keys: seqs never restart."""
INFO_FIELDS: Final = ["count", "last_seq", "last_activity", "open", "outcome"]
"""The meta hash's fields `info_from` reads, in this order."""


def info_from(conversation_id: str, raw: list[Any]) -> ConversationInfo | None:
    """The conversation's info from the `INFO_FIELDS` of its meta hash (None: no such hash)."""
    if raw[0] is None:
        return None
    open_runs = tuple(_open_decoder.decode(raw[3])) if raw[3] else ()
    return ConversationInfo(
        id=conversation_id,
        event_count=int(raw[0]),
        last_seq=int(raw[1]),
        last_activity=float(raw[2] or 0),
        status=RunTally(open_runs, (raw[4] or b"idle").decode()).status,
    )


def stream_id_of_seq(seq: int) -> str:
    """The Redis stream entry id of ``seq`` (``"<seq>-0"``)."""
    return f"{seq}-0"


def seq_of_stream_id(stream_id: bytes | str) -> int:
    """Inverse of `stream_id_of_seq`."""
    text = stream_id.decode() if isinstance(stream_id, bytes) else stream_id
    return int(text.split("-", 1)[0])

"""The job store in Redis, shared by every worker of every replica that points at the same server.

Every key is under a prefix (``kserve:jobs:`` unless told otherwise), so one Redis can hold other data:

- ``job:{id}``, a hash: the job's fields (a field left out is None), its ``owner`` and ``lease_until`` while it
  is in progress, and its submission number ``seq``; ``request:{id}`` and ``reply:{id}``, hashes of the request
  and of the stored reply (the bodies as they are, bytes);
- ``seq``, the counter that numbers submissions;
- ``all``, ``model:{model}``, ``status:{status}`` and ``model-status:{status}:{model}``: sorted sets of job ids
  scored by submission number, the listing order (``status:pending`` is the claim queue; the size of each
  ``status:`` set is that status's count, kept by the change that moves a job, so it cannot drift);
- ``leases``: in-progress job ids scored by the end of their lease; ``finished``: finished ones, by end time.

Every change of a job is one Lua script (sent once, then run by its digest), so it is atomic; the scripts name
their keys themselves, so the store wants one Redis server (replicated or not), not a Redis Cluster. Times come from
this process's ``clock`` and travel as decimal strings: replicas' clocks must agree (NTP) to within a small part
of a lease. A job is durable when submit returns as far as the server's persistence allows: run Redis with
``appendonly yes`` for jobs to outlive a restart of Redis itself.
"""
import json
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

try:
    import redis.asyncio as aioredis
except ImportError as e:  # the extra is not installed
    raise ImportError("the Redis job store needs the redis client library: pip install 'kserve-sdk[redis]'") from e

from .store import (
    COMPLETED,
    FAILED,
    PENDING,
    STATUSES,
    Job,
    JobRequest,
    JobsFull,
    JobStore,
    StoredReply,
    new_job_id,
    now,
)

Clock = Callable[[], float]
PREFIX = "kserve:jobs:"
#: Connections one store opens at most (callers beyond wait for one).
MAX_CONNECTIONS = 16
#: Jobs deleted per script by purge, so Redis serves others between batches.
PURGE_BATCH = 1000
#: The error of a job whose worker stopped during every attempt it had: the two parts around the count.
STOPPED = ("its worker stopped during each of its ", " attempts")

# Every script gets the prefix as ARGV[1]; the helpers below are put in front of each.
_LUA_HELPERS = """
local P = ARGV[1]
local function job_key(id) return P .. 'job:' .. id end
-- move a job between the status sets (its model's too), keeping its submission number as score
local function move(id, from, to)
  local model, seq = unpack(redis.call('HMGET', job_key(id), 'model', 'seq'))
  redis.call('ZREM', P .. 'status:' .. from, id)
  redis.call('ZREM', P .. 'model-status:' .. from .. ':' .. model, id)
  redis.call('ZADD', P .. 'status:' .. to, seq, id)
  redis.call('ZADD', P .. 'model-status:' .. to .. ':' .. model, seq, id)
  redis.call('HSET', job_key(id), 'status', to)
end
local function ended(id, to, at)
  move(id, redis.call('HGET', job_key(id), 'status'), to)
  redis.call('HSET', job_key(id), 'finished', at, 'updated', at)
  redis.call('HDEL', job_key(id), 'owner', 'lease_until')
  redis.call('ZREM', P .. 'leases', id)
  redis.call('ZADD', P .. 'finished', at, id)
end
-- hashes for the many-job answers (claim, list) as one string of netstrings: the element count, then each
-- field and value (one string parses far faster in the client than thousands of reply elements)
local function put(out, value) out[#out + 1] = #value .. ':' .. value end
local function put_hash(out, key)
  local flat = redis.call('HGETALL', key)
  put(out, tostring(#flat))
  for i = 1, #flat do put(out, flat[i]) end
end
local function held(id, owner)
  local status, holder = unpack(redis.call('HMGET', job_key(id), 'status', 'owner'))
  return status == 'in_progress' and holder == owner
end
"""

# ARGV: prefix, id, model, max_pending, n, n job field/value pairs, then the request's field/value pairs.
_SUBMIT = """
local id, model, max_pending, n = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
if max_pending > 0 and redis.call('ZCARD', P .. 'status:pending') >= max_pending then return false end
local seq = redis.call('INCR', P .. 'seq')
redis.call('HSET', job_key(id), 'seq', seq, unpack(ARGV, 6, 5 + 2 * n))
redis.call('HSET', P .. 'request:' .. id, unpack(ARGV, 6 + 2 * n))
for _, key in ipairs({'all', 'model:' .. model, 'status:pending', 'model-status:pending:' .. model}) do
  redis.call('ZADD', P .. key, seq, id)
end
return seq
"""

# ARGV: prefix, owner, now, lease end, limit, max_attempts, the stopped message's two parts.
# Returns job hash, request hash, job hash, request hash, ... oldest first, packed.
_CLAIM = """
local owner, at, lease_end, limit, max_attempts = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local chosen = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'leases', '-inf', '(' .. at)) do
  local attempts, seq = unpack(redis.call('HMGET', job_key(id), 'attempts', 'seq'))
  if tonumber(attempts) >= max_attempts then
    ended(id, 'failed', at)
    redis.call('HSETNX', job_key(id), 'error', ARGV[7] .. attempts .. ARGV[8])
  else
    chosen[#chosen + 1] = {tonumber(seq), id}
  end
end
local waiting = redis.call('ZRANGE', P .. 'status:pending', 0, limit - 1, 'WITHSCORES')
for i = 1, #waiting, 2 do chosen[#chosen + 1] = {tonumber(waiting[i + 1]), waiting[i]} end
table.sort(chosen, function(a, b) return a[1] < b[1] end)
local out = {}
for i = 1, math.min(limit, #chosen) do
  local id = chosen[i][2]
  local key = job_key(id)
  if redis.call('HGET', key, 'status') == 'pending' then move(id, 'pending', 'in_progress') end
  redis.call('HSET', key, 'owner', owner, 'lease_until', lease_end, 'started', at, 'updated', at)
  redis.call('HINCRBY', key, 'attempts', 1)
  redis.call('ZADD', P .. 'leases', lease_end, id)
  put_hash(out, key)
  put_hash(out, P .. 'request:' .. id)
end
return table.concat(out)
"""

# ARGV: prefix, owner, lease end, ids...; returns the ids still held.
_RENEW = """
local kept = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  if held(id, ARGV[2]) then
    redis.call('HSET', job_key(id), 'lease_until', ARGV[3])
    redis.call('ZADD', P .. 'leases', ARGV[3], id)
    kept[#kept + 1] = id
  end
end
return kept
"""

# ARGV: prefix, owner, id, status, now, has error ('1'/'0'), error, then the reply's field/value pairs (if any).
_FINISH = """
local id = ARGV[3]
if not held(id, ARGV[2]) then return 0 end
ended(id, ARGV[4], ARGV[5])
if ARGV[6] == '1' then redis.call('HSET', job_key(id), 'error', ARGV[7])
else redis.call('HDEL', job_key(id), 'error') end
redis.call('DEL', P .. 'reply:' .. id)
if #ARGV > 7 then redis.call('HSET', P .. 'reply:' .. id, unpack(ARGV, 8)) end
return 1
"""

# ARGV: prefix, owner, now, ids...
_RELEASE = """
for i = 4, #ARGV do
  local id = ARGV[i]
  if held(id, ARGV[2]) then
    local key = job_key(id)
    move(id, 'in_progress', 'pending')
    redis.call('HSET', key, 'attempts', math.max(tonumber(redis.call('HGET', key, 'attempts')) - 1, 0),
               'updated', ARGV[3])
    redis.call('HDEL', key, 'owner', 'lease_until', 'started')
    redis.call('ZREM', P .. 'leases', id)
  end
end
return 0
"""

# ARGV: prefix, the hash's key (after the prefix); returns it packed.
_HASH = """
local out = {}
put_hash(out, P .. ARGV[2])
return table.concat(out)
"""

# ARGV: prefix, id, now; returns the job hash after, packed (empty: no such job).
_CANCEL = """
local id = ARGV[2]
local status = redis.call('HGET', job_key(id), 'status')
if status == 'pending' or status == 'in_progress' then ended(id, 'canceled', ARGV[3]) end
local out = {}
put_hash(out, job_key(id))
return table.concat(out)
"""

# ARGV: prefix, id, now; returns the job hash after, packed (empty: no such job).
_RETRY = """
local id = ARGV[2]
local key = job_key(id)
local status = redis.call('HGET', key, 'status')
if status == 'failed' or status == 'canceled' then
  move(id, status, 'pending')
  redis.call('HSET', key, 'attempts', 0, 'updated', ARGV[3])
  redis.call('HDEL', key, 'error', 'started', 'finished')
  redis.call('DEL', P .. 'reply:' .. id)
  redis.call('ZREM', P .. 'finished', id)
end
local out = {}
put_hash(out, key)
return table.concat(out)
"""

# ARGV: prefix, id; the reply's hash once the job finished with one, packed, else empty.
_RESULT = """
local status = redis.call('HGET', job_key(ARGV[2]), 'status')
local out = {}
if status == 'completed' or status == 'failed' then put_hash(out, P .. 'reply:' .. ARGV[2]) end
return table.concat(out)
"""

# ARGV: prefix, the listing set's key (after the prefix), the cursor's job id or '', how many.
# Returns false when the cursor's job is gone, else the job hashes, packed.
_LIST = """
local low = '-inf'
if ARGV[3] ~= '' then
  local seq = redis.call('HGET', job_key(ARGV[3]), 'seq')
  if not seq then return false end
  low = '(' .. seq
end
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. ARGV[2], low, '+inf', 'LIMIT', 0, tonumber(ARGV[4]))) do
  put_hash(out, job_key(id))
end
return table.concat(out)
"""

# ARGV: prefix, finished before, how many at most; returns how many were deleted.
_PURGE = """
local ids = redis.call('ZRANGEBYSCORE', P .. 'finished', '-inf', '(' .. ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(ids) do
  local model, status = unpack(redis.call('HMGET', job_key(id), 'model', 'status'))
  redis.call('DEL', job_key(id), P .. 'request:' .. id, P .. 'reply:' .. id)
  for _, key in ipairs({'all', 'finished', 'model:' .. model, 'status:' .. status,
                        'model-status:' .. status .. ':' .. model}) do
    redis.call('ZREM', P .. key, id)
  end
end
return #ids
"""

def _hashes(packed: bytes) -> List[Dict[str, bytes]]:
    """The hashes a script packed: netstrings (``size:bytes``), each hash its element count, then its fields and
    values."""
    items, at = [], 0
    while at < len(packed):
        colon = packed.index(b":", at)
        end = colon + 1 + int(packed[at:colon])
        items.append(packed[colon + 1:end])
        at = end
    hashes, i = [], 0
    while i < len(items):
        count = int(items[i])
        hashes.append(_pairs(items[i + 1:i + 1 + count]))
        i += 1 + count
    return hashes


def _only(packed: bytes) -> Dict[str, bytes]:
    """The one hash a script packed (empty when the hash does not exist)."""
    hashes = _hashes(packed)
    return hashes[0] if hashes else {}


def _pairs(flat: List[bytes]) -> Dict[str, bytes]:
    """A hash as Redis returns it (field, value, field, value, ...) as a dict of str field names."""
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


def _job(fields: Dict[str, bytes]) -> Job:
    def text(name: str) -> Optional[str]:
        value = fields.get(name)
        return None if value is None else value.decode()

    extra: Dict[str, Any] = {"seq": int(fields["seq"])}
    if "owner" in fields:
        extra.update(owner=fields["owner"].decode(), lease_until=float(fields["lease_until"]))
    return Job(id=fields["id"].decode(), model=fields["model"].decode(), status=fields["status"].decode(),
               created=float(fields["created"]), updated=float(fields["updated"]),
               request_id=fields["request_id"].decode(), attempts=int(fields.get("attempts", b"0")),
               started=_float(fields.get("started")), finished=_float(fields.get("finished")), error=text("error"),
               callback_url=text("callback_url"), extra=extra)


def _request(fields: Dict[str, bytes]) -> JobRequest:
    version = fields.get("version")
    return JobRequest(route=fields["route"].decode(), model=fields["model"].decode(),
                      version=None if version is None else version.decode(),
                      headers=json.loads(fields["headers"]), body=fields["body"])


def _flat(fields: Dict[str, Any]) -> List[Any]:
    """Field/value pairs for HSET, leaving out the None ones (a missing field is None)."""
    return [item for name, value in fields.items() if value is not None for item in (name, value)]


def _float(value: Optional[bytes]) -> Optional[float]:
    return None if value is None else float(value)


class RedisJobStore(JobStore):
    """Jobs in the Redis server at ``url`` (``redis://host:port/db``, ``rediss://`` for TLS, ``unix://path``),
    under ``prefix``. ``clock`` gives the time in Unix seconds (tests move it). Its connections belong to the
    event loop that first uses them: one store per loop."""

    def __init__(self, url: str, clock: Clock = now, prefix: str = PREFIX):
        self.url, self.clock, self.prefix = url, clock, prefix
        pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=MAX_CONNECTIONS)
        self._redis = aioredis.Redis.from_pool(pool)

        def script(body: str) -> Any:
            return self._redis.register_script(_LUA_HELPERS + body)

        self._submit, self._claim, self._renew = script(_SUBMIT), script(_CLAIM), script(_RENEW)
        self._finish, self._release = script(_FINISH), script(_RELEASE)
        self._cancel, self._retry = script(_CANCEL), script(_RETRY)
        self._hash, self._result = script(_HASH), script(_RESULT)
        self._list, self._purge = script(_LIST), script(_PURGE)

    async def _one(self, key: str) -> Dict[str, bytes]:
        """The hash at ``key`` (after the prefix); empty when there is none."""
        return _only(await self._hash(args=[self.prefix, key]))

    async def submit(self, request: JobRequest, request_id: str, callback_url: Optional[str] = None,
                     max_pending: int = 0) -> Job:
        job_id, at = new_job_id(), self.clock()
        job = _flat({"id": job_id, "model": request.model, "status": PENDING, "created": at, "updated": at,
                     "request_id": request_id, "attempts": 0, "callback_url": callback_url})
        kept = _flat({"route": request.route, "model": request.model, "version": request.version,
                      "headers": json.dumps(request.headers), "body": bytes(request.body)})
        seq = await self._submit(args=[self.prefix, job_id, request.model, max_pending, len(job) // 2, *job, *kept])
        if seq is None:
            raise JobsFull(max_pending)
        return Job(id=job_id, model=request.model, status=PENDING, created=at, updated=at, request_id=request_id,
                   callback_url=callback_url, extra={"seq": seq})

    async def get(self, job_id: str) -> Optional[Job]:
        fields = await self._one("job:" + job_id)
        return _job(fields) if fields else None

    async def request_of(self, job_id: str) -> Optional[JobRequest]:
        fields = await self._one("request:" + job_id)
        return _request(fields) if fields else None

    async def result(self, job_id: str) -> Optional[StoredReply]:
        fields = _only(await self._result(args=[self.prefix, job_id]))
        if not fields:
            return None
        return StoredReply(status=int(fields["status"]), headers=json.loads(fields["headers"]), body=fields["body"])

    async def claim(self, owner: str, lease_seconds: float, limit: int, max_attempts: int
                    ) -> List[Tuple[Job, JobRequest]]:
        if limit < 1:
            return []
        at = self.clock()
        got = await self._claim(args=[self.prefix, owner, at, at + lease_seconds, limit, max_attempts, *STOPPED])
        hashes = _hashes(got)
        return [(_job(hashes[i]), _request(hashes[i + 1])) for i in range(0, len(hashes), 2)]

    async def renew(self, owner: str, job_ids: Sequence[str], lease_seconds: float) -> Set[str]:
        if not job_ids:
            return set()
        kept = await self._renew(args=[self.prefix, owner, self.clock() + lease_seconds, *job_ids])
        return {job_id.decode() for job_id in kept}

    async def finish(self, owner: str, job_id: str, status: str, reply: Optional[StoredReply],
                     error: Optional[str] = None) -> bool:
        if status not in (COMPLETED, FAILED):
            raise ValueError(f"a job finishes completed or failed, not {status!r}")
        kept: List[Any] = [] if reply is None else ["status", reply.status, "headers", json.dumps(reply.headers),
                                         "body", bytes(reply.body)]
        done = await self._finish(args=[self.prefix, owner, job_id, status, self.clock(),
                                        "0" if error is None else "1", error or "", *kept])
        return bool(done)

    async def release(self, owner: str, job_ids: Sequence[str]) -> None:
        if job_ids:
            await self._release(args=[self.prefix, owner, self.clock(), *job_ids])

    async def cancel(self, job_id: str) -> Optional[Job]:
        fields = _only(await self._cancel(args=[self.prefix, job_id, self.clock()]))
        return _job(fields) if fields else None

    async def retry(self, job_id: str) -> Optional[Job]:
        fields = _only(await self._retry(args=[self.prefix, job_id, self.clock()]))
        return _job(fields) if fields else None

    async def list(self, model: Optional[str] = None, status: Optional[str] = None, limit: int = 100,
                   after: Optional[str] = None) -> Tuple[List[Job], Optional[str]]:
        if status is not None and status not in STATUSES:
            raise ValueError(f"unknown job status {status!r}: one of {', '.join(STATUSES)}")
        if limit < 1:
            raise ValueError(f"a page holds at least 1 job, not {limit}")
        if model is not None:
            listing = f"model-status:{status}:{model}" if status is not None else f"model:{model}"
        else:
            listing = f"status:{status}" if status is not None else "all"
        got = await self._list(args=[self.prefix, listing, after or "", limit + 1])
        if got is None:
            return [], None  # the cursor's job was purged: where its page ended is lost with it
        found = _hashes(got)
        jobs = [_job(fields) for fields in found[:limit] if fields]
        return jobs, (jobs[-1].id if len(found) > limit else None)

    async def purge(self, finished_before: float) -> int:
        purged = 0
        while True:  # a batch per script: Redis serves other clients between batches
            deleted = int(await self._purge(args=[self.prefix, finished_before, PURGE_BATCH]))
            purged += deleted
            if deleted < PURGE_BATCH:
                return purged

    async def counts(self) -> Dict[str, int]:
        async with self._redis.pipeline(transaction=True) as pipe:
            for status in STATUSES:
                pipe.zcard(self.prefix + "status:" + status)
            sizes = await pipe.execute()
        return dict(zip(STATUSES, (int(size) for size in sizes), strict=True))

    async def close(self) -> None:
        await self._redis.aclose()

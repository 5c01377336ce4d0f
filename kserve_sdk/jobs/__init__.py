"""Durable asynchronous jobs: submit a request now, fetch the synchronous answer later."""
from .store import JobStore


def open_store(url: str) -> JobStore:
    """The store ``url`` names: ``sqlite:///relative/or//absolute/path`` or ``redis://host:port/db``. A wrong
    URL is a ValueError naming it."""
    if url.startswith("sqlite:///"):
        from .sqlite_store import SQLiteJobStore

        return SQLiteJobStore(url[len("sqlite:///"):])
    if url.startswith(("redis://", "rediss://", "unix://")):
        from .redis_store import RedisJobStore

        return RedisJobStore(url)
    raise ValueError(f"--jobs_store {url!r}: use sqlite:///path/to/file or redis://host:port/db")

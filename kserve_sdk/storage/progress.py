"""How far a download is: one log line every ``KSERVE_SDK_STORAGE_PROGRESS_SECONDS`` (default 5; 0 turns the
lines off) while it runs, none for a download that ends sooner.

A line says the bytes written so far, the total when the listing or the server told it, the rate since the
previous line, and the URI (redacted):

    Model storage: downloading s3://models/llm: 1.2 GiB of 4.0 GiB (30%), 85.3 MiB/s

The bytes are counted on disk, below the directory the download writes into, so every scheme is measured the
same way (its SDK's temporary files included). A fetcher that knows the total calls :func:`expect`.
"""
import contextlib
import contextvars
import os
import threading
import time
from typing import Iterator, Optional

from .redaction import redact

PROGRESS_ENV = "KSERVE_SDK_STORAGE_PROGRESS_SECONDS"
DEFAULT_INTERVAL = 5.0
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


class Watch:
    """One download being watched: its URI, the directory it writes into, the total once known."""

    def __init__(self, uri: str, directory: str):
        self.uri, self.directory = uri, directory
        self.total: Optional[int] = None
        self.started = time.monotonic()
        self._last_at, self._last_bytes = self.started, 0

    def line(self) -> str:
        """The progress line for now (and the next rate starts from here)."""
        now, done = time.monotonic(), bytes_below(self.directory)
        rate = max(0, done - self._last_bytes) / max(now - self._last_at, 1e-6)
        self._last_at, self._last_bytes = now, done
        so_far = human(done)
        if self.total:
            so_far += f" of {human(self.total)} ({min(100, done * 100 // self.total)}%)"
        else:
            so_far += " so far"
        return f"Model storage: downloading {redact(self.uri)}: {so_far}, {human(rate)}/s"


_current: contextvars.ContextVar[Optional[Watch]] = contextvars.ContextVar("kserve_sdk_storage_watch", default=None)


def expect(total: Optional[int]) -> None:
    """Tell the download being watched in this context how many bytes it will write (None: unknown)."""
    watch = _current.get()
    if watch is not None and total:
        watch.total = total


def human(count: float) -> str:
    """``count`` bytes in binary units: ``512 B``, ``1.5 KiB``, ``3.2 GiB``."""
    for unit in _UNITS:
        if count < 1024 or unit == _UNITS[-1]:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def _file_bytes(entry: os.DirEntry) -> int:
    info = entry.stat(follow_symlinks=False)
    blocks = getattr(info, "st_blocks", None)
    # a file written out of order (ranged parts) has its full size early: its allocated blocks say what arrived
    return info.st_size if blocks is None else min(info.st_size, blocks * 512)


def bytes_below(root: str) -> int:
    """Bytes of the regular files below ``root`` (links not followed); files vanishing meanwhile are skipped."""
    total, pending = 0, [root]
    while pending:
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            total += _file_bytes(entry)
                    except OSError:
                        continue
        except OSError:
            continue
    return total


def interval() -> float:
    """Seconds between two lines (``KSERVE_SDK_STORAGE_PROGRESS_SECONDS``; a value that is not a number: 5)."""
    try:
        return float(os.environ.get(PROGRESS_ENV, DEFAULT_INTERVAL))
    except ValueError:
        return DEFAULT_INTERVAL


@contextlib.contextmanager
def watching(uri: str, directory: str) -> Iterator[Watch]:
    """Log the progress of the download of ``uri`` into ``directory`` while the block runs."""
    watch = Watch(uri, directory)
    token = _current.set(watch)
    every = interval()
    stop = threading.Event()
    reporter = None
    if every > 0:
        reporter = threading.Thread(target=_report, args=(watch, every, stop), name="kserve-storage-progress",
                                    daemon=True)
        reporter.start()
    try:
        yield watch
    finally:
        stop.set()
        _current.reset(token)
        if reporter is not None:
            reporter.join(timeout=5)


def _report(watch: Watch, every: float, stop: threading.Event) -> None:
    from ..logging import logger

    while not stop.wait(every):
        logger.info("%s", watch.line())

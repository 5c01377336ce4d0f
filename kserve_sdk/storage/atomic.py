"""Atomic placement: a model directory appears complete or not at all.

Files are fetched into ``.<name>.partial-<pid>-*`` beside the target and renamed into place when complete.
A failure (or SIGTERM while downloading) removes the partial directory, and a full disk is reported as such;
partial directories left by a process that died (SIGKILL, power loss) are removed by the next download of the
same target.
"""
import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time
from typing import Iterator

from .common import StorageError, is_out_of_space, write_failure


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(path: str) -> None:
    """rmtree that insists: a transfer thread finishing late may have put a file back."""
    for _ in range(20):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            return
        time.sleep(0.05)


def _clean_stale(parent: str, name: str) -> None:
    for entry in os.listdir(parent):
        for tag in (f".{name}.partial-", f".{name}.old-"):
            if entry.startswith(tag):
                pid = entry[len(tag):].split("-", 1)[0]
                if pid.isdigit() and not pid_alive(int(pid)):
                    _remove(os.path.join(parent, entry))


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM during the download raises SystemExit so the partial directory is cleaned up
    (only where the default handler is in place and only on the main thread)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _place(work: str, target: str) -> None:
    """Rename the finished ``work`` directory to ``target``, replacing what was there."""
    parent, name = os.path.split(target)
    for _ in range(5):  # another process may be placing the same target concurrently
        if os.path.isfile(target) or os.path.islink(target):
            raise StorageError(f"{target} exists and is not a directory")
        if not os.path.exists(target):
            try:
                os.rename(work, target)
                return
            except OSError:
                continue
        try:
            os.rmdir(target)  # an empty directory (e.g. made by mkdtemp or by hand): replace it
            continue
        except OSError:
            pass
        old = tempfile.mkdtemp(prefix=f".{name}.old-{os.getpid()}-", dir=parent)
        try:
            os.rename(target, os.path.join(old, name))
        except FileNotFoundError:
            _remove(old)
            continue
        except OSError:  # a mount point cannot be renamed: move the new entries into it instead
            _remove(old)
            _move_entries(work, target)
            return
        try:
            os.rename(work, target)
        finally:
            _remove(old)
        return
    raise StorageError(f"could not place the download at {target}: it keeps changing")


def _move_entries(work: str, target: str) -> None:
    for entry in os.listdir(work):
        dest = os.path.join(target, entry)
        if os.path.isdir(dest) and not os.path.islink(dest):
            shutil.rmtree(dest)
        elif os.path.lexists(dest):
            os.remove(dest)
        os.rename(os.path.join(work, entry), dest)
    os.rmdir(work)


@contextlib.contextmanager
def placement(target: str) -> Iterator[str]:
    """Yield an empty work directory beside ``target``; on success it becomes ``target``."""
    target = os.path.abspath(target)
    parent, name = os.path.split(target)
    os.makedirs(parent, exist_ok=True)
    _clean_stale(parent, name)
    work = tempfile.mkdtemp(prefix=f".{name}.partial-{os.getpid()}-", dir=parent)
    try:
        with _sigterm_raises():
            yield work
            _place(work, target)
    except OSError as e:
        _remove(work)
        if is_out_of_space(e):  # (the file's own error does not say which download it was)
            raise write_failure(e, "downloading", target) from e
        raise
    except BaseException:
        _remove(work)
        raise

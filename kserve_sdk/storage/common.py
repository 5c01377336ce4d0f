"""What every storage scheme shares: the error type, optional SDK imports, file selection, what a failed write
is called (URIs are shown redacted: storage/redaction.py)."""
import errno
import fnmatch
import importlib
import os
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Callable, Iterable, List, Optional, Sequence, Tuple, Union
from urllib.parse import unquote, urlparse

from .redaction import one_line, redact, scrub

Patterns = Optional[Union[str, Sequence[str]]]


class StorageError(RuntimeError):
    """The model at ``STORAGE_URI`` could not be made available locally.

    ``cause`` says why on one line; ``uri`` (redacted) is added when known.
    """

    def __init__(self, cause: str, uri: Optional[str] = None):
        self.cause = scrub(one_line(cause), uri)
        self.uri = uri
        super().__init__(f"cannot download {redact(uri)}: {self.cause}" if uri else self.cause)


class UnsupportedStorage(StorageError):
    """The ``STORAGE_URI`` scheme is not one this server can read."""


def bucket_and_prefix(uri: str, form: str) -> Tuple[str, str]:
    """The bucket (the URI's host) and the object prefix of a ``scheme://bucket/prefix`` URI;
    StorageError naming ``form`` when there is no bucket."""
    parsed = urlparse(uri)
    bucket, prefix = parsed.netloc, unquote(parsed.path).lstrip("/")
    if not bucket:
        raise StorageError(f"no bucket in the URI (expected {form})")
    return bucket, prefix


def require(module: str, extra: str, package: str):
    """Import an optional SDK, or fail naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise StorageError(f"{extra} URIs need the {package} package, which is not installed ({e}); "
                           f"run: pip install kserve-sdk[{extra}]") from e


def _as_list(patterns: Patterns) -> List[str]:
    if not patterns:
        return []
    return [patterns] if isinstance(patterns, str) else list(patterns)


def selected(relpath: str, allow_patterns: Patterns = None, ignore_patterns: Patterns = None) -> bool:
    """Whether a file (path relative to the model root, ``/``-separated) is kept, as in
    huggingface_hub: it must match one of ``allow_patterns`` (when given) and none of ``ignore_patterns``."""
    allow, ignore = _as_list(allow_patterns), _as_list(ignore_patterns)
    if allow and not any(fnmatch.fnmatch(relpath, p) for p in allow):
        return False
    return not any(fnmatch.fnmatch(relpath, p) for p in ignore)


def safe_relpath(relpath: str) -> str:
    """An object name below the model root as a local relative path; names that would land outside
    it (``..``, absolute) are refused, since a bucket's listing is not trusted more than an archive."""
    parts = [p for p in relpath.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise StorageError(f"refusing object name {relpath!r}: it points outside the model directory")
    return os.path.join(*parts)


def objects_below(names: Iterable[Tuple[str, int]], prefix: str, allow_patterns: Patterns,
                  ignore_patterns: Patterns) -> List[Tuple[str, str, int]]:
    """(object name, local relative path, size) of what ``prefix`` designates in a flat listing.

    An object named exactly ``prefix`` is a single file (kept under its base name); otherwise
    ``prefix`` is a folder and every object below it keeps its path relative to it. Folder
    placeholder objects (names ending in ``/``) are skipped.
    """
    names = list(names)
    if prefix and not prefix.endswith("/"):
        for name, size in names:
            if name == prefix:
                base = name.rsplit("/", 1)[-1]
                return [(name, safe_relpath(base), size)] if selected(base, allow_patterns, ignore_patterns) else []
    folder = prefix if not prefix or prefix.endswith("/") else prefix + "/"
    chosen = []
    for name, size in names:
        if not name.startswith(folder) or name.endswith("/"):
            continue
        rel = name[len(folder):]
        if selected(rel, allow_patterns, ignore_patterns):
            chosen.append((name, safe_relpath(rel), size))
    return chosen


#: Errors of a write that mean the disk (or the space this process may use) is full.
_NO_SPACE = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
             errno.EFBIG: "file too large (a file size limit: ulimit -f)"}


def is_out_of_space(error: BaseException) -> bool:
    """Whether ``error`` is a write refused for want of space (full disk, quota, file size limit)."""
    return isinstance(error, OSError) and error.errno in _NO_SPACE


def write_failure(error: OSError, doing: str, path: str) -> StorageError:
    """A StorageError for a write that failed while ``doing`` (e.g. "unpacking model.tar.gz") into ``path``: a
    full disk is said as such, with the space left there, never as a corrupt download."""
    if error.errno in _NO_SPACE:
        return StorageError(f"{_NO_SPACE[error.errno]} while {doing} into {path}{_space_left(path)}")
    return StorageError(f"cannot write {path} while {doing}: {error.strerror or error}")


def _space_left(path: str) -> str:
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        stat = os.statvfs(path or ".")
    except OSError:
        return ""
    return f" ({stat.f_bavail * stat.f_frsize} bytes free there)"


def env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def concurrency(scheme_env: Optional[str] = None) -> int:
    """Objects downloaded at once: ``scheme_env`` (KServe's S3_MAX_FILE_CONCURRENCY, AZURE_MAX_FILE_CONCURRENCY)
    when set, else KSERVE_SDK_STORAGE_CONCURRENCY (default 8)."""
    general = env_int("KSERVE_SDK_STORAGE_CONCURRENCY", 8)
    return max(1, env_int(scheme_env, general) if scheme_env else general)


def download_all(files: List[Tuple[str, str, int]], dest: str, fetch_one: Callable[[str, str], None],
                 describe: Callable[[Exception], str], workers: Optional[int] = None) -> None:
    """Fetch ``files`` (name, relative path, size) into ``dest`` on ``workers`` threads (default:
    :func:`concurrency`); the first failure cancels what has not started and is raised as a StorageError.
    Sizes are checked against the listing."""
    from .progress import expect

    expect(sum(size for _, _, size in files if size))
    for _, rel, _ in files:  # every folder exists before any thread writes
        os.makedirs(os.path.dirname(os.path.join(dest, rel)) or dest, exist_ok=True)

    def one(name: str, rel: str, size: int) -> None:
        path = os.path.join(dest, rel)
        try:
            fetch_one(name, path)
        except OSError as e:
            if is_out_of_space(e):
                raise write_failure(e, f"downloading {name}", path) from e
            raise
        got = os.path.getsize(path)
        if size is not None and got != size:
            raise StorageError(f"{name}: received {got} bytes, the listing says {size}")

    pool = ThreadPoolExecutor(max_workers=max(1, min(workers or concurrency(), len(files))),
                              thread_name_prefix="kserve-storage")
    try:
        futures = [pool.submit(one, *f) for f in files]
        wait(futures, return_when=FIRST_EXCEPTION)
        for future in futures:
            error = future.exception() if future.done() else None
            if isinstance(error, StorageError):
                raise error
            if isinstance(error, Exception):
                raise StorageError(describe(error)) from error
            if error is not None:  # KeyboardInterrupt and the like: as they are
                raise error
    except Exception:
        pool.shutdown(wait=True, cancel_futures=True)  # nothing writes into dest once this returns
        raise
    except BaseException:  # SIGTERM / Ctrl-C: do not wait for transfers in flight
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)

"""Where the model files are: ``STORAGE_URI`` (or several, ``STORAGE_URIS``) resolved to a local directory
(KServe's storage initializer, run by the server itself so the same image works inside and outside Kubernetes).

Schemes: a local path or ``file://`` (used in place), ``pvc://claim/path`` (``/mnt/models/path``),
``http(s)://``, ``s3://``, ``gs://``, Azure Blob ``https://<account>.blob.core.windows.net/...``,
``hf://owner/model[:revision]`` and git repositories (``https://host/repo.git``); ``oci://``, ``modelscope://``,
``hdfs://``, ``webhdfs://`` and any other scheme are handed to KServe's ``kserve_storage`` package when it is
installed. The variables KServe's storage reads are honoured (``settings.py``). See docs/storage.md.
"""
import hashlib
import os
import posixpath
import re
import shutil
import tempfile
import time
from typing import List, Optional, Sequence
from urllib.parse import urlparse

from ..constants.constants import MODEL_MOUNT_DIRS
from . import archive, atomic, delegated, local, multi, progress, settings
from .common import Patterns, StorageError, UnsupportedStorage, redact

__all__ = ["Storage", "StorageError", "UnsupportedStorage", "default_model_dir", "resolve_model_dir",
           "is_local", "redact", "downloads_at_start", "MODEL_CACHE_ENV"]

MODEL_CACHE_ENV = "KSERVE_SDK_MODEL_CACHE"
SUPPORTED = delegated.SUPPORTED


def _scheme(uri: str) -> str:
    scheme = urlparse(uri).scheme.lower()
    return "" if len(scheme) == 1 else scheme  # C:\path on Windows is a local path


def is_local(uri: str) -> bool:
    """Whether ``uri`` names files already on this machine (local path, ``file://``, ``pvc://``)."""
    return _scheme(uri) in ("", "file", "pvc")


def _remote_fetcher(uri: str):
    scheme = _scheme(uri)
    if scheme in ("http", "https"):  # KServe's order: Azure, then git, then any other URL as one file
        from . import azure, git, http
        if azure.is_azure_blob(uri):
            return azure.download
        return git.download if git.is_git(uri) else http.download
    if scheme == "hf":
        from . import hf
        return hf.download
    if scheme == "s3":
        from . import s3
        return s3.download
    if scheme == "gs":
        from . import gcs
        return gcs.download
    return None


class Storage:
    """KServe's ``Storage`` entry point."""

    @staticmethod
    def download(uri: str, out_dir: Optional[str] = None, allow_patterns: Patterns = None,
                 ignore_patterns: Patterns = None) -> str:
        """Make the model at ``uri`` available locally and return its directory (or local path).

        Local paths, ``file://`` and ``pvc://`` are returned in place, or symlinked file by file into
        ``out_dir`` when one is given; one naming an archive file is extracted as a downloaded archive is
        (the archive itself left as it was). Remote URIs are downloaded into ``out_dir`` (a new temporary
        directory when None) atomically: fetched into a sibling directory and renamed into place when
        complete, so a failure leaves ``out_dir`` as it was. A single downloaded archive (``.tar``,
        ``.tar.gz``, ``.tgz``, ``.zip``) is extracted safely and removed. ``allow_patterns`` /
        ``ignore_patterns`` (fnmatch patterns on paths relative to the model root; when None, those of
        ``STORAGE_ALLOW_PATTERNS`` / ``STORAGE_IGNORE_PATTERNS``) select files (object stores, hf://, git,
        local directories). A download that takes a while logs how far it is. Raises StorageError.
        """
        if not uri:
            raise StorageError("empty STORAGE_URI")
        if allow_patterns is None:
            allow_patterns = settings.patterns_from_env(settings.ALLOW_PATTERNS_ENV)
        if ignore_patterns is None:
            ignore_patterns = settings.patterns_from_env(settings.IGNORE_PATTERNS_ENV)
        if is_local(uri) and not local.is_archive_file(uri):
            try:
                return local.download(uri, out_dir, allow_patterns, ignore_patterns)
            except StorageError as e:
                raise StorageError(e.cause, uri) from e
            except OSError as e:
                raise StorageError(f"{type(e).__name__}: {e}", uri) from e
        # a local archive is linked into the work directory and unpacked there, as a download would be
        fetch = local.download if is_local(uri) else _remote_fetcher(uri)
        if fetch is None:
            return delegated.download(uri, _scheme(uri), out_dir, allow_patterns, ignore_patterns)
        target = out_dir if out_dir is not None else tempfile.mkdtemp(prefix="kserve-sdk-model-")
        try:
            with atomic.placement(target) as work:
                with progress.watching(uri, work):
                    fetch(uri, work, allow_patterns, ignore_patterns)
                archive.extract_single_archive(work)
        except StorageError as e:
            raise StorageError(e.cause, uri) from e
        except Exception as e:
            raise StorageError(f"{type(e).__name__}: {e}", uri) from e
        return os.path.abspath(target)

    @staticmethod
    def download_files(source_uris: Sequence[str], out_dirs: Sequence[Optional[str]],
                       allow_patterns: Patterns = None, ignore_patterns: Patterns = None) -> List[str]:
        """Download each of ``source_uris`` into the directory at the same place in ``out_dirs`` (KServe's
        storage initializer), one after the other; returns their local directories.

        Directories may repeat or nest: a URI whose directory another one of the list already filled (or is
        inside, or holds) is downloaded beside it first and merged in, so both sets of files are there.
        """
        if len(source_uris) != len(out_dirs):
            raise ValueError(f"download_files: {len(source_uris)} URIs but {len(out_dirs)} output directories")
        done: List[str] = []
        results = []
        for uri, out_dir in zip(source_uris, out_dirs, strict=True):
            if out_dir and multi.overlaps(out_dir, done):
                aside = multi.aside(out_dir)
                try:
                    multi.merge(Storage.download(uri, aside, allow_patterns, ignore_patterns), out_dir)
                finally:
                    shutil.rmtree(aside, ignore_errors=True)  # gone already when merged
                results.append(os.path.abspath(out_dir))
            else:
                results.append(Storage.download(uri, out_dir, allow_patterns, ignore_patterns))
            if out_dir:
                done.append(out_dir)
        return results


def cache_dir(uri: str, name: Optional[str] = None) -> str:
    """Where the server puts the download of ``uri``: ``$KSERVE_SDK_MODEL_CACHE/<name>-<hash>``, by
    default under the system's temporary directory; ``name`` defaults to the last segment of the URI's path."""
    root = os.environ.get(MODEL_CACHE_ENV) or os.path.join(tempfile.gettempdir(), "kserve-sdk-models")
    if name is None:
        name = os.path.basename(urlparse(uri).path.rstrip("/"))
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:60].lstrip(".") or "model"
    return os.path.join(root, f"{name}-{hashlib.sha256(uri.encode()).hexdigest()[:12]}")


def _populated_mount(path: str) -> bool:
    try:
        return os.path.ismount(path) and bool(os.listdir(path))
    except OSError:
        return False


def downloads_at_start() -> bool:
    """Whether resolving the model directory will download (or unpack) something: ``STORAGE_URIS``, or a
    ``STORAGE_URI`` that is remote or a local archive."""
    uri = os.environ.get("STORAGE_URI")
    return bool(os.environ.get(multi.URIS_ENV)) or bool(uri and (not is_local(uri) or local.is_archive_file(uri)))


def resolve_model_dir(model_dir: Optional[str] = None) -> str:
    """The server's model directory.

    Without ``STORAGE_URI``: ``model_dir`` (``--model_dir``) or ``/mnt/models``. With a local, ``file://``
    or ``pvc://`` ``STORAGE_URI``: that path, in place. With a remote one, or a local archive file: its
    download (or extraction) into
    ``model_dir`` when given, else into :func:`cache_dir`; except when ``model_dir`` (default
    ``/mnt/models``) is a mount point that already holds files, as it is in a KServe pod whose storage
    initializer has run: then that directory is used as it is. ``STORAGE_URIS`` (several URIs, KServe's
    ``storageUris``) is resolved the same way, into one directory (see :mod:`.multi`). Raises StorageError.
    """
    uri, several = os.environ.get("STORAGE_URI"), os.environ.get(multi.URIS_ENV)
    if uri and several:
        raise StorageError(f"set STORAGE_URI or {multi.URIS_ENV}, not both (KServe: setting both StorageURI and "
                           "StorageURIs is not supported)")
    if several:
        return _resolve_several(multi.parse(several), model_dir)
    if not uri:
        return model_dir or MODEL_MOUNT_DIRS
    if is_local(uri) and not local.is_archive_file(uri):
        path = Storage.download(uri)
        if not os.path.exists(path):  # told now, in one line, rather than by the model's first open()
            raise StorageError(f"STORAGE_URI {redact(uri)}: no such file or directory: {path}")
        return path
    mount = model_dir or MODEL_MOUNT_DIRS
    if _mount_in_use(mount, redact(uri)):
        return mount
    started = time.monotonic()
    path = Storage.download(uri, model_dir or cache_dir(uri))
    _log_download(redact(uri), path, started)
    return path


def _mount_in_use(mount: str, what: str) -> bool:
    """Whether ``mount`` already holds the model, as in a KServe pod whose storage initializer has run."""
    if not _populated_mount(mount):
        return False
    from ..logging import logger

    logger.info("Model storage: %s is a populated mount, used as it is for %s", mount, what)
    return True


def _log_download(what: str, path: str, started: float) -> None:
    from ..logging import logger

    count = size = 0
    for root, _, names in os.walk(path):
        for name in names:
            count += 1
            size += os.path.getsize(os.path.join(root, name))
    logger.info("Model storage: downloaded %s to %s (%d files, %d bytes, %.2f s)",
                what, path, count, size, time.monotonic() - started)


def _resolve_several(entries: List[multi.Entry], model_dir: Optional[str]) -> str:
    """STORAGE_URIS: every URI into its mount path's place below one model directory, placed atomically."""
    root, placed = multi.layout(entries)
    what = ", ".join(redact(entry.uri) for entry in entries)
    mount = model_dir or root
    if _mount_in_use(mount, what):
        return mount
    started = time.monotonic()
    target = os.path.abspath(model_dir or cache_dir(multi.cache_key(entries), posixpath.basename(root)))
    try:
        with atomic.placement(target) as work:
            Storage.download_files([uri for uri, _ in placed], [os.path.join(work, rel) for _, rel in placed])
    except StorageError:
        raise
    except OSError as e:
        raise StorageError(f"{type(e).__name__}: {e} (placing {what} in {target})") from e
    _log_download(what, target, started)
    return target


def default_model_dir() -> str:
    """The model directory: ``STORAGE_URI`` resolved when set, else ``/mnt/models``."""
    return resolve_model_dir(None)

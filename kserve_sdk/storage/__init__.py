"""Where the model files are: ``STORAGE_URI`` resolved to a local directory (KServe's storage initializer,
run by the server itself so the same image works inside and outside Kubernetes).

Schemes: a local path or ``file://`` (used in place), ``pvc://claim/path`` (``/mnt/models/path``),
``http(s)://``, ``s3://``, ``gs://`` and Azure Blob ``https://<account>.blob.core.windows.net/...``;
any other scheme is handed to the ``kserve_storage`` package when it is installed. See docs/storage.md.
"""
import hashlib
import os
import re
import tempfile
import time
from typing import Optional
from urllib.parse import urlparse

from ..constants.constants import MODEL_MOUNT_DIRS
from . import archive, atomic, local
from .common import Patterns, StorageError, UnsupportedStorage, redact

__all__ = ["Storage", "StorageError", "UnsupportedStorage", "default_model_dir", "resolve_model_dir",
           "is_local", "redact", "MODEL_CACHE_ENV"]

MODEL_CACHE_ENV = "KSERVE_SDK_MODEL_CACHE"
SUPPORTED = ("a local path", "file://", "pvc://", "http://", "https://", "s3://", "gs://",
             "https://<account>.blob.core.windows.net/")


def _scheme(uri: str) -> str:
    scheme = urlparse(uri).scheme.lower()
    return "" if len(scheme) == 1 else scheme  # C:\path on Windows is a local path


def is_local(uri: str) -> bool:
    """Whether ``uri`` names files already on this machine (local path, ``file://``, ``pvc://``)."""
    return _scheme(uri) in ("", "file", "pvc")


def _remote_fetcher(uri: str):
    scheme = _scheme(uri)
    if scheme in ("http", "https"):
        from . import azure, http
        return azure.download if azure.is_azure_blob(uri) else http.download
    if scheme == "s3":
        from . import s3
        return s3.download
    if scheme == "gs":
        from . import gcs
        return gcs.download
    return None


def _delegate(uri: str, out_dir: Optional[str]) -> str:
    """Schemes this package does not read go to KServe's own ``kserve_storage`` when it is installed."""
    try:
        from kserve_storage import Storage as KServeStorage
    except ImportError:
        raise UnsupportedStorage(f"unsupported scheme '{_scheme(uri)}://'; supported: {', '.join(SUPPORTED)} "
                                 "(pip install kserve-storage for more)", uri) from None
    try:
        return KServeStorage.download(uri, out_dir)
    except Exception as e:
        raise StorageError(f"kserve_storage: {type(e).__name__}: {e}", uri) from e


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
        ``ignore_patterns`` (fnmatch patterns on paths relative to the model root) select files of
        a listing (s3, gs, Azure, local directories). Raises StorageError.
        """
        if not uri:
            raise StorageError("empty STORAGE_URI")
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
            return _delegate(uri, out_dir)
        target = out_dir if out_dir is not None else tempfile.mkdtemp(prefix="kserve-sdk-model-")
        try:
            with atomic.placement(target) as work:
                fetch(uri, work, allow_patterns, ignore_patterns)
                archive.extract_single_archive(work)
        except StorageError as e:
            raise StorageError(e.cause, uri) from e
        except Exception as e:
            raise StorageError(f"{type(e).__name__}: {e}", uri) from e
        return os.path.abspath(target)


def cache_dir(uri: str) -> str:
    """Where the server puts the download of ``uri``: ``$KSERVE_SDK_MODEL_CACHE/<name>-<hash>``, by
    default under the system's temporary directory."""
    root = os.environ.get(MODEL_CACHE_ENV) or os.path.join(tempfile.gettempdir(), "kserve-sdk-models")
    path = urlparse(uri).path.rstrip("/")
    name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(path))[:60].lstrip(".") or "model"
    return os.path.join(root, f"{name}-{hashlib.sha256(uri.encode()).hexdigest()[:12]}")


def _populated_mount(path: str) -> bool:
    try:
        return os.path.ismount(path) and bool(os.listdir(path))
    except OSError:
        return False


def resolve_model_dir(model_dir: Optional[str] = None) -> str:
    """The server's model directory.

    Without ``STORAGE_URI``: ``model_dir`` (``--model_dir``) or ``/mnt/models``. With a local, ``file://``
    or ``pvc://`` ``STORAGE_URI``: that path, in place. With a remote one, or a local archive file: its
    download (or extraction) into
    ``model_dir`` when given, else into :func:`cache_dir`; except when ``model_dir`` (default
    ``/mnt/models``) is a mount point that already holds files, as it is in a KServe pod whose storage
    initializer has run: then that directory is used as it is. Raises StorageError.
    """
    uri = os.environ.get("STORAGE_URI")
    if not uri:
        return model_dir or MODEL_MOUNT_DIRS
    if is_local(uri) and not local.is_archive_file(uri):
        path = Storage.download(uri)
        if not os.path.exists(path):  # told now, in one line, rather than by the model's first open()
            raise StorageError(f"STORAGE_URI {redact(uri)}: no such file or directory: {path}")
        return path
    from ..logging import logger

    mount = model_dir or MODEL_MOUNT_DIRS
    if _populated_mount(mount):  # in KServe the storage initializer has already put the model there
        logger.info("Model storage: %s is a populated mount, used as it is for %s", mount, redact(uri))
        return mount
    started = time.monotonic()
    path = Storage.download(uri, model_dir or cache_dir(uri))
    count = size = 0
    for root, _, names in os.walk(path):
        for name in names:
            count += 1
            size += os.path.getsize(os.path.join(root, name))
    logger.info("Model storage: downloaded %s to %s (%d files, %d bytes, %.2f s)",
                redact(uri), path, count, size, time.monotonic() - started)
    return path


def default_model_dir() -> str:
    """The model directory: ``STORAGE_URI`` resolved when set, else ``/mnt/models``."""
    return resolve_model_dir(None)

"""Local paths, ``file://`` and ``pvc://``: the files are already on this machine, so they are used in place
(or linked into ``out_dir`` when one is asked for). A single archive file is the exception: Storage links it
into a work directory with :func:`download` and unpacks it there, as it does a downloaded one."""
import os
from typing import Optional
from urllib.parse import unquote, urlparse

from ..constants.constants import MODEL_MOUNT_DIRS
from .archive import is_archive
from .common import Patterns, StorageError, selected

PVC_ROOT_ENV = "KSERVE_SDK_PVC_ROOT"


def pvc_root() -> str:
    """Where KServe mounts a PVC named by ``pvc://``: ``/mnt/models`` (``KSERVE_SDK_PVC_ROOT`` overrides it)."""
    return os.environ.get(PVC_ROOT_ENV) or MODEL_MOUNT_DIRS


def local_path(uri: str) -> str:
    """The local path a local, ``file://`` or ``pvc://claim/path`` URI stands for."""
    parsed = urlparse(uri)
    if parsed.scheme == "pvc":
        return os.path.join(pvc_root(), unquote(parsed.path).lstrip("/"))
    if parsed.scheme == "file":
        host = parsed.netloc if parsed.netloc not in ("", "localhost") else ""
        return os.path.abspath(os.path.expanduser(host + unquote(parsed.path)))
    return os.path.abspath(os.path.expanduser(uri))


def is_archive_file(uri: str) -> bool:
    """Whether a local URI names one archive file (``.tar``, ``.tar.gz``, ``.tgz``, ``.zip``), to be extracted."""
    path = local_path(uri)
    return is_archive(path) and os.path.isfile(path)


def download(uri: str, out_dir: Optional[str] = None, allow_patterns: Patterns = None,
             ignore_patterns: Patterns = None) -> str:
    """The path itself without ``out_dir``; else its files symlinked into ``out_dir`` (patterns applied)."""
    path = local_path(uri)
    if out_dir is None:
        return path
    if not os.path.exists(path):
        raise StorageError(f"no such file or directory: {path}")
    out_dir = os.path.abspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    if os.path.isfile(path):
        files = [(path, os.path.basename(path))]
    else:
        files = []
        for root, _, names in os.walk(path, followlinks=True):
            for name in names:
                full = os.path.join(root, name)
                rel = os.path.relpath(full, path)
                if selected(rel.replace(os.sep, "/"), allow_patterns, ignore_patterns):
                    files.append((full, rel))
    for full, rel in files:
        link = os.path.join(out_dir, rel)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(full, link)
    return out_dir

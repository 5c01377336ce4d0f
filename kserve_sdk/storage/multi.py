"""Several storage URIs for one model, as KServe 0.16+'s ``storageUris``.

``STORAGE_URIS`` holds a JSON list of KServe's entries, ``{"uri": "...", "mountPath": "/mnt/models/..."}``
(``mountPath`` absolute, default ``/mnt/models``), or plain URI strings (mounted at ``/mnt/models``). KServe's
storage initializer downloads each URI into its mount path, and the mount paths must share a parent directory
other than ``/``. Here that common parent is the model directory (``--model_dir``, else the model cache): each
URI lands at its mount path's place below it, and two URIs with one mount path share its folder.
"""
import json
import os
import posixpath
import shutil
import tempfile
from dataclasses import dataclass
from typing import List, Sequence, Tuple

from ..constants.constants import MODEL_MOUNT_DIRS
from .common import StorageError

URIS_ENV = "STORAGE_URIS"
FORM = '[{"uri": "s3://bucket/model", "mountPath": "/mnt/models/base"}, ...]'


@dataclass(frozen=True)
class Entry:
    """One URI and where KServe would put it."""

    uri: str
    mount_path: str = MODEL_MOUNT_DIRS


def _entry(index: int, item: object) -> Entry:
    where = f"{URIS_ENV}[{index}]"
    if isinstance(item, str):
        item = {"uri": item}
    if not isinstance(item, dict):
        raise StorageError(f"{where} must be a URI or an object with \"uri\" and \"mountPath\"; expected {FORM}")
    uri, path = item.get("uri"), item.get("mountPath") or MODEL_MOUNT_DIRS
    if not isinstance(uri, str) or not uri.strip():
        raise StorageError(f"{where}: storage URI cannot be empty")
    if not isinstance(path, str):
        raise StorageError(f"{where}: mountPath must be a string")
    if path.rstrip("/") == "":
        raise StorageError(f"{where}: storage path cannot be '/'")
    if not path.startswith("/"):
        raise StorageError(f"{where}: storage path must be absolute: {path}")
    if ".." in path:
        raise StorageError(f"{where}: storage path cannot contain '..' for security reasons: {path}")
    return Entry(uri.strip(), posixpath.normpath(path))


def parse(raw: str) -> List[Entry]:
    """The entries of a STORAGE_URIS value; StorageError saying what is wrong and the expected form."""
    try:
        items = json.loads(raw)
    except json.JSONDecodeError as e:
        raise StorageError(f"{URIS_ENV} is not valid JSON ({e.msg} at character {e.pos}); expected {FORM}") from None
    if not isinstance(items, list) or not items:
        raise StorageError(f"{URIS_ENV} must be a non-empty JSON list; expected {FORM}")
    return [_entry(i, item) for i, item in enumerate(items)]


def common_parent(paths: Sequence[str]) -> str:
    """The deepest folder holding every path (KServe's rule: one path is its own parent)."""
    if len(paths) == 1:
        return paths[0]
    split = [[part for part in path.strip("/").split("/") if part] for path in paths]
    shared: List[str] = []
    for parts in zip(*split, strict=False):  # as deep as the shortest path
        if len(set(parts)) != 1:
            break
        shared.append(parts[0])
    return "/" + "/".join(shared)


def layout(entries: Sequence[Entry]) -> Tuple[str, List[Tuple[str, str]]]:
    """(the common parent, [(uri, its folder relative to the parent, "" for the parent itself)])."""
    root = common_parent([entry.mount_path for entry in entries])
    if root == "/":
        raise StorageError(f"{URIS_ENV}: storage paths must have a common parent directory; "
                           f"{[entry.mount_path for entry in entries]} have none beyond /")
    placed = []
    for entry in entries:
        rel = posixpath.relpath(entry.mount_path, root)
        placed.append((entry.uri, "" if rel == "." else rel))
    return root, placed


def overlaps(path: str, others: Sequence[str]) -> bool:
    """Whether ``path`` is, holds, or lies in one of ``others``."""
    path = os.path.abspath(path)
    for other in map(os.path.abspath, others):
        if path == other or path.startswith(other + os.sep) or other.startswith(path + os.sep):
            return True
    return False


def merge(source: str, dest: str) -> None:
    """Move the files of ``source`` into ``dest``, folders merged, a file of the same name replaced; then remove
    ``source``."""
    os.makedirs(dest, exist_ok=True)
    for name in os.listdir(source):
        moved, there = os.path.join(source, name), os.path.join(dest, name)
        if os.path.isdir(moved) and not os.path.islink(moved) and os.path.isdir(there) and not os.path.islink(there):
            merge(moved, there)
            continue
        if os.path.isdir(there) and not os.path.islink(there):
            shutil.rmtree(there)
        elif os.path.lexists(there):
            os.remove(there)
        os.rename(moved, there)
    os.rmdir(source)


def aside(dest: str) -> str:
    """An empty folder beside ``dest`` to download into before merging (named as a partial download is, so a
    crash leaves nothing the next download of ``dest`` does not clean up)."""
    parent, name = os.path.split(os.path.abspath(dest))
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=f".{name}.partial-{os.getpid()}-", dir=parent)


def cache_key(entries: Sequence[Entry]) -> str:
    """A text naming the whole set (for the model cache's folder name)."""
    return "\n".join(f"{entry.uri} {entry.mount_path}" for entry in entries)


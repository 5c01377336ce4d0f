"""A version's fingerprint: it changes when any of its files changes, so a rescan sees what to reload.

It sums each file's path, modification time (ns) and size, without reading the files. The walk is bounded
(:data:`MAX_DEPTH` folders deep, :data:`MAX_FILES` files): past the bound, more files go unseen. Hidden
names (``.git``, ``.ipynb_checkpoints``) and ``__pycache__`` are skipped: they change without the model
changing.
"""
import hashlib
import os
from typing import Iterable, List

MAX_DEPTH = 8
MAX_FILES = 10_000


def skipped(name: str) -> bool:
    """Whether a file or folder name is left out of scans and fingerprints (hidden, ``__pycache__``)."""
    return name.startswith(".") or name == "__pycache__"


def fingerprint(folder: str, also: Iterable[str] = ()) -> str:
    """The fingerprint of ``folder``'s files and of the files or folders ``also`` names (a model folder's own
    files, a ``parameters.uri`` outside the folder); a path that does not exist counts as missing."""
    digest = hashlib.blake2b(digest_size=16)
    budget = [MAX_FILES]
    _walk(digest, folder, 0, budget)
    for path in also:
        if os.path.isdir(path):
            _walk(digest, path, 0, budget)
        else:
            _add(digest, path, budget)
    return digest.hexdigest()


def _walk(digest: "hashlib.blake2b", folder: str, depth: int, budget: List[int]) -> None:
    try:
        with os.scandir(folder) as entries:
            found = sorted((entry for entry in entries if not skipped(entry.name)), key=lambda entry: entry.name)
    except OSError:
        digest.update(f"{folder}\0missing\n".encode())
        return
    for entry in found:
        if budget[0] <= 0:
            return
        try:
            is_dir = entry.is_dir()
        except OSError:
            continue
        if is_dir:
            if depth < MAX_DEPTH:
                _walk(digest, entry.path, depth + 1, budget)
        else:
            _add(digest, entry.path, budget)


def _add(digest: "hashlib.blake2b", path: str, budget: List[int]) -> None:
    budget[0] -= 1
    try:
        stat = os.stat(path)
    except OSError:
        digest.update(f"{path}\0missing\n".encode())
        return
    digest.update(f"{path}\0{stat.st_mtime_ns}\0{stat.st_size}\n".encode())

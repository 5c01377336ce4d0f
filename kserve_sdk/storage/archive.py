"""A single downloaded ``.tar``, ``.tar.gz``, ``.tgz`` or ``.zip`` is unpacked in place and removed.

Every member is checked before anything is written: no absolute names, no ``..`` leading out of the
directory, no links pointing outside it, no devices or FIFOs. ``tarfile``'s ``data`` filter then applies
the same rules (and drops set-uid bits and odd permissions) while extracting.
"""
import os
import tarfile
import zipfile
import zlib

from .common import StorageError

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".zip")


def is_archive(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def _inside(root: str, path: str) -> bool:
    real = os.path.realpath(path)
    return real == root or real.startswith(root + os.sep)


def _check_name(root: str, archive: str, name: str) -> str:
    if not name or os.path.isabs(name):
        raise StorageError(f"unsafe archive {archive}: member {name!r} has an absolute path")
    dest = os.path.join(root, name)
    if not _inside(root, dest):
        raise StorageError(f"unsafe archive {archive}: member {name!r} points outside the model directory")
    return dest


def _check_tar(root: str, archive: str, tar: tarfile.TarFile) -> None:
    for member in tar.getmembers():
        dest = _check_name(root, archive, member.name)
        if member.issym():
            target = os.path.join(os.path.dirname(dest), member.linkname)
            if os.path.isabs(member.linkname) or not _inside(root, target):
                raise StorageError(f"unsafe archive {archive}: link {member.name!r} -> {member.linkname!r} "
                                   "points outside the model directory")
        elif member.islnk():
            if os.path.isabs(member.linkname) or not _inside(root, os.path.join(root, member.linkname)):
                raise StorageError(f"unsafe archive {archive}: hard link {member.name!r} -> {member.linkname!r} "
                                   "points outside the model directory")
        elif not (member.isfile() or member.isdir()):
            raise StorageError(f"unsafe archive {archive}: member {member.name!r} is a device or FIFO")


def extract_single_archive(directory: str) -> bool:
    """When ``directory`` holds exactly one file and it is an archive, unpack it there and remove it."""
    entries = os.listdir(directory)
    if len(entries) != 1 or not is_archive(entries[0]):
        return False
    name = entries[0]
    if not os.path.isfile(os.path.join(directory, name)):
        return False
    root = os.path.realpath(directory)
    path = os.path.join(root, f".kserve-archive-{os.getpid()}-{name}")  # out of the way of its members
    os.rename(os.path.join(root, name), path)
    try:
        if name.lower().endswith(".zip"):
            with zipfile.ZipFile(path) as zf:
                for info in zf.infolist():
                    _check_name(root, name, info.filename)
                bad = zf.testzip()
                if bad is not None:
                    raise StorageError(f"corrupt archive {name}: member {bad!r} fails its CRC check")
                zf.extractall(root)
        else:
            with tarfile.open(path, "r:*") as tar:
                _check_tar(root, name, tar)
                tar.extractall(root, filter="data")
    except StorageError:
        raise
    except tarfile.FilterError as e:
        raise StorageError(f"unsafe archive {name}: {e}") from e
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, OSError) as e:
        raise StorageError(f"corrupt archive {name}: {type(e).__name__}: {e}") from e
    os.remove(path)
    return True

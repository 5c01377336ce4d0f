"""A single downloaded ``.tar``, ``.tar.gz``, ``.tgz`` or ``.zip`` is unpacked in place and removed.

The archive is not trusted, and neither are tarfile's and zipfile's own extraction checks, whose strength has
depended on Python's patch level (CVE-2025-4517 wrote outside the directory through a chain of symbolic links
that ``os.path.realpath`` gives up on). This module writes every member itself:

- a model archive holds regular files and directories only: symbolic links, hard links, devices, FIFOs
  are refused, as are absolute names, names with ``..`` or a NUL byte, and encrypted zip members;
- each file is created below directories opened one at a time without following links, so no write can
  leave the destination whatever the archive holds;
- limits bound what an archive may unpack to (decompression bombs): ``KSERVE_SDK_MAX_ARCHIVE_BYTES``
  bytes in all (100 GiB), ``KSERVE_SDK_MAX_ARCHIVE_MEMBERS`` members (100,000), and
  ``KSERVE_SDK_MAX_ARCHIVE_RATIO`` times the archive's own size (200; the first 16 MiB are free of it),
  counted as bytes are written, not from the archive's headers; 0 turns a limit off;
- members are unpacked into a fresh directory that is removed when anything is refused or fails, and
  moved into place only when the whole archive is unpacked.

A refusal is one StorageError naming the archive, the member and why; a full disk is said as such.
"""
import os
import stat
import tarfile
import tempfile
import time
import zipfile
import zlib
from dataclasses import dataclass
from typing import IO, List, Optional

from .common import StorageError, write_failure

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".zip")
MAX_BYTES_ENV = "KSERVE_SDK_MAX_ARCHIVE_BYTES"
MAX_MEMBERS_ENV = "KSERVE_SDK_MAX_ARCHIVE_MEMBERS"
MAX_RATIO_ENV = "KSERVE_SDK_MAX_ARCHIVE_RATIO"
DEFAULT_MAX_BYTES, DEFAULT_MAX_MEMBERS, DEFAULT_MAX_RATIO = 100 << 30, 100_000, 200.0
#: Bytes an archive may unpack to whatever its ratio: a small archive of text legitimately compresses well.
RATIO_FREE_BYTES = 16 << 20
_CHUNK = 1 << 20
_LINKS = ("links are not allowed in model archives (pack the files they point to instead: tar --dereference, "
          "zip without --symlinks)")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


def is_archive(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


@dataclass(frozen=True)
class Limits:
    """What one archive may unpack to; 0 is no limit."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_members: int = DEFAULT_MAX_MEMBERS
    max_ratio: float = DEFAULT_MAX_RATIO

    @classmethod
    def from_env(cls) -> "Limits":
        """The limits the environment sets (``KSERVE_SDK_MAX_ARCHIVE_*``); StorageError names a bad value."""
        return cls(int(_env_number(MAX_BYTES_ENV, DEFAULT_MAX_BYTES, int)),
                   int(_env_number(MAX_MEMBERS_ENV, DEFAULT_MAX_MEMBERS, int)),
                   _env_number(MAX_RATIO_ENV, DEFAULT_MAX_RATIO, float))


def _env_number(name: str, default: float, kind: type) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        number = kind(raw)
    except ValueError:
        number = -1
    if number < 0:
        raise StorageError(f"{name}={raw!r}: expected a {'whole ' if kind is int else ''}number, 0 or more "
                           "(0: no limit)")
    return number


class Unpacker:
    """Writes an archive's members below ``root`` (a directory it owns) without following links, counting
    members and bytes against ``limits``; every refusal names ``archive``, and a failed write names
    ``destination`` (where the members are going), which defaults to ``root``."""

    def __init__(self, root: str, archive: str, archive_size: int, limits: Limits, destination: str = ""):
        self.root, self.archive, self.archive_size, self.limits = root, archive, archive_size, limits
        self.destination = destination or root
        self.members = 0
        self.written = 0
        self._root_fd = os.open(root, _DIR_FLAGS)

    def close(self) -> None:
        os.close(self._root_fd)

    def refuse(self, member: str, why: str) -> StorageError:
        return StorageError(f"unsafe archive {self.archive}: member {member!r} {why}")

    def parts(self, name: str) -> List[str]:
        """The member's path below the root, as components; counts it against the member limit."""
        self.members += 1
        limit = self.limits.max_members
        if limit and self.members > limit:
            raise StorageError(f"archive {self.archive} has more than {limit} members ({MAX_MEMBERS_ENV}); "
                               f"refused at member {name!r}")
        if "\0" in name:
            raise self.refuse(name, "has a NUL byte in its name")
        unix = name.replace("\\", "/")
        if unix.startswith("/") or (len(unix) > 1 and unix[1] == ":" and unix[0].isalpha()):
            raise self.refuse(name, "has an absolute path")
        parts = [part for part in unix.split("/") if part not in ("", ".")]
        if ".." in parts:
            raise self.refuse(name, "points outside the model directory")
        return parts

    def directory(self, name: str, parts: List[str]) -> None:
        if parts:
            os.close(self._open_directories(name, parts))

    def file(self, name: str, parts: List[str], data: IO[bytes], executable: bool, mtime: Optional[float]) -> None:
        """Write the member's bytes as they are read (reading errors are the archive's, writing ones the disk's)."""
        if not parts:
            raise self.refuse(name, "has no file name")
        parent = self._open_directories(name, parts[:-1])
        try:
            fd = self._do(name, lambda: os.open(parts[-1], _FILE_FLAGS, 0o755 if executable else 0o644,
                                                dir_fd=parent))
        finally:
            os.close(parent)
        try:
            while True:
                chunk = data.read(_CHUNK)
                if not chunk:
                    break
                self._count(name, len(chunk))
                view = memoryview(chunk)
                while view:
                    view = view[self._do(name, lambda: os.write(fd, view)):]  # noqa: B023 (called at once)
            if mtime is not None:
                os.utime(fd, (mtime, mtime))
        finally:
            os.close(fd)

    def _open_directories(self, name: str, parts: List[str]) -> int:
        """A descriptor of the directory ``parts`` below the root, made as needed; none is followed as a link."""
        fd = os.dup(self._root_fd)
        try:
            for part in parts:
                try:
                    self._do(name, lambda: os.mkdir(part, 0o755, dir_fd=fd))  # noqa: B023 (called at once)
                except FileExistsError:
                    pass
                try:
                    inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except (NotADirectoryError, FileNotFoundError):
                    raise self.refuse(name, f"needs {part!r} to be a directory, and a file of that name came "
                                            "before it") from None
                except OSError as e:
                    raise write_failure(e, f"unpacking {self.archive} (member {name!r})", self.destination) from e
                os.close(fd)
                fd = inner
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _do(self, name: str, write):
        """``write()``, a change to the disk: its OSError is a full disk or an unwritable place, said as such
        (but a member that is both a file and a directory is the archive's fault: the caller says so)."""
        try:
            return write()
        except (FileExistsError, IsADirectoryError):
            raise
        except OSError as e:
            raise write_failure(e, f"unpacking {self.archive} (member {name!r})", self.destination) from e

    def _count(self, name: str, size: int) -> None:
        self.written += size
        limits = self.limits
        if limits.max_bytes and self.written > limits.max_bytes:
            raise StorageError(f"archive {self.archive} unpacks to more than {limits.max_bytes} bytes "
                               f"({MAX_BYTES_ENV}); refused at member {name!r}")
        if limits.max_ratio and self.written > max(RATIO_FREE_BYTES, limits.max_ratio * self.archive_size):
            raise StorageError(f"archive {self.archive} ({self.archive_size} bytes) unpacks to more than "
                               f"{limits.max_ratio:g} times its size ({MAX_RATIO_ENV}), as a decompression bomb "
                               f"does; refused at member {name!r}")


def _unpack_tar(path: str, out: Unpacker) -> None:
    with tarfile.open(path, "r|*") as tar:  # a stream: each member read once, in order
        for member in tar:
            parts = out.parts(member.name)
            if member.issym() or member.islnk():
                raise _link_refusal(out, member.name, member.linkname, parts, member.islnk())
            if member.isdir():
                _already_a_file(out, member.name, lambda: out.directory(member.name, parts))  # noqa: B023
            elif member.isreg():
                data = tar.extractfile(member)
                assert data is not None  # a regular member always has data
                _already_a_dir(out, member.name, lambda: out.file(  # noqa: B023 (called at once)
                    member.name, parts, data, bool(member.mode & 0o111), member.mtime))  # noqa: B023
            else:
                raise out.refuse(member.name, f"is a {_tar_kind(member)}; model archives hold files and "
                                              "directories only")


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.ischr():
        return "character device"
    if member.isblk():
        return "block device"
    if member.isfifo():
        return "FIFO"
    return f"member of tar type {member.type!r}"


def _unpack_zip(path: str, out: Unpacker) -> None:
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        limits = out.limits
        if limits.max_members and len(infos) > limits.max_members:
            raise StorageError(f"archive {out.archive} has {len(infos)} members, more than {limits.max_members} "
                               f"({MAX_MEMBERS_ENV})")
        declared = sum(info.file_size for info in infos)
        if limits.max_bytes and declared > limits.max_bytes:  # (what is written is counted too: headers can lie)
            raise StorageError(f"archive {out.archive} says it unpacks to {declared} bytes, more than "
                               f"{limits.max_bytes} ({MAX_BYTES_ENV})")
        for info in infos:
            parts = out.parts(info.filename)
            mode = info.external_attr >> 16 if info.create_system == 3 else 0  # Unix attributes
            if stat.S_ISLNK(mode):
                with zf.open(info) as link:
                    target = link.read(4096).decode("utf-8", "replace")
                raise _link_refusal(out, info.filename, target, parts, hard=False)
            if info.flag_bits & 0x1:
                raise out.refuse(info.filename, "is encrypted; model archives cannot be")
            if info.is_dir() or stat.S_ISDIR(mode):
                _already_a_file(out, info.filename, lambda: out.directory(info.filename, parts))  # noqa: B023
            elif stat.S_IFMT(mode) in (0, stat.S_IFREG):
                mtime = time.mktime(info.date_time + (0, 0, -1))
                with zf.open(info) as data:
                    _already_a_dir(out, info.filename, lambda: out.file(  # noqa: B023 (called at once)
                        info.filename, parts, data, bool(mode & 0o111), mtime))  # noqa: B023
            else:
                raise out.refuse(info.filename, "is a device, FIFO or socket; model archives hold files and "
                                                "directories only")


def _link_refusal(out: Unpacker, name: str, target: str, parts: List[str], hard: bool) -> StorageError:
    kind = "hard link" if hard else "link"
    below = parts[:-1] if not hard else []  # a symbolic link's target is relative to its folder
    reach = [*below]
    escapes = target.startswith("/") or "\0" in target
    for part in target.replace("\\", "/").split("/"):
        if part == "..":
            if not reach:
                escapes = True
                break
            reach.pop()
        elif part not in ("", "."):
            reach.append(part)
    where = " points outside the model directory;" if escapes else ":"
    return StorageError(f"unsafe archive {out.archive}: {kind} {name!r} -> {target!r}{where} {_LINKS}")


def _already_a_file(out: Unpacker, name: str, make) -> None:
    try:
        make()
    except FileExistsError:
        raise out.refuse(name, "is a directory, and a file of the same name came before it") from None


def _already_a_dir(out: Unpacker, name: str, write) -> None:
    try:
        write()
    except (IsADirectoryError, FileExistsError):
        raise out.refuse(name, "is a file, and a directory of the same name came before it") from None


def extract_single_archive(directory: str, limits: Optional[Limits] = None) -> bool:
    """When ``directory`` holds exactly one file and it is an archive, unpack it there and remove it.
    ``limits`` default to the environment's (:meth:`Limits.from_env`). Raises StorageError."""
    entries = os.listdir(directory)
    if len(entries) != 1 or not is_archive(entries[0]):
        return False
    name = entries[0]
    if not os.path.isfile(os.path.join(directory, name)):
        return False
    limits = limits or Limits.from_env()
    root = os.path.realpath(directory)
    path = os.path.join(root, f".kserve-archive-{os.getpid()}-{name}")  # out of the way of its members
    os.rename(os.path.join(root, name), path)
    unpacked = tempfile.mkdtemp(prefix=".kserve-unpacked-", dir=root)
    try:
        _unpack(path, name, unpacked, limits, directory)
        os.remove(path)
        _move_up(unpacked, root)
    except BaseException:
        _remove_tree(unpacked)
        raise
    return True


def _unpack(path: str, name: str, into: str, limits: Limits, destination: str) -> None:
    out = Unpacker(into, name, os.path.getsize(path), limits, destination)
    try:
        if name.lower().endswith(".zip"):
            _unpack_zip(path, out)
        else:
            _unpack_tar(path, out)
    except StorageError:
        raise
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, OSError, RuntimeError,
            NotImplementedError, ValueError) as e:  # reading the archive: writes are StorageErrors by now
        raise StorageError(f"corrupt archive {name}: {type(e).__name__}: {e}") from e
    finally:
        out.close()


def _move_up(unpacked: str, root: str) -> None:
    """Move what was unpacked into ``root`` (which holds nothing else now) and remove the folder it was in."""
    own = os.path.basename(unpacked)
    if own in os.listdir(unpacked):  # the archive has a member of that name: move the folder out of its way
        moved = tempfile.mkdtemp(prefix=".kserve-unpacked-", dir=root)
        os.rmdir(moved)
        os.rename(unpacked, moved)
        unpacked = moved
    for entry in os.listdir(unpacked):
        os.rename(os.path.join(unpacked, entry), os.path.join(root, entry))
    os.rmdir(unpacked)


def _remove_tree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)

"""Unpacking model archives (kserve_sdk/storage/archive.py) in this process: what is refused and why, the limits,
a full disk said as such; and that what is refused writes nothing outside the directory, nor leaves anything
half unpacked in it."""
import contextlib
import errno
import io
import os
import resource
import stat
import zipfile
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Tuple

import pytest

from helpers import cve_2025_4517_entries, file_tree, tar_archive
from kserve_sdk.storage import StorageError, archive
from kserve_sdk.storage.archive import Limits, extract_single_archive
from kserve_sdk.storage.common import is_out_of_space, write_failure

LINKS = "links are not allowed in model archives"
DEFAULTS = Limits()


def _zip(entries: List[Tuple[str, Any, int]]) -> bytes:
    """A zip of (name, data, Unix mode) entries (mode 0: none recorded, as on Windows)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name, (2024, 1, 2, 3, 4, 6))
            info.create_system, info.external_attr = (3, mode << 16) if mode else (0, 0)
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return out.getvalue()


def _unpack(tmp_path, name: str, data: bytes, limits: Limits = DEFAULTS,
            around: Callable[[], ContextManager[Any]] = contextlib.nullcontext) -> str:
    """Unpack ``data`` as the archive ``name`` in tmp_path/model (within ``around()``); returns the model
    directory."""
    model = tmp_path / "model"
    model.mkdir()
    (model / name).write_bytes(data)
    with around():
        assert extract_single_archive(str(model), limits)
    return str(model)


def _refused(tmp_path, name: str, data: bytes, limits: Limits = DEFAULTS,
             around: Callable[[], ContextManager[Any]] = contextlib.nullcontext) -> str:
    """The refusal of ``data`` as the archive ``name``, having checked that nothing outside tmp_path/model was
    written or changed (a file ``flag`` beside it included) and nothing but the archive is left in it."""
    (tmp_path / "flag").write_bytes(b"original")
    before = file_tree(str(tmp_path))
    with pytest.raises(StorageError) as refusal:
        _unpack(tmp_path, name, data, limits, around)
    after = file_tree(str(tmp_path))
    left = {path for path in after if path.startswith("model" + os.sep)}
    assert left == {f"model{os.sep}.kserve-archive-{os.getpid()}-{name}"}, left
    assert {path: v for path, v in after.items() if path != "model" and path not in left} == before
    assert (tmp_path / "flag").read_bytes() == b"original"
    return str(refusal.value)


# --- what is unpacked -------------------------------------------------------------------------------------------
def test_files_and_folders_are_unpacked_as_they_were(tmp_path):
    data = tar_archive([("bin", "dir", None), ("bin/run.sh", "file", b"#!/bin/sh\n"), ("a/b/c.txt", "file", b"c"),
                        ("./top.json", "file", b"{}"), ("a/b/c.txt", "file", b"again")], mode="w:gz")
    model = _unpack(tmp_path, "model.tar.gz", data)
    assert {path: kind for path, (kind, _, _) in file_tree(model).items()} == {
        "bin": "dir", "bin/run.sh": "file", "a": "dir", "a/b": "dir", "a/b/c.txt": "file", "top.json": "file"}
    assert open(os.path.join(model, "a/b/c.txt"), "rb").read() == b"again"  # a later member of the same name wins
    assert not os.stat(os.path.join(model, "bin/run.sh")).st_mode & 0o111  # (its tar mode is 0o644)


def test_a_zip_keeps_executable_bits_and_times(tmp_path):
    data = _zip([("tool/", b"", stat.S_IFDIR | 0o755), ("tool/run", b"#!/bin/sh\n", stat.S_IFREG | 0o755),
                 ("weights.bin", bytes(range(256)) * 100, 0)])
    model = _unpack(tmp_path, "model.zip", data)
    assert os.stat(os.path.join(model, "tool/run")).st_mode & 0o777 == 0o755
    assert open(os.path.join(model, "weights.bin"), "rb").read() == bytes(range(256)) * 100
    assert sorted(os.listdir(model)) == ["tool", "weights.bin"]


def test_a_member_named_like_the_unpacking_folder_is_kept(tmp_path, monkeypatch):
    """Members are unpacked into a hidden folder first, then moved up: one that has that folder's name lands too."""
    made = []

    def mkdtemp(prefix: str, dir: str) -> str:
        path = os.path.join(dir, f"{prefix}{len(made)}")
        os.mkdir(path)
        made.append(path)
        return path

    monkeypatch.setattr(archive.tempfile, "mkdtemp", mkdtemp)
    data = tar_archive([(".kserve-unpacked-0/inner.txt", "file", b"in"), ("top.txt", "file", b"top")])
    model = _unpack(tmp_path, "model.tar", data)
    assert sorted(file_tree(model)) == [".kserve-unpacked-0", ".kserve-unpacked-0/inner.txt", "top.txt"]
    assert len(made) == 2  # the folder moved out of the member's way


# --- what is refused --------------------------------------------------------------------------------------------
REFUSED: Dict[str, Tuple[str, bytes, str]] = {
    "symlink-inside": ("m.tar", tar_archive([("v1/w.bin", "file", b"w"), ("latest", "symlink", "v1")]),
                       f"unsafe archive m.tar: link 'latest' -> 'v1': {LINKS}"),
    "symlink-outside": ("m.tar", tar_archive([("up", "symlink", "../../etc")]),
                        f"unsafe archive m.tar: link 'up' -> '../../etc' points outside the model directory; {LINKS}"),
    "symlink-absolute": ("m.tar", tar_archive([("d/passwd", "symlink", "/etc/passwd")]),
                         "unsafe archive m.tar: link 'd/passwd' -> '/etc/passwd' points outside the model directory"),
    "hardlink-inside": ("m.tar", tar_archive([("a.txt", "file", b"a"), ("b.txt", "hardlink", "a.txt")]),
                        f"unsafe archive m.tar: hard link 'b.txt' -> 'a.txt': {LINKS}"),
    "hardlink-outside": ("m.tar.gz", tar_archive([("h", "hardlink", "../flag")], "w:gz"),
                         "unsafe archive m.tar.gz: hard link 'h' -> '../flag' points outside the model directory; "
                         + LINKS),
    "absolute": ("m.tar", tar_archive([("/tmp/evil.txt", "file", b"x")]),
                 "unsafe archive m.tar: member '/tmp/evil.txt' has an absolute path"),
    "dotdot": ("m.tgz", tar_archive([("ok.txt", "file", b"fine"), ("a/../../escaped.txt", "file", b"x")], "w:gz"),
               "unsafe archive m.tgz: member 'a/../../escaped.txt' points outside the model directory"),
    "device": ("m.tar", tar_archive([("dev/null", "chr", None)]),
               "unsafe archive m.tar: member 'dev/null' is a character device; model archives hold files and "
               "directories only"),
    "fifo": ("m.tar", tar_archive([("pipe", "fifo", None)]),
             "unsafe archive m.tar: member 'pipe' is a FIFO; model archives hold files and directories only"),
    "file-then-folder": ("m.tar", tar_archive([("a", "file", b"1"), ("a/b", "file", b"2")]),
                         "unsafe archive m.tar: member 'a/b' needs 'a' to be a directory, and a file of that name "
                         "came before it"),
    "folder-then-file": ("m.tar", tar_archive([("a/b", "file", b"1"), ("a", "file", b"2")]),
                         "unsafe archive m.tar: member 'a' is a file, and a directory of the same name came before it"),
    "zip-symlink": ("m.zip", _zip([("ok.txt", b"fine", stat.S_IFREG | 0o644),
                                   ("up", b"../../flag", stat.S_IFLNK | 0o777)]),
                    f"unsafe archive m.zip: link 'up' -> '../../flag' points outside the model directory; {LINKS}"),
    "zip-dotdot": ("m.zip", _zip([("..\\evil.txt", b"x", 0)]),
                   "unsafe archive m.zip: member '..\\\\evil.txt' points outside the model directory"),
    "zip-device": ("m.zip", _zip([("tty", b"", stat.S_IFCHR | 0o600)]),
                   "unsafe archive m.zip: member 'tty' is a device, FIFO or socket; model archives hold files and "
                   "directories only"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_member_that_is_not_a_plain_file_or_folder_inside_is_refused(case, tmp_path):
    name, data, message = REFUSED[case]
    assert message in _refused(tmp_path, name, data)


def test_the_cve_2025_4517_archive_is_refused_at_its_first_link(tmp_path):
    (tmp_path / "model").mkdir()  # the destination's length sets the links' lengths
    data = tar_archive(cve_2025_4517_entries(str(tmp_path / "model")))
    (tmp_path / "model").rmdir()
    message = _refused(tmp_path, "evil.tar", data)
    assert message.startswith("unsafe archive evil.tar: link 'a' -> 'ddd") and LINKS in message, message
    assert not (tmp_path / "newfile").exists()


# --- limits -----------------------------------------------------------------------------------------------------
def test_an_archive_unpacking_to_more_bytes_than_allowed_is_refused_as_it_streams(tmp_path):
    data = tar_archive([("a.bin", "file", os.urandom(600_000)), ("b.bin", "file", os.urandom(600_000))], "w:gz")
    message = _refused(tmp_path, "big.tar.gz", data, Limits(max_bytes=1_000_000))
    assert message == ("archive big.tar.gz unpacks to more than 1000000 bytes (KSERVE_SDK_MAX_ARCHIVE_BYTES); "
                       "refused at member 'b.bin'")


def test_a_zip_saying_it_unpacks_to_more_bytes_than_allowed_is_refused_before_any_write(tmp_path):
    data = _zip([("a.bin", bytes(700_000), 0), ("b.bin", bytes(700_000), 0)])
    assert _refused(tmp_path, "big.zip", data, Limits(max_bytes=1_000_000)) == (
        "archive big.zip says it unpacks to 1400000 bytes, more than 1000000 (KSERVE_SDK_MAX_ARCHIVE_BYTES)")


def test_a_decompression_bomb_is_refused_by_its_ratio(tmp_path):
    data = tar_archive([("zeros.bin", "file", bytes(40 << 20))], "w:gz")
    message = _refused(tmp_path, "bomb.tar.gz", data)  # the default limits
    assert message == (f"archive bomb.tar.gz ({len(data)} bytes) unpacks to more than 200 times its size "
                       "(KSERVE_SDK_MAX_ARCHIVE_RATIO), as a decompression bomb does; refused at member 'zeros.bin'")


def test_the_ratio_spares_small_archives_and_a_limit_of_0_is_none(tmp_path):
    data = tar_archive([("zeros.bin", "file", bytes(8 << 20))], "w:gz")  # over 200 times, under 16 MiB
    model = _unpack(tmp_path, "text.tar.gz", data)
    assert os.path.getsize(os.path.join(model, "zeros.bin")) == 8 << 20
    bomb = tar_archive([("zeros.bin", "file", bytes(20 << 20))], "w:gz")
    other = tmp_path / "other"
    other.mkdir()
    model = _unpack(other, "bomb.tar.gz", bomb, Limits(max_ratio=0))
    assert os.path.getsize(os.path.join(model, "zeros.bin")) == 20 << 20


@pytest.mark.parametrize("name,data,message", [
    ("many.tar", tar_archive([(f"f{i}.txt", "file", b"x") for i in range(150)]),
     "archive many.tar has more than 100 members (KSERVE_SDK_MAX_ARCHIVE_MEMBERS); refused at member 'f100.txt'"),
    ("many.zip", _zip([(f"f{i}.txt", b"x", 0) for i in range(150)]),
     "archive many.zip has 150 members, more than 100 (KSERVE_SDK_MAX_ARCHIVE_MEMBERS)"),
])
def test_an_archive_with_more_members_than_allowed_is_refused(name, data, message, tmp_path):
    assert _refused(tmp_path, name, data, Limits(max_members=100)) == message


def test_the_limits_come_from_the_environment(monkeypatch):
    assert Limits.from_env() == Limits(100 << 30, 100_000, 200.0)
    monkeypatch.setenv("KSERVE_SDK_MAX_ARCHIVE_BYTES", "5000")
    monkeypatch.setenv("KSERVE_SDK_MAX_ARCHIVE_MEMBERS", "0")
    monkeypatch.setenv("KSERVE_SDK_MAX_ARCHIVE_RATIO", "12.5")
    assert Limits.from_env() == Limits(5000, 0, 12.5)
    for name, value, kind in [("KSERVE_SDK_MAX_ARCHIVE_BYTES", "5GB", "whole "),
                              ("KSERVE_SDK_MAX_ARCHIVE_RATIO", "-1", "")]:
        monkeypatch.setenv(name, value)
        with pytest.raises(StorageError) as e:
            Limits.from_env()
        assert str(e.value) == f"{name}={value!r}: expected a {kind}number, 0 or more (0: no limit)"
        monkeypatch.delenv(name)


# --- a full disk ------------------------------------------------------------------------------------------------
def test_a_full_disk_is_said_as_such_naming_the_path(tmp_path):
    with pytest.raises(OSError) as full, open("/dev/full", "wb", buffering=0) as device:
        device.write(b"x")  # the kernel's own "no space left on device"
    assert full.value.errno == errno.ENOSPC and is_out_of_space(full.value)
    error = write_failure(full.value, "unpacking m.tar (member 'w.bin')", str(tmp_path))
    assert str(error) == (f"no space left on device while unpacking m.tar (member 'w.bin') into {tmp_path} "
                          f"({os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize} bytes free there)")
    quota = write_failure(OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)), "downloading", "/nowhere/model")
    assert str(quota).startswith("disk quota exceeded while downloading into /nowhere/model (")
    other = write_failure(OSError(errno.EACCES, os.strerror(errno.EACCES)), "downloading", "/nowhere/model")
    assert str(other) == "cannot write /nowhere/model while downloading: Permission denied"
    assert not is_out_of_space(OSError(errno.EACCES, "x")) and not is_out_of_space(ValueError())


def test_a_file_size_limit_while_unpacking_is_said_as_such_not_as_a_corrupt_archive(tmp_path):
    """A write past the file size limit (RLIMIT_FSIZE, which Python's ignored SIGXFSZ turns into EFBIG) fails as
    a full disk would; the refusal names the member, and nothing half written is left."""
    data = tar_archive([("small.txt", "file", b"s"), ("w.bin", "file", os.urandom(3 << 20))], "w:gz")
    message = _refused(tmp_path, "m.tar.gz", data, around=lambda: _file_size_limit(2 << 20))
    assert message.startswith("file too large (a file size limit: ulimit -f) while unpacking m.tar.gz "
                              f"(member 'w.bin') into {tmp_path / 'model'}"), message


@contextlib.contextmanager
def _file_size_limit(size: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

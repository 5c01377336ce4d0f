"""The companion distribution (compat/kserve, kserve-sdk-alias) refuses to build for an environment holding the
real KServe: its guard (compat/kserve/install_guard.py) finds KServe's installed metadata in the target's
folders, and every build hook of its backend (compat/kserve/build_backend.py) stops with the guard's message
before building anything. (pip's own run of it needs a throwaway environment: too slow for a test.)"""
import importlib
import os
import sys
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest

from helpers import ROOT

COMPANION = os.path.join(ROOT, "compat", "kserve")


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """compat/kserve/build_backend.py imported as pip imports it (its folder on sys.path), then forgotten."""
    monkeypatch.syspath_prepend(COMPANION)
    for name in ("build_backend", "install_guard"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    module = importlib.import_module("build_backend")
    yield module
    for name in ("build_backend", "install_guard"):
        sys.modules.pop(name, None)


def installed(folder: Path, dist_info: str, name: str, version: str) -> None:
    """Installed metadata of distribution ``name`` in ``folder`` (a dist-info or egg-info folder)."""
    (folder / dist_info).mkdir(parents=True)
    kind = "PKG-INFO" if dist_info.endswith(".egg-info") else "METADATA"
    (folder / dist_info / kind).write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_a_real_kserve_is_found_and_refused(backend: ModuleType, tmp_path: Path):
    guard = sys.modules["install_guard"]
    installed(tmp_path, "kserve-0.21.0.dist-info", "kserve", "0.21.0")
    assert guard.real_kserve_in([str(tmp_path)]) == f"kserve 0.21.0 in {tmp_path}"
    with pytest.raises(SystemExit) as refused:
        guard.refuse_over_real_kserve([str(tmp_path)])
    assert str(refused.value) == (
        f"kserve-sdk-alias is not installed: the real KServe (kserve 0.21.0 in {tmp_path}) is installed in this "
        "environment, and both provide the `kserve` package, so installing kserve-sdk-alias would overwrite "
        "KServe's files.\nEither keep KServe and run your scripts on kserve_sdk with `python -m kserve_sdk "
        "model.py` (no kserve-sdk-alias needed), or remove KServe first (`pip uninstall kserve`) and install "
        "kserve-sdk-alias again. See docs/kserve-compat.md.")


def test_kserve_installed_from_source_is_found_too(backend: ModuleType, tmp_path: Path):
    installed(tmp_path, "kserve-0.21.0-py3.11.egg-info", "kserve", "0.21.0")
    assert sys.modules["install_guard"].real_kserve_in([str(tmp_path)]) == f"kserve 0.21.0 in {tmp_path}"


def test_neighbours_named_like_kserve_are_not_it(backend: ModuleType, tmp_path: Path):
    guard = sys.modules["install_guard"]
    for name in ("kserve-sdk", "kserve-sdk-alias", "kserve-storage"):
        installed(tmp_path, f"{name.replace('-', '_')}-0.1.0.dist-info", name, "0.1.0")
    assert guard.real_kserve_in([str(tmp_path), str(tmp_path / "missing")]) is None
    guard.refuse_over_real_kserve([str(tmp_path)])  # returns: nothing to refuse


def test_the_target_is_this_interpreters_environment(backend: ModuleType):
    folders = sys.modules["install_guard"].target_directories()
    assert sysconfig.get_paths()["purelib"] in folders and sysconfig.get_paths()["platlib"] in folders


@pytest.mark.parametrize("hook", ["prepare_metadata_for_build_wheel", "prepare_metadata_for_build_editable",
                                  "build_wheel", "build_editable"])
def test_every_build_hook_refuses_before_building(backend: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path, hook: str):
    target = tmp_path / "site-packages"
    installed(target, "kserve-0.21.0.dist-info", "kserve", "0.21.0")
    monkeypatch.setattr(sys.modules["install_guard"], "target_directories", lambda: [str(target)])
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(SystemExit, match=r"the real KServe \(kserve 0\.21\.0 in .*site-packages\) is installed"):
        getattr(backend, hook)(str(out))
    assert list(out.iterdir()) == []  # nothing was built

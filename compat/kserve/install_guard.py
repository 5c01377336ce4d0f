"""Refuse to build kserve-sdk-alias for an environment that holds the real KServe.

Both distributions provide the ``kserve`` package: installing this one there would overwrite KServe's
``kserve/__init__.py``, and uninstalling either afterwards would leave the other broken. The build backend
(build_backend.py) calls :func:`refuse_over_real_kserve` before it builds anything.

pip builds in an isolated environment whose ``sys.path`` hides the target's site-packages, so the target is
found through ``sysconfig`` (the interpreter pip runs is the target's) rather than through ``sys.path``.
"""
import sysconfig
from importlib import metadata
from typing import Iterable, List, Optional

DISTRIBUTION = "kserve-sdk-alias"
REAL = "kserve"


def target_directories() -> List[str]:
    """The folders an install into this interpreter's environment writes packages to."""
    paths = sysconfig.get_paths()
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def real_kserve_in(directories: Iterable[str]) -> Optional[str]:
    """``"kserve <version> in <folder>"`` for the first real ``kserve`` distribution installed in one of
    ``directories``, or None when there is none."""
    for folder in directories:
        for dist in metadata.distributions(name=REAL, path=[folder]):
            return f"{REAL} {dist.version} in {folder}"
    return None


def refusal(found: str) -> str:
    """What the build says when it finds the real KServe (``found`` as :func:`real_kserve_in` gives it)."""
    return (f"{DISTRIBUTION} is not installed: the real KServe ({found}) is installed in this environment, and "
            f"both provide the `kserve` package, so installing {DISTRIBUTION} would overwrite KServe's files.\n"
            "Either keep KServe and run your scripts on kserve_sdk with `python -m kserve_sdk model.py` (no "
            f"{DISTRIBUTION} needed), or remove KServe first (`pip uninstall kserve`) and install {DISTRIBUTION} "
            "again. See docs/kserve-compat.md.")


def refuse_over_real_kserve(directories: Optional[Iterable[str]] = None) -> None:
    """Stop the build with :func:`refusal`'s message when one of ``directories`` (by default the target
    environment's, :func:`target_directories`) holds the real KServe."""
    found = real_kserve_in(target_directories() if directories is None else directories)
    if found is not None:
        raise SystemExit(refusal(found))

"""Run code written for KServe unchanged: ``import kserve`` and ``import kserve.<x>`` give ``kserve_sdk`` and
``kserve_sdk.<x>``.

:func:`install` puts a finder first on ``sys.meta_path``. For a name under ``kserve`` it imports the
``kserve_sdk`` module of the same path and registers that very object under the ``kserve`` name too, so
``kserve.Model is kserve_sdk.Model`` and no module is loaded twice. Being first, the finder wins over a
real ``kserve`` installed beside this package, in this process only (nothing is written to disk; forked
workers inherit it). A ``kserve.<x>`` that has no ``kserve_sdk.<x>`` fails with a ModuleNotFoundError
saying so.
"""
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Optional, Sequence

ALIAS = "kserve"
TARGET = "kserve_sdk"
DOCS = "docs/kserve-compat.md"


def target_name(fullname: str) -> Optional[str]:
    """``kserve.x.y`` -> ``kserve_sdk.x.y``; None for a name outside ``kserve``."""
    if fullname == ALIAS:
        return TARGET
    if fullname.startswith(ALIAS + "."):
        return TARGET + fullname[len(ALIAS):]
    return None


def _import_target(fullname: str, target: str) -> types.ModuleType:
    """The ``kserve_sdk`` module standing for ``fullname``; a clear error when there is none."""
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as e:
        # Only a missing kserve_sdk module is ours to explain; a dependency the module itself lacks
        # (e.g. ray for kserve_sdk.ray) keeps its own message.
        if e.name is None or not (target == e.name or target.startswith(e.name + ".")):
            raise
        raise ModuleNotFoundError(
            f"No module named '{fullname}': kserve_sdk has no module '{e.name}' to stand for it "
            f"(the kserve modules kserve_sdk provides are listed in {DOCS})", name=fullname) from None


class _AliasLoader(importlib.abc.Loader):
    """Hands the import system the already-imported ``kserve_sdk`` module instead of a new one."""

    def __init__(self, module: types.ModuleType):
        self.module = module

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        # A throwaway: the import system stamps the spec on what this returns, and the real module must
        # keep its own. exec_module swaps the real one in before anyone sees this.
        return types.ModuleType(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        sys.modules[module.__name__] = self.module


class KServeAliasFinder(importlib.abc.MetaPathFinder):
    """The meta-path finder that answers ``kserve`` and ``kserve.*`` with ``kserve_sdk`` modules."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[types.ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        real = target_name(fullname)
        if real is None:
            return None
        module = _import_target(fullname, real)
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(module),
                                              is_package=hasattr(module, "__path__"))


def installed() -> bool:
    """Whether the ``kserve`` alias is active in this process."""
    return any(isinstance(finder, KServeAliasFinder) for finder in sys.meta_path)


def install() -> None:
    """Make ``kserve`` and ``kserve.*`` resolve to ``kserve_sdk`` in this process (a second call does nothing).

    Raises ImportError when another ``kserve`` has been imported already: its objects would not be ours.
    """
    if installed():
        return
    imported = [name for name in sys.modules if target_name(name) is not None]
    foreign = [name for name in imported if sys.modules[name] is not sys.modules.get(target_name(name))]
    if foreign:
        raise ImportError(f"a real '{foreign[0]}' was imported before kserve_sdk's kserve alias was installed: "
                          "put `import kserve_sdk.as_kserve` before any kserve import, or run the script with "
                          "`python -m kserve_sdk script.py`")
    sys.meta_path.insert(0, KServeAliasFinder())

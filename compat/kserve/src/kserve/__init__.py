"""``kserve``, answered by kserve_sdk (the kserve-sdk-alias distribution).

``import kserve`` gives the ``kserve_sdk`` package itself and ``import kserve.<x>`` gives ``kserve_sdk.<x>``:
the same module objects, as ``python -m kserve_sdk model.py`` gives them, so a script written for KServe runs
unchanged with ``python model.py``. This module only installs kserve_sdk's import alias
(kserve_sdk/server/import_alias.py) and steps aside for ``kserve_sdk``; docs/kserve-compat.md lists the
modules. ``pip uninstall kserve-sdk-alias`` takes it away again.

Installed over the real KServe (both provide ``kserve``), it refuses to import and says what to do.
"""
import os
import sys
from importlib import metadata

_HERE = os.path.dirname(os.path.realpath(__file__))


def _real_kserve_beside_us() -> str:
    """``"kserve <version>"`` when a real ``kserve`` distribution is installed in the folder this package is in
    (or lists files in this package's folder), else ``""``."""
    site_folder = os.path.dirname(_HERE)
    for dist in metadata.distributions(name="kserve"):
        if os.path.realpath(str(dist.locate_file(""))) == site_folder:
            return f"kserve {dist.version}"
        for file in dist.files or ():
            if file.parts[:1] != ("kserve",):
                continue
            if os.path.dirname(os.path.realpath(str(dist.locate_file(file)))) == _HERE:
                return f"kserve {dist.version}"
    return ""


_real = _real_kserve_beside_us()
if _real:
    raise ImportError(
        f"`kserve` here is kserve-sdk-alias, installed together with the real KServe ({_real}) in "
        f"{os.path.dirname(_HERE)}: both provide the `kserve` package and their files overlap. Keep one: "
        "`pip uninstall kserve-sdk-alias` and then `pip install --force-reinstall kserve` to go back to KServe "
        "(and run scripts on kserve_sdk with `python -m kserve_sdk model.py`), or `pip uninstall kserve "
        "kserve-sdk-alias` and then install kserve-sdk-alias again. See docs/kserve-compat.md.", name="kserve")


def _become_kserve_sdk() -> None:
    """Install kserve_sdk's alias and leave ``kserve_sdk`` in sys.modules under this module's name."""
    # The alias refuses a `kserve` module imported before it (a real KServe's objects would not be ours); this
    # one is only a stand-in, so it leaves sys.modules first. The import statement hands out what sys.modules
    # holds under the name once this module has run.
    del sys.modules[__name__]
    try:
        import kserve_sdk
    except ModuleNotFoundError as e:
        if e.name != "kserve_sdk":
            raise
        raise ModuleNotFoundError("kserve-sdk-alias answers `import kserve` with kserve_sdk, which is not "
                                  "installed: install kserve-sdk (from a clone: `pip install .`)",
                                  name="kserve") from None
    from kserve_sdk.server.import_alias import install

    install()
    sys.modules[__name__] = kserve_sdk


_become_kserve_sdk()

"""Serving a model repository: a folder of models, each in versions, described by ``model-settings.json``
files in MLServer's shape (and Triton's numbered version folders), within a memory budget.

:func:`scan` finds the models, their versions and their problems; :func:`build_model` and :func:`prepare`
make a version's model object ready for its ``load()``; :class:`LoadedSet` says which idle models to evict so
one more fits; :func:`rss_bytes` and :func:`model_size` measure a model. Those start nothing. The server side
is :mod:`.manager`'s ``RepositoryManager`` (the control modes, lazy loads, eviction, the index), which the
data plane drives through hooks, with :mod:`.options` (the flags) and :mod:`.loading` (a load's work on a load
thread). See docs/model-repository.md.
"""
from .errors import RepositoryError
from .implementations import build_model, prepare, runtime_of
from .lru import LoadedSet, NoRoom
from .memory import model_size, rss_bytes
from .scan import UNVERSIONED, RepositoryEntry, VersionSource, fingerprinted, scan
from .settings import SETTINGS_FILE, ModelSettings, read_settings
from .versions import VersionPolicy, highest, ordered, version_key

__all__ = ["RepositoryError", "build_model", "prepare", "runtime_of", "LoadedSet", "NoRoom", "model_size",
           "rss_bytes", "UNVERSIONED", "RepositoryEntry", "VersionSource", "fingerprinted", "scan", "SETTINGS_FILE",
           "ModelSettings", "read_settings", "VersionPolicy", "highest", "ordered", "version_key"]

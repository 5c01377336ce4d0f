"""Read a model repository: which models it holds, their versions, and what is wrong with any of them.

Two layouts, side by side in one repository:

- **Triton's**: a model folder whose sub-folders are numbered (``1/``, ``2/``, ...), each holding one
  version's files. The folder's ``model-settings.json`` (optional: without one, the model is named after
  the folder and its implementation is found from its files) applies to every version; a version folder
  may hold its own ``model-settings.json`` instead. Every sub-folder of such a model must be a number: any
  other makes the model unavailable.
- **MLServer's**: a folder holding a ``model-settings.json``; its version is ``parameters.version`` (any
  string; none: the model has one version, named ``""``). Several folders may carry the same ``name``
  with different versions, at any depth (``models/mnist/v1/``, ``models/mnist/v2/``).

A folder with neither is searched below, down to :data:`MAX_DEPTH` levels under the root; the search stops
at a model folder. A root holding a ``model-settings.json`` is one model (as ``mlserver start .`` serves
the folder it starts in). Hidden folders and ``__pycache__`` are skipped. Every problem found is returned in the
entries (never only logged): the caller logs each once.
"""
import dataclasses
import os
from typing import Dict, List, Optional, Tuple

from .errors import RepositoryError
from .fingerprint import fingerprint, skipped
from .settings import SETTINGS_FILE, ModelSettings, default_settings, read_settings
from .versions import ALL, LATEST_ONE, VersionPolicy, is_number, ordered

#: How deep under the repository's root model folders are looked for.
MAX_DEPTH = 4
#: The version of a model whose settings name none (MLServer's layout, no ``parameters.version``).
UNVERSIONED = ""


@dataclasses.dataclass(frozen=True)
class VersionSource:
    """One version of a model as the repository holds it: ``folder`` holds its files, ``settings`` say how
    to serve it, ``fingerprint`` changes when any of its files does. ``model_folder`` is the model's folder
    (the same as ``folder`` in MLServer's layout)."""

    name: str
    version: str
    folder: str
    settings: ModelSettings
    fingerprint: str
    model_folder: str = ""

    @property
    def location(self) -> str:
        """Where the model's files are: ``parameters.uri`` (relative to the version's folder; a remote URI as
        it is), else the version's folder."""
        uri = self.settings.uri
        if not uri:
            return self.folder
        if "://" in uri:
            return uri
        return os.path.normpath(os.path.join(self.folder, os.path.expanduser(uri)))


@dataclasses.dataclass(frozen=True)
class RepositoryEntry:
    """One model of the repository. ``versions`` are the versions to serve (chosen by its version policy,
    lowest first). ``problem``, when set, is why the model cannot be served at all (it is UNAVAILABLE, and
    ``versions`` is empty); ``version_problems`` maps a version the policy chose but that cannot be served
    to why, while the other versions are served."""

    name: str
    versions: Dict[str, VersionSource]
    problem: Optional[str] = None
    version_problems: Dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Found:
    """What one model folder says about its model."""

    name: str
    folder: str
    numbered: bool = False
    sources: Dict[str, VersionSource] = dataclasses.field(default_factory=dict)
    broken: Dict[str, str] = dataclasses.field(default_factory=dict)
    policies: List[Tuple[VersionPolicy, str]] = dataclasses.field(default_factory=list)
    problem: Optional[str] = None


def scan(root: str, fingerprints: bool = True) -> Dict[str, RepositoryEntry]:
    """Every model of the repository at ``root``, by name (in name order). A root that is not a folder
    raises RepositoryError; any other problem is in the entries. ``fingerprints=False`` leaves the
    served versions' fingerprints empty (``""``), for a caller that never compares them: the scan then reads
    no file beyond the settings."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise RepositoryError(root, "the model repository is not a folder")
    found: List[_Found] = []
    _visit(root, 0, found)
    by_name: Dict[str, List[_Found]] = {}
    for model in found:
        by_name.setdefault(model.name, []).append(model)
    return {name: _entry(name, by_name[name], fingerprints) for name in sorted(by_name)}


def fingerprinted(source: VersionSource) -> VersionSource:
    """``source`` with its fingerprint: over its folder's files, its model folder's own files (Triton's
    layout: ``model.py``, ``model-settings.json`` are every version's), and ``parameters.uri`` when it lies
    outside the version's folder."""
    also = []
    if source.model_folder and source.model_folder != source.folder:
        also += [os.path.join(source.model_folder, name) for name in _listing(source.model_folder)[1]]
    location = source.location
    folder = source.folder
    if "://" not in location and location != folder and not location.startswith(folder + os.sep):
        also.append(location)
    return dataclasses.replace(source, fingerprint=fingerprint(folder, also))


def _listing(folder: str) -> Tuple[List[str], List[str]]:
    """A folder's visible sub-folders and files, by name."""
    dirs: List[str] = []
    files: List[str] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if not skipped(entry.name):
                    (dirs if entry.is_dir() else files).append(entry.name)
    except OSError:
        pass
    return sorted(dirs), sorted(files)


def _visit(folder: str, depth: int, found: List[_Found]) -> None:
    dirs, files = _listing(folder)
    numbered = depth > 0 and any(is_number(name) for name in dirs)
    if numbered:
        found.append(_numbered_model(folder, dirs, files))
    elif SETTINGS_FILE in files:
        found.append(_settings_model(folder))
    elif depth < MAX_DEPTH:
        for name in dirs:
            _visit(os.path.join(folder, name), depth + 1, found)


def _settings_model(folder: str) -> _Found:
    """A model folder of MLServer's layout: one version, ``parameters.version``."""
    path = os.path.join(folder, SETTINGS_FILE)
    try:
        settings = read_settings(path)
    except RepositoryError as e:
        return _Found(os.path.basename(folder), folder, problem=str(e))
    version = settings.version or UNVERSIONED
    model = _Found(settings.name, folder)
    model.sources[version] = VersionSource(settings.name, version, folder, settings, "", folder)
    if settings.version_policy is not None:
        model.policies.append((settings.version_policy, path))
    return model


def _numbered_model(folder: str, dirs: List[str], files: List[str]) -> _Found:
    """A model folder of Triton's layout: numbered version folders."""
    path = os.path.join(folder, SETTINGS_FILE)
    try:
        settings = read_settings(path) if SETTINGS_FILE in files else default_settings(folder)
    except RepositoryError as e:
        return _Found(os.path.basename(folder), folder, numbered=True, problem=str(e))
    model = _Found(settings.name, folder, numbered=True)
    others = [name for name in dirs if not is_number(name)]
    if others:
        model.problem = (f"{folder}: sub-folder '{others[0]}' is not a version number; in a model with numbered "
                         "version folders (1/, 2/, ...) every sub-folder is a version")
    elif settings.version is not None:
        model.problem = (f"{settings.where}: parameters.version {settings.version!r} is set, but this model's "
                         "versions are its numbered folders: remove parameters.version")
    if model.problem:
        return model
    if settings.version_policy is not None:
        model.policies.append((settings.version_policy, settings.where))
    for version in dirs:
        _add_numbered_version(model, settings, os.path.join(folder, version), version)
    return model


def _add_numbered_version(model: _Found, settings: ModelSettings, folder: str, version: str) -> None:
    own = os.path.join(folder, SETTINGS_FILE)
    if os.path.isfile(own):
        try:
            settings = _version_settings(read_settings(own), settings, version)
        except RepositoryError as e:
            model.broken[version] = str(e)
            return
        if settings.version_policy is not None:
            model.policies.append((settings.version_policy, own))
    model.sources[version] = VersionSource(model.name, version, folder, settings, "", model.folder)


def _version_settings(own: ModelSettings, model: ModelSettings, version: str) -> ModelSettings:
    """A version folder's own settings, named as the model (a file that names no model takes its name)."""
    name = model.name if own.name == version else own.name
    if name != model.name:
        raise RepositoryError(own.where, f"names model {own.name!r}, but its folder is a version of {model.name!r}")
    if own.version not in (None, version):
        raise RepositoryError(own.where, f"parameters.version {own.version!r} differs from its folder's "
                                         f"number {version}")
    return dataclasses.replace(own, name=name)


def _entry(name: str, models: List[_Found], fingerprints: bool) -> RepositoryEntry:
    """One model's entry out of every folder that claims its name."""
    problems = [model.problem for model in models if model.problem]
    claims: Dict[str, List[str]] = {}
    for model in models:
        for version in [*model.sources, *model.broken]:
            claims.setdefault(version, []).append(model.folder)
    for version, folders in claims.items():
        if len(folders) > 1:
            what = f"model '{name}'" if version == UNVERSIONED else f"version '{version}' of model '{name}'"
            problems.append(f"folders {' and '.join(folders)} both hold {what}")
    policy, conflict = _policy(models)
    if conflict:
        problems.append(conflict)
    if problems:
        return RepositoryEntry(name, {}, "; ".join(problems))
    sources = {v: s for model in models for v, s in model.sources.items()}
    broken = {v: reason for model in models for v, reason in model.broken.items()}
    chosen, missing = policy.select([*sources, *broken])
    version_problems = {v: broken[v] for v in chosen if v in broken}
    for version in missing:
        version_problems[version] = (f"version {version} is listed in version_policy {policy.describe()}, but "
                                     f"no folder of model '{name}' holds it (versions found: "
                                     f"{', '.join(ordered(claims)) or 'none'})")
    versions = {v: fingerprinted(sources[v]) if fingerprints else sources[v] for v in chosen if v in sources}
    problem = None if versions else "no version to serve: " + "; ".join(version_problems.values())
    return RepositoryEntry(name, versions, problem, version_problems)


def _policy(models: List[_Found]) -> Tuple[VersionPolicy, Optional[str]]:
    """The model's version policy: the one its settings give (they must agree), else its layout's default:
    Triton's (the latest version) for numbered folders, MLServer's (every version) otherwise."""
    given = {policy: where for model in models for policy, where in model.policies}
    if len(given) > 1:
        said = " and ".join(f"{policy.describe()} in {where}" for policy, where in given.items())
        return LATEST_ONE, f"the model's settings give different version policies: {said}"
    if given:
        return next(iter(given)), None
    return (LATEST_ONE if any(model.numbered for model in models) else ALL), None

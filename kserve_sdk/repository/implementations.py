"""From a version in the repository to a model object, ready for its ``load()``.

``implementation`` in ``model-settings.json`` is one of:

- a runtime by name: ``sklearn``, ``xgboost``, ``lightgbm``, ``onnx`` (kserve_sdk.runtimes);
- MLServer's class of that runtime: ``mlserver_sklearn.SKLearnModel``, ``mlserver_xgboost.XGBoostModel``,
  ``mlserver_lightgbm.LightGBMModel`` (and ``mlserver_onnx.OnnxModel``, a name newer MLServer sources use),
  so an MLServer repository serves unchanged;
- a class, ``module:Class`` or ``module.Class``: the module is the file ``module.py`` in the version's
  folder, else in the model's folder, else an installed module. A file is imported under a name of its own
  (two models' ``model.py`` never collide) with its folder on ``sys.path`` meanwhile, as MLServer does.

Without ``implementation``, a version folder holding ``.onnx`` files is served by the ONNX runtime and one
holding ``.joblib`` / ``.pkl`` / ``.pickle`` files by the scikit-learn runtime; anything else needs it set.
"""
import hashlib
import importlib
import os
import sys
import threading
import types
from typing import Any, Dict, List, Optional, Tuple

from ..model import BaseKServeModel
from .errors import RepositoryError, first_line
from .scan import VersionSource
from .settings import SETTINGS_FILE

#: Our runtimes by name: (module, class, the module's tuple of model file extensions).
RUNTIMES: Dict[str, Tuple[str, str, str]] = {
    "sklearn": ("kserve_sdk.runtimes.sklearn", "SKLearnModel", "MODEL_EXTENSIONS"),
    "xgboost": ("kserve_sdk.runtimes.xgboost", "XGBoostModel", "BOOSTER_FILE_EXTENSIONS"),
    "lightgbm": ("kserve_sdk.runtimes.lightgbm", "LightGBMModel", "MODEL_EXTENSIONS"),
    "onnx": ("kserve_sdk.runtimes.onnx", "ONNXModel", "MODEL_EXTENSIONS"),
}
#: MLServer's runtime classes (as settings name them, short and long), and ours that serve the same files.
MLSERVER_RUNTIMES = {
    "mlserver_sklearn.SKLearnModel": "sklearn", "mlserver_sklearn.sklearn.SKLearnModel": "sklearn",
    "mlserver_xgboost.XGBoostModel": "xgboost", "mlserver_xgboost.xgboost.XGBoostModel": "xgboost",
    "mlserver_lightgbm.LightGBMModel": "lightgbm", "mlserver_lightgbm.lightgbm.LightGBMModel": "lightgbm",
    "mlserver_onnx.OnnxModel": "onnx", "mlserver_onnx.onnx.OnnxModel": "onnx",
}
#: What a version folder's files say when settings name no implementation.
INFERRED = (("onnx", (".onnx",)), ("sklearn", (".joblib", ".pkl", ".pickle")))
FORMS = ("a runtime (sklearn, xgboost, lightgbm, onnx)", "MLServer's class of one (mlserver_sklearn.SKLearnModel, "
         "mlserver_xgboost.XGBoostModel, mlserver_lightgbm.LightGBMModel)",
         "a class: module:Class or module.Class (module.py in the model's folder, or an installed module)")

#: Imports of a model's files change sys.path for their duration: one at a time.
_import_lock = threading.Lock()


def runtime_of(source: VersionSource) -> Optional[str]:
    """The runtime (``sklearn`` ...) that serves this version, or None when a class of its own does."""
    implementation = source.settings.implementation
    if implementation is None:
        return _inferred(source)
    name = implementation.strip()
    return name.lower() if name.lower() in RUNTIMES else MLSERVER_RUNTIMES.get(name)


def build_model(source: VersionSource) -> BaseKServeModel:
    """The model object for one version, not loaded yet (call :func:`prepare`, then its ``load()``). A
    runtime is built with its constructor's arguments, a class as ``Class(name)``. Raises RepositoryError
    naming the file and the problem: an unknown implementation, a module that raises at import, a class
    missing or not a model."""
    runtime = runtime_of(source)
    if runtime is not None:
        module, class_name, _ = RUNTIMES[runtime]
        cls = getattr(importlib.import_module(module), class_name)
        model = cls(source.name, source.folder)
        if (source.settings.implementation or "").strip() in MLSERVER_RUNTIMES and runtime != "onnx":
            model.output_name, model.output_as_column = "predict", True  # answered as MLServer's runtime answers
        return model
    cls = _find_class(source)
    try:
        model = cls(source.name)
    except Exception as e:
        raise RepositoryError(source.settings.where, f"{cls.__name__}({source.name!r}) raised {first_line(e)}") from e
    if not isinstance(model, BaseKServeModel):
        raise RepositoryError(source.settings.where, f"implementation {source.settings.implementation!r} is a "
                                                     f"{type(model).__name__}, not a kserve_sdk.Model")
    return model


def _inferred(source: VersionSource) -> str:
    location = source.location
    try:
        names = os.listdir(location) if os.path.isdir(location) else [os.path.basename(location)]
    except OSError:
        names = []
    for runtime, extensions in INFERRED:
        if any(name.endswith(extensions) for name in names):
            return runtime
    raise RepositoryError(source.settings.where, f"sets no implementation and its files ({location}) hold no "
                                                 f"model file it can be told from: set \"implementation\" to "
                                                 f"{'; or '.join(FORMS)}")


def _find_class(source: VersionSource) -> type:
    implementation = (source.settings.implementation or "").strip()
    module_name, sep, class_name = implementation.partition(":")
    if not sep:
        module_name, _, class_name = implementation.rpartition(".")
    if not module_name or not class_name:
        raise RepositoryError(source.settings.where, f"unknown implementation {implementation!r}; it must be "
                                                     f"{'; or '.join(FORMS)}")
    module = _module(source, module_name)
    found: Any = module
    for part in class_name.split("."):
        found = getattr(found, part, None)
    if not isinstance(found, type):
        raise RepositoryError(source.settings.where, f"implementation {implementation!r}: module "
                                                     f"{module_name!r} has no class {class_name!r}")
    return found


def _module(source: VersionSource, module_name: str) -> types.ModuleType:
    relative = module_name.replace(".", os.sep) + ".py"
    folders = list(dict.fromkeys((source.folder, source.model_folder or source.folder)))
    for folder in folders:
        path = os.path.join(folder, relative)
        if os.path.isfile(path):
            return import_file(path)
    try:
        return importlib.import_module(module_name)
    except Exception as e:
        missing = getattr(e, "name", None) if isinstance(e, ModuleNotFoundError) else None
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise RepositoryError(source.settings.where, f"unknown implementation {source.settings.implementation!r}"
                                                         f": no {relative} in {' or '.join(folders)} and no "
                                                         f"installed module {module_name!r}; it must be "
                                                         f"{'; or '.join(FORMS)}") from None
        raise RepositoryError(source.settings.where, f"importing module {module_name!r} raised {first_line(e)}") from e


def import_file(path: str) -> types.ModuleType:
    """Import a Python file under a module name of its own (from its path: importing it again, after it
    changed, replaces the module), with its folder on ``sys.path`` while it runs so it can import its
    neighbours. No bytecode is written beside it. A file that raises raises RepositoryError naming it and
    the exception's first line."""
    path = os.path.abspath(path)
    unique = "kserve_sdk_repository_" + hashlib.blake2b(path.encode(), digest_size=8).hexdigest()
    try:
        with open(path, encoding="utf-8") as f:
            code = compile(f.read(), path, "exec")
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as e:
        raise RepositoryError(path, f"cannot be imported: {first_line(e)}") from e
    module = types.ModuleType(unique)
    module.__file__ = path
    with _import_lock:
        sys.modules[unique] = module  # dataclasses and pickle look the module up while it runs
        sys.path.insert(0, os.path.dirname(path))
        try:
            exec(code, module.__dict__)
        except BaseException as e:
            sys.modules.pop(unique, None)
            if not isinstance(e, Exception):
                raise
            raise RepositoryError(path, f"importing it raised {first_line(e)}") from e
        finally:
            _remove_first(sys.path, os.path.dirname(path))
    return module


def _remove_first(items: List[str], item: str) -> None:
    try:
        items.remove(item)
    except ValueError:
        pass


def prepare(model: Any, source: VersionSource) -> Any:
    """Set what the repository says on a model built by :func:`build_model`, before its ``load()``:

    - ``model.model_dir``: where its files are: the version's folder, or ``parameters.uri`` (relative to the
      version's folder). A runtime gets its model file itself, so a folder holding several needs no guess:
      the one ``parameters.uri`` names, else the only one with the runtime's extensions, else the one named
      ``model.<extension>`` (MLServer's well-known names); several others are an error naming them. A class
      gets the folder (of the file ``parameters.uri`` names, when it names a file);
    - ``model.model_uri``: ``parameters.uri`` resolved (a file or a folder), else the version's folder;
    - ``model.version``: the version's name (``"1"``, ``"v0.1.0"``; ``""`` for an unversioned model);
    - ``model.settings_extra``: MLServer's ``parameters.extra`` (a dict; empty when unset), for the model to
      read in ``load()``;
    - from the settings, when they set them: ``max_batch_size``, ``max_latency_ms`` (``max_batch_latency_ms``,
      or MLServer's ``max_batch_time`` in seconds × 1000), ``scheduling`` and ``warmup``.

    Returns the model."""
    settings = source.settings
    location = source.location
    runtime = runtime_of(source)
    if "://" in location:
        model.model_dir = location
    elif runtime is not None:
        model.model_dir = _model_file(source, runtime, location)
    else:
        model.model_dir = location if os.path.isdir(location) else os.path.dirname(location)
    model.model_uri = location
    model.version = source.version
    model.settings_extra = dict(settings.extra)
    if settings.max_batch_size is not None:
        model.max_batch_size = settings.max_batch_size
    if settings.max_batch_latency_ms is not None:
        model.max_latency_ms = settings.max_batch_latency_ms
    if settings.scheduling is not None:
        model.scheduling = settings.scheduling
    if settings.warmup is not None:
        model.warmup = list(settings.warmup)
    return model


def _model_file(source: VersionSource, runtime: str, location: str) -> str:
    """The file a runtime loads; a folder without one is left to the runtime, whose error names it."""
    if not os.path.isdir(location):
        return location
    module, _, extensions_name = RUNTIMES[runtime]
    extensions = tuple(getattr(importlib.import_module(module), extensions_name))
    names = sorted(name for name in os.listdir(location) if name.endswith(extensions) and name != SETTINGS_FILE
                   and os.path.isfile(os.path.join(location, name)))
    if len(names) > 1:
        well_known = [name for name in names if os.path.splitext(name)[0] == "model"]
        if len(well_known) != 1:
            raise RepositoryError(source.settings.where, f"{len(names)} {runtime} model files in {location} "
                                                         f"({', '.join(names)}): set parameters.uri to the one "
                                                         "to serve")
        names = well_known
    return os.path.join(location, names[0]) if names else location

"""The server's side of a model repository (``--model_repository``): which versions are loaded, loading and
unloading them under the control mode, within the memory budget, and the repository's index.

A :class:`RepositoryManager` owns the repository's models. It knows nothing of the wire or the data plane:
the data plane hands it :class:`ServingHooks` (serve a model object as a version of a name, withdraw it,
warm it up) and calls :meth:`RepositoryManager.begin` / :meth:`RepositoryManager.end` around each call of a
model, so that a model with calls in flight is never evicted and the least recently used goes first.

Control modes (Triton's, plus ``lazy``):

- ``none``: every version the version policies choose is loaded at start; the repository is ready when they
  have been (a version that fails is UNAVAILABLE, the others are served);
- ``explicit``: only the repository API (``POST /v2/repository/models/{m}/load`` / ``unload``) loads and
  unloads; a load reads that model from the repository's folder again;
- ``poll``: as ``none``, then the folder is scanned again every ``--repository_poll_secs``: a new version is
  loaded, a changed one reloaded (the old object answers until the new one is ready, and is stopped once its
  calls in flight, streams too, have ended), a removed one unloaded;
- ``lazy``: a version loads on its first request; concurrent first requests wait for one load; a failed load
  answers 503 with its reason and is tried again (the model read again) by a request after a backoff.

Loads run on ``--model_load_threads`` threads (build, ``load()``); ``start()``, the engine and the warm-up run
on the event loop. See docs/model-repository.md.
"""
import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Dict, Iterable, List, NamedTuple, Optional, Set, Tuple

from .. import executor, metrics
from ..errors import InferenceError, ModelNotFound, ModelNotReady, ModelUnavailable, ModelVersionNotFound
from ..logging import logger
from .errors import RepositoryError, first_line
from .loading import Built, build_and_load
from .lru import LoadedSet, NoRoom
from .memory import HeapTrim, model_size, rss_bytes
from .options import LAZY, NONE, POLL, RepositoryOptions, resolve_location
from .scan import RepositoryEntry, VersionSource, fingerprinted, scan
from .versions import highest, ordered

#: Index states (Triton's).
READY, LOADING, UNLOADING, UNAVAILABLE = "READY", "LOADING", "UNLOADING", "UNAVAILABLE"
#: Index reasons.
UNLOADED = "unloaded"
EVICTED = "evicted to make room"
#: How long an unload waits for the calls in flight on a model (streams too) before it stops it anyway.
DRAIN_SECONDS = 60.0
#: A failed lazy load is tried again after this long, doubling up to the most.
FIRST_BACKOFF_SECONDS, MOST_BACKOFF_SECONDS = 1.0, 30.0

Key = Tuple[str, str]


class ServingHooks(NamedTuple):
    """What the data plane does for the repository: ``serve(name, version, model, default)`` makes ``model``
    answer as that version (and, ``default``, requests naming no version), replacing the object that did;
    ``withdraw(name, version, model)`` stops routing calls to it (nothing when another object serves it now);
    ``warm_up(name, model)`` runs its warm-up requests and returns None or why they failed; ``forget(name)``
    lets go of what the process keeps for a name none of whose versions is loaded (its metric series and
    statistics in memory; their files keep the counts)."""

    serve: Callable[[str, str, Any, bool], None]
    withdraw: Callable[[str, str, Any], None]
    warm_up: Callable[[str, Any], Awaitable[Optional[str]]]
    forget: Callable[[str], None] = lambda name: None


class LoadFailed(RuntimeError):
    """A version could not be loaded; its text is the reason (one line naming the file or folder)."""


class _Loaded:
    """One loaded (or loading) model object of a version: its key in the LoadedSet, so two objects of one
    version (a reload beside the old one) are counted apart."""

    __slots__ = ("name", "version", "source", "model")

    def __init__(self, source: VersionSource):
        self.name, self.version, self.source = source.name, source.version, source
        self.model: Any = None

    @property
    def key(self) -> Key:
        return self.name, self.version


def described(name: str, version: str) -> str:
    """A version as messages name it."""
    return f"model '{name}'" + (f" version {version}" if version else "")


class RepositoryManager:
    """The models of one repository folder, loaded and unloaded under ``options`` (see the module's text)."""

    def __init__(self, root: str, options: RepositoryOptions, hooks: ServingHooks,
                 entries: Dict[str, RepositoryEntry]):
        self.root, self.options, self._hooks = root, options, hooks
        self._entries = entries
        self._served: Dict[str, Dict[str, _Loaded]] = {}  # name -> version -> the object serving it
        self._by_model: Dict[int, _Loaded] = {}  # id(model) -> its record, for begin / end
        self._states: Dict[Key, Tuple[str, str]] = {}  # versions not served: (state, reason)
        self._loading: Dict[Key, asyncio.Future[_Loaded]] = {}
        self._retry: Dict[str, Tuple[float, float]] = {}  # name -> (when a lazy load may try again, its backoff)
        self._unloaded: Set[str] = set()  # names unloaded through the API: loaded again only by a load
        self._attempted: Dict[Key, str] = {}  # the fingerprint each version was last loaded (or tried) from
        self._sizes: Dict[Key, int] = {}  # what each version took when it was last loaded
        self._lru = LoadedSet()
        self._pool: Optional[ThreadPoolExecutor] = None
        self._heap = HeapTrim(lambda *call: self._threads().submit(*call))
        self._tasks: Set[asyncio.Task[Any]] = set()
        self._said: Set[str] = set()
        self._reserved: Set[str] = set()  # names the server's own models have: not served from the repository
        #: Whether the repository's start-up loads have finished (``none``, ``poll``); at once otherwise.
        self.ready = options.mode not in (NONE, POLL)

    @classmethod
    def open(cls, options: RepositoryOptions, hooks: ServingHooks, reserved: Iterable[str] = ()) -> "RepositoryManager":
        """Read the repository ``options`` names (downloading it first when it is a storage URI) and log each
        problem found once. ``reserved``: names the server's own models have; the repository's models of those
        names are not served. Raises RepositoryError when the repository cannot be read at all."""
        root = resolve_location(options.location)
        entries = scan(root, fingerprints=options.mode == POLL)
        manager = cls(root, options, hooks, {})
        manager._reserved = set(reserved)
        manager._entries = manager._accepted(entries)
        served = sum(1 for entry in manager._entries.values() if not entry.problem)
        logger.info("Model repository %s: %d model%s (--model_control_mode %s)", root, served,
                    "" if served == 1 else "s", options.mode)
        return manager

    # --- the call path ----------------------------------------------------------------------------------------
    def knows(self, name: str) -> bool:
        """Whether the repository holds a model of this name (served, loadable or broken)."""
        return name in self._entries

    def begin(self, model: Any) -> None:
        """A call of ``model`` starts: it is the most recently used, and not evicted until :meth:`end`."""
        record = self._by_model.get(id(model))
        if record is not None:
            self._lru.begin(record)

    def end(self, model: Any) -> None:
        """A call of ``model`` begun by :meth:`begin` has ended."""
        record = self._by_model.get(id(model))
        if record is not None:
            self._lru.end(record)

    def served_model(self, name: str, version: Optional[str]) -> Any:
        """The object serving ``version`` of ``name`` (None: the default version) now; else raises why not:
        ModelNotFound, ModelVersionNotFound naming the versions served, ModelUnavailable with its state, or (a
        lazy model not loaded) ModelNotReady."""
        entry = self._entry(name)
        asked = self._version_asked(entry, version)
        record = self._served.get(name, {}).get(asked)
        if record is None:
            raise self._not_served(name, asked)
        return record.model

    async def acquire(self, name: str, version: Optional[str]) -> Any:
        """:meth:`served_model`, loading the version first in ``lazy`` mode (concurrent callers wait for one
        load). A failed load is ModelNotReady (503, with ``Retry-After``) with its reason; NoRoom when the budget
        holds only busy or pinned models."""
        try:
            return self.served_model(name, version)
        except (ModelNotReady, ModelUnavailable):
            if self.options.mode != LAZY or name in self._unloaded:
                raise
        self._check_backoff(name)
        if name in self._retry:  # its last attempt failed: read the model again, it may have been fixed
            await self._refresh(name)
        broken = self._entries.get(name)
        if broken is not None and broken.problem:  # read again by a request after the backoff
            self._note_failure(name)
            raise self._failed_lazily(name, broken.problem)
        entry = self._entry(name)
        asked = self._version_asked(entry, version)
        source = entry.versions.get(asked)
        if source is None:
            raise self._not_served(name, asked)
        try:
            record = await self._load_once(source)
        except LoadFailed as e:
            raise self._failed_lazily(name, str(e)) from None
        return record.model

    # --- what is served -------------------------------------------------------------------------------------
    def versions_served(self, name: str) -> List[str]:
        """The versions of ``name`` a request may name, lowest first: those loaded, and in ``lazy`` mode every
        version its policy chooses."""
        served = set(self._served.get(name, ()))
        entry = self._entries.get(name)
        if self.options.mode == LAZY and entry is not None and name not in self._unloaded:
            served |= set(entry.versions)
        return ordered(served)

    def index(self) -> List[Dict[str, str]]:
        """Every version of every model in the repository, loaded or not: ``{"name", "version"?, "state"?,
        "reason"?}``. A version never loaded has no state (Triton lists a model it has not loaded by name)."""
        entries: List[Dict[str, str]] = []
        for name in sorted(self._entries):
            entry = self._entries[name]
            if entry.problem:
                entries.append({"name": name, "state": UNAVAILABLE, "reason": entry.problem})
                continue
            served = self._served.get(name, {})
            for version in ordered({*entry.versions, *entry.version_problems, *served}):
                if version in served:
                    state, reason = READY, ""
                elif version in entry.version_problems:
                    state, reason = UNAVAILABLE, entry.version_problems[version]
                else:
                    state, reason = self._states.get((name, version), ("", ""))
                item = {"name": name}
                for field, text in (("version", version), ("state", state), ("reason", reason)):
                    if text:
                        item[field] = text
                entries.append(item)
        return entries

    def _entry(self, name: str) -> RepositoryEntry:
        entry = self._entries.get(name)
        if entry is None:
            raise ModelNotFound(name)
        if entry.problem:
            raise ModelUnavailable(name, f"is {UNAVAILABLE}: {entry.problem}")
        return entry

    def _version_asked(self, entry: RepositoryEntry, version: Optional[str]) -> str:
        """The version of the entry a request names (its default when it names none); ModelVersionNotFound
        for one the model does not serve."""
        if not version:
            default = self._default_version(entry.name)
            return default if default is not None else (highest(entry.versions) or "")
        if version in entry.versions or version in entry.version_problems:
            return version
        if version.isascii() and version.isdigit():
            for known in entry.versions:
                if known.isdigit() and int(known) == int(version):
                    return known
            if set(entry.versions) == {""} and int(version) == 1:  # a model without versions serves "1"
                return ""
        raise ModelVersionNotFound(entry.name, version, ", ".join(self.versions_served(entry.name)) or "none")

    def _default_version(self, name: str) -> Optional[str]:
        """The version that answers requests naming none: in ``lazy`` mode the highest the policy chooses
        (loaded when asked), otherwise the highest loaded."""
        if self.options.mode == LAZY:
            entry = self._entries.get(name)
            return highest(entry.versions) if entry is not None else None
        return highest(self._served.get(name, ()))

    def _not_served(self, name: str, version: str) -> Exception:
        """Why ``version`` of ``name`` does not answer now."""
        state, reason = self._states.get((name, version), ("", ""))
        entry = self._entries.get(name)
        if entry is not None and version in entry.version_problems:
            state, reason = UNAVAILABLE, entry.version_problems[version]
        if self.options.mode == LAZY and name not in self._unloaded and not state:
            return ModelNotReady(name, "It is not loaded: it loads on its first inference request "
                                       "(--model_control_mode lazy).")
        if reason == UNLOADED:
            detail = f"was unloaded: load it again (POST /v2/repository/models/{name}/load) to serve it."
        elif state:
            detail = f"is {state}" + (f": {reason}" if reason else ".")
        else:
            detail = f"is not loaded: load it with POST /v2/repository/models/{name}/load."
        if self._served.get(name):  # other versions answer
            error = ModelVersionNotFound(name, version or "1", ", ".join(self.versions_served(name)))
            error.reason += f" Version {version} {detail}"
            return error
        return ModelUnavailable(name, detail if not version else f"version {version} {detail}")

    # --- lazy loads: backoff --------------------------------------------------------------------------------
    def _check_backoff(self, name: str) -> None:
        retry = self._retry.get(name)
        if retry is None:
            return
        wait = retry[0] - time.monotonic()
        if wait > 0:
            reason = self._last_failure(name)
            error = ModelNotReady(name, f"Its last load failed: {reason}; it is tried again in {wait:.1f} s.")
            error.retry_after = max(1, round(wait))  # type: ignore[attr-defined]  # read by lifecycle.Failure
            raise error

    def _last_failure(self, name: str) -> str:
        entry = self._entries.get(name)
        if entry is not None and entry.problem:
            return entry.problem
        reasons = [reason for (model, _), (state, reason) in self._states.items() if model == name and reason]
        return reasons[-1] if reasons else "unknown"

    def _failed_lazily(self, name: str, reason: str) -> ModelNotReady:
        backoff = self._retry.get(name, (0.0, FIRST_BACKOFF_SECONDS))[1]
        error = ModelNotReady(name, f"Its load failed: {reason}; it is tried again after {backoff:g} s.")
        error.retry_after = max(1, round(backoff))  # type: ignore[attr-defined]  # read by lifecycle.Failure
        return error

    def _note_failure(self, name: str) -> None:
        previous = self._retry.get(name)
        backoff = FIRST_BACKOFF_SECONDS if previous is None else min(previous[1] * 2, MOST_BACKOFF_SECONDS)
        self._retry[name] = (time.monotonic() + backoff, backoff)

    # --- loading --------------------------------------------------------------------------------------------
    def _threads(self) -> ThreadPoolExecutor:
        """The load threads, made in the process that loads (a forked worker makes its own)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.options.load_threads, thread_name_prefix="model-load")
        return self._pool

    def _load_once(self, source: VersionSource) -> "asyncio.Future[_Loaded]":
        """The load of this version: the one in progress, or a new one (awaited by every caller at once)."""
        key = (source.name, source.version)
        future = self._loading.get(key)
        if future is None:
            future = self._loading[key] = asyncio.ensure_future(self._load(source))
            future.add_done_callback(lambda done: self._load_done(key, done))
        return asyncio.shield(future)

    def _load_done(self, key: Key, done: "asyncio.Future[_Loaded]") -> None:
        if self._loading.get(key) is done:
            del self._loading[key]
        if not done.cancelled():
            done.exception()  # retrieved: a load nobody waits for any longer fails quietly (it logged why)

    async def _load(self, source: VersionSource) -> _Loaded:
        """Load one version and serve it: make room, load off the loop, start, warm up, then serve it (in place
        of the object that served it, which is stopped once its calls have ended). Raises NoRoom or LoadFailed
        (logged, the version UNAVAILABLE with the reason, unless an older object still serves it)."""
        record, key, started = _Loaded(source), (source.name, source.version), time.monotonic()
        try:
            self._make_room(key, self._sizes.get(key, 0))
        except NoRoom:
            metrics.repository_load_finished("no_room", time.monotonic() - started)
            raise
        self._lru.add(record, self._sizes.get(key, 0), source.settings.pinned)
        self._lru.begin(record)  # busy while it loads: never chosen to make room
        replacing = key in self._served.get(source.name, {})
        if not replacing:
            self._states[key] = (LOADING, "")
        self._attempted[key] = source.fingerprint
        try:
            await self._bring_up(record)
        except BaseException as e:
            if record.model is not None:
                self._hooks.withdraw(source.name, source.version, record.model)
            _stop(record.model)
            self._drop(record)
            if isinstance(e, NoRoom):
                self._states.pop(key, None)
                metrics.repository_load_finished("no_room", time.monotonic() - started)
                raise
            if not isinstance(e, Exception):
                self._states.pop(key, None)
                raise
            reason = self._failure_reason(record, e)
            if source.name in self._unloaded:  # unloaded through the API while it loaded: not a failure
                self._states[key] = (UNAVAILABLE, UNLOADED)
                raise LoadFailed(reason) from None
            logger.error("%s", reason)
            logger.debug("the load of %s failed", described(*key), exc_info=e)
            if not replacing:
                self._states[key] = (UNAVAILABLE, reason)
            self._note_failure(source.name)
            metrics.repository_load_finished("failed", time.monotonic() - started)
            raise LoadFailed(reason) from None
        self._lru.end(record)
        self._retry.pop(source.name, None)
        metrics.repository_load_finished("loaded", time.monotonic() - started)
        logger.info("%s loaded in %.2f s (%.1f MB)", described(*key), time.monotonic() - started,
                    self._sizes.get(key, 0) / 2 ** 20)
        return record

    async def _bring_up(self, record: _Loaded) -> None:
        built: Built = await asyncio.get_running_loop().run_in_executor(self._threads(), build_and_load,
                                                                          record.source)
        record.source, record.model = built.source, built.model
        self._attempted[record.key] = built.source.fingerprint
        self._by_model[id(built.model)] = record
        model = built.model
        if built.pending is not None:
            await built.pending
        size = model_size(model, built.rss_before, rss_bytes())
        if not getattr(model, "ready", True):
            raise RuntimeError("its load() left it not ready (set self.ready = True when it can serve)")
        model.start()
        if getattr(model, "engine", False):
            await model.start_engine()
        failure = await self._hooks.warm_up(record.name, model)
        if failure is not None:
            raise LoadFailed(failure)
        if record.name in self._unloaded:  # the repository API unloaded the model meanwhile
            raise LoadFailed("it was unloaded while it loaded")
        self._fit(record, size)
        self._serve(record)

    def _fit(self, record: _Loaded, size: int) -> None:
        """The loaded model's real size in the budget: models are evicted when it is larger than guessed;
        NoRoom when it alone is larger than the whole budget or the room is held by busy or pinned models."""
        self._sizes[record.key] = size
        if self.options.max_bytes:
            self._lru.remove(record)
            try:
                self._make_room(record.key, size, count=False)
            finally:
                self._lru.add(record, size, record.source.settings.pinned)
                self._lru.begin(record)
        else:
            self._lru.resize(record, size)

    def _make_room(self, key: Key, size: int, count: bool = True) -> None:
        """Evict the least recently used idle models so that one more (of ``size`` bytes) fits."""
        options = self.options
        max_models = options.max_loaded_models if count else 0
        if not (max_models or options.max_bytes):
            return
        for victim in self._lru.plan_room(max_models, options.max_bytes, size, described(*key)):
            self._evict(victim, key)  # type: ignore[arg-type]  # the set's keys are records

    def _failure_reason(self, record: _Loaded, error: BaseException) -> str:
        """Why a load failed, in one line naming the file (a RepositoryError names its own) or the folder."""
        if isinstance(error, RepositoryError):
            return str(error)
        folder = record.source.folder
        if isinstance(error, LoadFailed):
            return f"{folder}: {described(*record.key)}: {error}"
        return f"{folder}: loading {described(*record.key)} raised {first_line(error)}"

    # --- serving and unserving ------------------------------------------------------------------------------
    def _serve(self, record: _Loaded) -> None:
        """Serve a loaded object as its version; the object it replaces is stopped once its calls have ended."""
        name, version = record.key
        versions = self._served.setdefault(name, {})
        old = versions.get(version)
        default = self._default_version(name)
        is_default = default is None or version == default or (self.options.mode != LAZY and
                                                                highest([default, version]) == version)
        self._hooks.serve(name, version, record.model, is_default)
        versions[version] = record
        self._states.pop(record.key, None)
        metrics.repository_loaded(len(self._by_model))
        metrics.repository_model_memory(name, version, self._sizes.get(record.key, 0))
        if old is not None and old is not record:
            self._spawn(self._retire(old))

    def _withdraw(self, record: _Loaded) -> bool:
        """Stop routing calls to the object; whether it was the one serving its version."""
        name, version = record.key
        versions = self._served.get(name, {})
        serving = versions.get(version) is record
        if serving:
            del versions[version]
            if not versions:
                del self._served[name]
        self._hooks.withdraw(name, version, record.model)
        if serving and self.options.mode != LAZY:
            self._publish_default(name)
        return serving

    def _publish_default(self, name: str) -> None:
        """After a version left: the highest one still served answers requests naming no version."""
        default = self._default_version(name)
        record = self._served.get(name, {}).get(default) if default is not None else None
        if record is not None:
            self._hooks.serve(name, record.version, record.model, True)

    def _drop(self, record: _Loaded) -> None:
        """Forget an object that no longer serves (stopped, failed or evicted)."""
        self._lru.remove(record)
        if record.model is not None:
            self._by_model.pop(id(record.model), None)
            executor.forget(record.model)
            self._heap.soon()
        metrics.repository_loaded(len(self._by_model))

    def _forget_series(self, name: str) -> None:
        """A model none of whose versions is loaded any more: what this process keeps for its metric series and
        statistics goes (their files keep the counts, and a later load continues them), so memory follows the
        models loaded, not every name ever served."""
        if name not in self._served:
            self._hooks.forget(name)

    def _evict(self, record: _Loaded, incoming: Key) -> None:
        """Unload an idle model to make room (it has no calls in flight): a lazy model loads again on its next
        request."""
        serving = self._withdraw(record)
        _stop(record.model)
        self._drop(record)
        if serving:
            self._states[record.key] = (UNAVAILABLE, EVICTED)
            metrics.repository_model_memory(record.name, record.version, 0)
        self._forget_series(record.name)
        metrics.repository_evicted()
        logger.info("%s evicted to make room for %s", described(*record.key), described(*incoming))

    async def _retire(self, record: _Loaded) -> None:
        """Stop an object another has replaced, once its calls in flight (streams too) have ended."""
        self._hooks.withdraw(record.name, record.version, record.model)
        await self._drained(record)
        if record.model is not None and id(record.model) in self._by_model:
            _stop(record.model)
            self._drop(record)

    async def _drained(self, record: _Loaded) -> None:
        deadline = time.monotonic() + DRAIN_SECONDS
        while self._lru.busy(record) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    async def _unload(self, record: _Loaded, reason: Optional[str]) -> None:
        """Unload a served version: no new calls reach it, it is stopped once those in flight have ended;
        ``reason`` (None: it left the repository) is its state's reason afterwards."""
        key = record.key
        self._withdraw(record)
        self._states[key] = (UNLOADING, "")
        await self._drained(record)
        _stop(record.model)
        self._drop(record)
        metrics.repository_model_memory(record.name, record.version, 0)
        self._forget_series(record.name)
        if reason is None:
            self._states.pop(key, None)
        else:
            self._states[key] = (UNAVAILABLE, reason)
        logger.info("%s unloaded", described(*key))

    def _spawn(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- control modes --------------------------------------------------------------------------------------
    def start(self) -> None:
        """Begin serving on the running loop (each worker calls it): ``none`` and ``poll`` load every chosen
        version in the background (the repository is ready when they are done); ``poll`` then rescans."""
        if self.options.mode in (NONE, POLL):
            self._spawn(self._load_all_then_poll())

    async def _load_all_then_poll(self) -> None:
        sources = [source for entry in self._entries.values() if entry.name not in self._unloaded
                   for source in entry.versions.values() if source.name not in self._served]
        await self._load_quietly(sources)
        self.ready = True
        if self.options.mode != POLL:
            return
        while True:
            await asyncio.sleep(self.options.poll_seconds)
            try:
                entries = await asyncio.get_running_loop().run_in_executor(self._threads(), scan, self.root, True)
            except Exception as e:
                logger.warning("Model repository %s: cannot be read again (%s); the models served stay", self.root,
                               first_line(e))
                continue
            await self._apply(self._accepted(entries))

    async def _load_quietly(self, sources: List[VersionSource]) -> None:
        """Load these versions at once (each failure logged by its load)."""
        if sources:
            await asyncio.gather(*(self._load_once(source) for source in sources), return_exceptions=True)

    async def _apply(self, entries: Dict[str, RepositoryEntry]) -> None:
        """A rescan's result (``poll``): load what is new or changed, then unload what left (a version a new
        one supersedes answers until the new one is served)."""
        old, self._entries = self._entries, entries
        work: List[Awaitable[Any]] = []
        for name in set(old) - set(entries):
            work += [self._unload(record, None) for record in list(self._served.get(name, {}).values())]
            self._forget(name)
        sources = []
        for name, entry in entries.items():
            if name in self._unloaded:
                continue
            for version, record in list(self._served.get(name, {}).items()):
                if version not in entry.versions:
                    work.append(self._unload(record, None))
            for version, source in entry.versions.items():
                key = (name, version)
                current = self._served.get(name, {}).get(version)
                tried = current.source.fingerprint if current is not None else self._attempted.get(key)
                if tried != source.fingerprint and key not in self._loading:
                    sources.append(source)
        await self._load_quietly(sources)
        await asyncio.gather(*work, return_exceptions=True)

    def _forget(self, name: str) -> None:
        """A model that left the repository: its states go with it."""
        for key in [key for key in self._states if key[0] == name]:
            del self._states[key]
        self._retry.pop(name, None)

    # --- the repository API ---------------------------------------------------------------------------------
    async def load(self, name: str) -> bool:
        """Load (or reload, when its files changed) every version of ``name`` its policy chooses, reading it
        from the repository's folder again; versions no longer chosen are unloaded. False when the folder holds
        no such model; InferenceError naming the reason when a version fails to load."""
        entry = await self._refresh(name)
        if entry is None:
            return False
        self._unloaded.discard(name)
        if entry.problem:
            raise InferenceError(f"failed to load model '{name}': {entry.problem}")
        leaving = [record for version, record in self._served.get(name, {}).items() if version not in entry.versions]
        wanted = [source for version, source in entry.versions.items() if self._stale(source)]
        results = await asyncio.gather(*(self._load_once(source) for source in wanted), return_exceptions=True)
        await asyncio.gather(*(self._unload(record, None) for record in leaving))  # once the new ones answer
        failures = [error for error in results if isinstance(error, BaseException)]
        if failures:
            if isinstance(failures[0], NoRoom):
                raise failures[0]
            raise InferenceError(f"failed to load model '{name}': {failures[0]}")
        return True

    def _stale(self, source: VersionSource) -> bool:
        """Whether a version must be loaded: not served, or served from files that have changed since."""
        record = self._served.get(source.name, {}).get(source.version)
        if record is None:
            return True
        return fingerprinted(source).fingerprint != record.source.fingerprint  # (an explicit load's scan has none)

    async def unload(self, name: str) -> bool:
        """Unload every version of ``name`` (each once its calls in flight have ended); it stays in the index,
        UNAVAILABLE (``unloaded``), until a load. False when the repository holds no such model."""
        if name not in self._entries:
            return False
        self._unloaded.add(name)
        records = list(self._served.get(name, {}).values())
        await asyncio.gather(*(self._unload(record, UNLOADED) for record in records))
        return True

    async def _refresh(self, name: str) -> Optional[RepositoryEntry]:
        """Read the repository again for one model (on a load thread) and keep its new entry."""
        entries = await asyncio.get_running_loop().run_in_executor(self._threads(), scan, self.root, False)
        entries = self._accepted({name: entries[name]} if name in entries else {})
        entry = entries.get(name)
        if entry is None:
            self._entries.pop(name, None)
            self._forget(name)
        else:
            self._entries[name] = entry
        return entry

    def _accepted(self, entries: Dict[str, RepositoryEntry]) -> Dict[str, RepositoryEntry]:
        """The entries to serve (not the names the server's own models have), each problem and unknown field
        logged once."""
        reserved = self._reserved
        for name in sorted(reserved & set(entries)):
            self._say(f"Model repository {self.root}: model '{name}' is not served from it: the server's own "
                      f"code serves a model of that name", warning=True)
        kept = {name: entry for name, entry in entries.items() if name not in reserved}
        for entry in kept.values():
            if entry.problem:
                self._say(entry.problem)
            for problem in entry.version_problems.values():
                self._say(problem)
            for source in entry.versions.values():
                settings = source.settings
                if settings.unknown and settings.path:
                    self._say(f"{settings.path}: unknown field{'s' if len(settings.unknown) > 1 else ''} "
                              f"{', '.join(map(repr, settings.unknown))} ignored (neither MLServer's nor this "
                              "server's)", warning=True)
        return kept

    def _say(self, line: str, warning: bool = False) -> None:
        """Log a line about the repository once (a rescan finding the same problem stays quiet)."""
        if line not in self._said:
            self._said.add(line)
            (logger.warning if warning else logger.error)("%s", line)

    def close(self) -> None:
        """The server stops: no more rescans or loads (a load running on a thread finishes on its own)."""
        for task in list(self._tasks):
            task.cancel()
        self._heap.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _stop(model: Any) -> None:
    """Stop a model the repository no longer serves; its failure to stop is logged, not raised."""
    if model is None:
        return
    try:
        model.stop()
        if getattr(model, "engine", False):
            model.stop_engine()
    except Exception as e:
        logger.warning("model '%s' raised while stopping: %s", getattr(model, "name", "?"), first_line(e))

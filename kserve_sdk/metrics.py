"""Prometheus metrics, counted the same for REST, gRPC and streams, summed over worker processes.

prometheus-client runs in multi-process mode: every worker writes its values to memory-mapped files
in one directory (``PROMETHEUS_MULTIPROC_DIR``; the server makes a fresh one unless it is set), and a
scrape of any worker reads them all. The mode is chosen when prometheus-client is first imported, so
``setup()`` runs before that import; until it runs, every recording function here is a no-op.

KServe's names of this module are here too: ``PRE_HIST_TIME``, ``PREDICT_HIST_TIME``, ``POST_HIST_TIME`` and
``EXPLAIN_HIST_TIME`` stand for the server's own stage histograms (``request_preprocess_seconds``, ...), so
what a model observes in ``PREDICT_HIST_TIME.labels(**get_labels(name))`` lands in the series the server
exports; ``LLMStats`` is made when first read, so that importing this module loads no pydantic.
"""
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Optional, Tuple

_m = None  # the metric objects, once set up
_own_dir: Optional[str] = None

#: KServe's label names of the stage histograms: the model's name.
PROM_LABELS = ["model_name"]

STAGE_HISTOGRAMS = {
    "preprocess_ms": "request_preprocess_seconds",
    "predict_ms": "request_predict_seconds",
    "postprocess_ms": "request_postprocess_seconds",
    "explain_ms": "request_explain_seconds",
}


#: The bounds of the chunk-gap histogram (seconds): a stream counts the gaps of its first bucket itself.
_CHUNK_GAP_BUCKETS = (.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, float("inf"))


class _Metrics:
    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.stages = {key: Histogram(name, f"{name.split('_')[1]} latency in seconds", ["model_name"])
                       for key, name in STAGE_HISTOGRAMS.items()}
        labels = ["model_name", "protocol", "endpoint", "status"]
        self.requests = Counter("kserve_requests", "Requests answered", labels)
        self.latency = Histogram("kserve_request_duration_seconds", "Time to answer a request", labels)
        self.in_flight = Gauge("kserve_requests_in_flight", "Requests being answered", ["protocol"],
                               multiprocess_mode="livesum")
        self.streams = Counter("kserve_streams", "Streaming calls answered", ["model_name", "protocol"])
        self.first_response = Histogram("kserve_stream_first_response_seconds",
                                        "Time from request to the first streamed response", ["model_name", "protocol"])
        self.stream_responses = Histogram("kserve_stream_responses", "Responses sent per stream",
                                          ["model_name", "protocol"],
                                          buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000, float("inf")))
        self.llm_tokens = {kind: Counter(f"kserve_llm_{kind}_tokens", f"{kind.capitalize()} tokens of OpenAI answers",
                                         ["model_name"]) for kind in ("prompt", "completion")}
        self.llm_first_chunk = Histogram("kserve_llm_first_chunk_seconds", "Time from request to the first "
                                         "streamed OpenAI chunk", ["model_name"])
        self.llm_chunk_gap = Histogram("kserve_llm_chunk_gap_seconds", "Time between streamed OpenAI chunks",
                                       ["model_name"], buckets=_CHUNK_GAP_BUCKETS)
        self.batch_size = Histogram("kserve_batch_size", "Calls merged into one call of a model method (predict's "
                                    "request batching, a @batch method's steps)", ["model_name", "method"],
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, float("inf")))
        self.batch_step = Histogram("kserve_batch_step_seconds", "Duration of one step of a @batch method",
                                    ["model_name", "method"])
        self.queue_size = Gauge("kserve_queue_size", "Calls waiting in a model's queue, by priority",
                                ["model_name", "priority"], multiprocess_mode="livesum")
        self.queue_wait = Histogram("kserve_queue_wait_seconds", "Time a call waited in its model's queue",
                                    ["model_name"])
        self.queue_rejected = Counter("kserve_queue_rejections", "Calls that left a model's queue without "
                                      "running, by reason (queue_full, expired, cancelled)", ["model_name", "reason"])
        self.batch_waiting = Gauge("kserve_batch_rows_waiting", "Calls waiting for the next step of a @batch method",
                                   ["model_name", "method"], multiprocess_mode="livesum")
        self.jobs_submitted = Counter("kserve_jobs_submitted", "Durable jobs submitted", ["model_name"])
        self.jobs_finished = Counter("kserve_jobs_finished", "Durable jobs that ended, by status (completed, "
                                     "failed, canceled)", ["model_name", "status"])
        self.job_seconds = Histogram("kserve_job_seconds", "Time from a job's submit to its end", ["model_name"],
                                     buckets=(.01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400,
                                              float("inf")))
        self.job_attempts = Histogram("kserve_job_attempts", "Attempts a job took, counted when it ended",
                                      ["model_name"], buckets=(0, 1, 2, 3, 5, 10, float("inf")))


class _RepositoryMetrics:
    """The model repository's metrics, made when a repository first records one: the unlabelled ones write
    their values as soon as they exist, and a server without a repository keeps none."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.loaded = Gauge("kserve_repository_loaded_models", "Models of the model repository loaded (or loading) "
                            "in memory", multiprocess_mode="livesum")
        self.loads = Counter("kserve_repository_loads", "Loads of model repository versions, by outcome (loaded, "
                             "failed, no_room)", ["outcome"])
        self.evictions = Counter("kserve_repository_evictions", "Idle models unloaded to make room for another "
                                 "within the memory budget")
        self.load_seconds = Histogram("kserve_repository_load_seconds", "Time to load a model repository version "
                                      "(build, load, warm-up)", buckets=(.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30,
                                                                         60, 300, float("inf")))
        self.memory = Gauge("kserve_repository_model_memory_bytes", "What a loaded model repository version takes "
                            "in memory", ["model_name", "version"], multiprocess_mode="livesum")


_repository_metrics: Optional[_RepositoryMetrics] = None


def _repository() -> Optional[_RepositoryMetrics]:
    """The repository's metrics (made at the first call), None until ``setup()`` has run."""
    global _repository_metrics
    if _m is not None and _repository_metrics is None:
        _repository_metrics = _RepositoryMetrics()
    return _repository_metrics


def setup() -> None:
    """Choose the metrics directory (before prometheus-client is imported) and create the metrics."""
    global _m, _own_dir
    if _m is not None:
        return
    first_import = "prometheus_client.values" not in sys.modules
    if "PROMETHEUS_MULTIPROC_DIR" not in os.environ and first_import:
        _own_dir = tempfile.mkdtemp(prefix="kserve-sdk-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = _own_dir
    if first_import and os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Only when no metric exists yet: values of two classes would keep separate tables of the same files.
        from .internals.prometheus_values import install

        install()
    _m = _Metrics()


def cleanup() -> None:
    """Remove the metrics directory this process made (the top process, at exit)."""
    if _own_dir:
        shutil.rmtree(_own_dir, ignore_errors=True)


def worker_exited(pid: int) -> None:
    """Drop a dead worker's live gauges (its counters keep counting in the totals)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


_children: Dict[tuple, object] = {}
os.register_at_fork(after_in_child=_children.clear)  # a forked worker's values live in files of its own


def _child(metric, *labels: str):
    """``metric.labels(*labels)``, remembered, and as a direct writer to its memory-mapped values when it
    has them (:mod:`kserve_sdk.internals.prometheus_writers`)."""
    key = (id(metric), labels)
    child = _children.get(key)
    if child is None:
        from .internals.prometheus_writers import direct_writer

        child = _children[key] = direct_writer(metric.labels(*labels))
    return child


def _shared_child(metric, *labels: str):
    """``metric.labels(*labels)``, remembered, as prometheus-client's own child, whose every update takes its
    values' lock: for the series that model threads update too (a model's queue hands its slot on there), where
    a direct writer (for the event loop alone) could lose an update."""
    key = (id(metric), labels, "shared")
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*labels)
    return child


def get_labels(model_name: str) -> Dict[str, str]:
    """The labels of ``model_name``'s series in the stage histograms (KServe's): ``{"model_name": model_name}``."""
    return {PROM_LABELS[0]: model_name}


class StageHistogram:
    """One of the server's stage histograms under KServe's name (``PREDICT_HIST_TIME``, ...): every attribute
    (``labels``, ``observe``, ``time``, ...) is the prometheus-client Histogram's. The metrics are set up at
    the first use rather than at import, so a model module may import it before the server starts."""

    # class-level defaults: reading them never reaches __getattr__, even on a copy made without __init__
    _timing_key = ""  # its key in STAGE_HISTOGRAMS
    _metric: Any = None

    def __init__(self, timing_key: str):
        self._timing_key = timing_key

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # what copy, pickle and inspect probe for: not the histogram's to answer
            raise AttributeError(name)
        metric = self._metric
        if metric is None:
            setup()
            assert _m is not None
            metric = self._metric = _m.stages[self._timing_key]
        return getattr(metric, name)

    def __repr__(self) -> str:
        return f"StageHistogram({STAGE_HISTOGRAMS.get(self._timing_key)!r})"


PRE_HIST_TIME = StageHistogram("preprocess_ms")
PREDICT_HIST_TIME = StageHistogram("predict_ms")
POST_HIST_TIME = StageHistogram("postprocess_ms")
EXPLAIN_HIST_TIME = StageHistogram("explain_ms")


def __getattr__(name: str) -> Any:
    """``LLMStats``, made when first read (it is a pydantic model)."""
    if name != "LLMStats":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = _llm_stats_class()  # made once; later reads are plain attribute reads
    return value


def _llm_stats_class() -> type:
    from pydantic import BaseModel

    class LLMStats(BaseModel):
        """Token counts of an LLM's answer (KServe's ``kserve.metrics.LLMStats``)."""

        num_prompt_tokens: int = 0
        num_generation_tokens: int = 0

    LLMStats.__module__, LLMStats.__qualname__ = __name__, "LLMStats"
    return LLMStats


def observe_stages(model_name: str, timings: Dict[str, float]) -> None:
    """Record a pipeline's stage durations (milliseconds) into KServe's four histograms."""
    if _m is None:
        return
    writers = _stage_writers.get(model_name)
    if writers is None:
        writers = _stage_writers[model_name] = {}
    for key, ms in timings.items():
        writer = writers.get(key, _UNSEEN)
        if writer is _UNSEEN:  # a model's histograms are made for the stages it has (few run explain)
            metric = _m.stages.get(key)
            writer = writers[key] = None if metric is None else _child(metric, model_name)
        if writer is not None:  # queue_ms has no histogram of KServe's: it is inside predict_ms
            writer.observe(ms / 1000.0)


_UNSEEN = object()
_stage_writers: Dict[str, Dict[str, Any]] = {}  # model name -> {timing key: its histogram's writer, or None}
os.register_at_fork(after_in_child=_stage_writers.clear)


def forget_model(model_name: str) -> None:
    """Let go of ``model_name``'s series (a model repository's model no longer loaded), as Triton does: each
    metric's child and the writers of its values leave this process, and the values leave its metrics files
    (they read 0 at once and are gone from the next compaction of the files). A series made again for the name
    starts from 0. Without a metrics directory, or with ``KSERVE_SDK_INTERNALS=off``, the series stay."""
    if _m is None or not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # in one process's memory: they stay
        return
    from .internals.prometheus_children import drop_children
    from .internals.prometheus_values import let_go

    metrics = [*vars(_m).values(), *(metric for group in (_m.stages, _m.llm_tokens) for metric in group.values())]
    if _repository_metrics is not None:
        metrics.append(_repository_metrics.memory)
    dropped = drop_children(metrics, "model_name", model_name)
    for key in [key for key in _children if key[1][:1] == (model_name,)]:
        del _children[key]
    for labels in [labels for labels in _answer_writers if labels[0] == model_name]:
        del _answer_writers[labels]
    _stage_writers.pop(model_name, None)
    let_go(dropped)


def request_started(protocol: str) -> None:
    """A request began (the in-flight gauge)."""
    if _m is not None:
        _child(_m.in_flight, protocol).inc()


def request_finished(model_name: str, protocol: str, endpoint: str, status: str, seconds: float,
                     started: bool = True) -> None:
    """A request was answered with ``status`` after ``seconds``."""
    if _m is None:
        return
    if started:
        _child(_m.in_flight, protocol).dec()
    labels = (model_name, protocol, endpoint, status)
    writers = _answer_writers.get(labels)
    if writers is None:
        writers = _answer_writers[labels] = (_child(_m.requests, *labels), _child(_m.latency, *labels))
    writers[0].inc()
    writers[1].observe(seconds)


_answer_writers: Dict[tuple, tuple] = {}  # labels -> (the request counter's writer, the latency histogram's)
os.register_at_fork(after_in_child=_answer_writers.clear)


def stream_finished(model_name: str, protocol: str, responses: int, first_response_s: Optional[float]) -> None:
    """A stream ended after ``responses`` responses; the first came ``first_response_s`` after the request."""
    if _m is None:
        return
    _child(_m.streams, model_name, protocol).inc()
    _child(_m.stream_responses, model_name, protocol).observe(responses)
    if first_response_s is not None:
        _child(_m.first_response, model_name, protocol).observe(first_response_s)


def batch_formed(model_name: str, size: int, method: str = "predict") -> None:
    """``size`` calls were merged into one call of the model's ``method``."""
    if _m is not None:
        _child(_m.batch_size, model_name, method).observe(size)


def batch_step(model_name: str, method: str, size: int, seconds: float) -> None:
    """One step of a @batch method computed ``size`` rows in ``seconds``."""
    if _m is not None:
        batch_formed(model_name, size, method)
        _child(_m.batch_step, model_name, method).observe(seconds)


def batch_rows_waiting(model_name: str, method: str, change: int) -> None:
    """``change`` more (or, negative, fewer) calls wait for the next step of a @batch method."""
    if _m is not None:
        _child(_m.batch_waiting, model_name, method).inc(change)


def queue_size(model_name: str, priority: str, change: int) -> None:
    """``change`` more (or, negative, fewer) calls wait in the model's queue at ``priority`` ("1", "2", ...,
    or "background"); from the event loop or a model thread, as the three queue functions here."""
    if _m is not None:
        _shared_child(_m.queue_size, model_name, priority).inc(change)


def queue_waited(model_name: str, seconds: float) -> None:
    """A call left the model's queue to run after waiting ``seconds``."""
    if _m is not None:
        _shared_child(_m.queue_wait, model_name).observe(seconds)


def queue_rejected(model_name: str, reason: str) -> None:
    """A call left the model's queue without running (``queue_full``, ``expired``, ``cancelled``)."""
    if _m is not None:
        _shared_child(_m.queue_rejected, model_name, reason).inc()


def repository_load_finished(outcome: str, seconds: float) -> None:
    """A model repository version's load ended after ``seconds``: ``loaded``, ``failed`` or ``no_room``."""
    repository = _repository()
    if repository is not None:
        repository.loads.labels(outcome).inc()
        repository.load_seconds.observe(seconds)


def repository_loaded(count: int) -> None:
    """``count`` model repository versions are in this worker's memory now."""
    repository = _repository()
    if repository is not None:
        repository.loaded.set(count)


def repository_evicted() -> None:
    """An idle model was unloaded to make room for another."""
    repository = _repository()
    if repository is not None:
        repository.evictions.inc()


def repository_model_memory(model_name: str, version: str, size: int) -> None:
    """A model repository version takes ``size`` bytes in this worker (0 once unloaded)."""
    repository = _repository()
    if repository is not None:
        repository.memory.labels(model_name, version).set(size)


def job_submitted(model_name: str) -> None:
    """A durable job of ``model_name`` was submitted (or queued again)."""
    if _m is not None:
        _child(_m.jobs_submitted, model_name).inc()


def job_finished(model_name: str, status: str, created: float, attempts: int) -> None:
    """A job submitted at ``created`` (Unix seconds) ended with ``status`` after ``attempts`` attempts."""
    if _m is None:
        return
    _child(_m.jobs_finished, model_name, status).inc()
    _child(_m.job_seconds, model_name).observe(max(time.time() - created, 0.0))
    _child(_m.job_attempts, model_name).observe(attempts)


def llm_tokens(model_name: str, usage: Optional[dict]) -> None:
    """Count the prompt and completion tokens of an OpenAI answer's ``usage`` (a dict; None: nothing)."""
    if _m is None or not usage:
        return
    for kind, counter in _m.llm_tokens.items():
        count = usage.get(f"{kind}_tokens")
        if count:
            _child(counter, model_name).inc(count)


def llm_chunk_timers(model_name: str) -> Tuple[Callable[[float], None], Any]:
    """The observer of an OpenAI stream's time to first chunk, and the writer of its gaps between chunks
    (prometheus_writers.gap_writer: ``observe(gap)``; ``add_least(count, total)`` for gaps in the first
    bucket, at or under its bound ``least``, which come many per loop round and are counted by the
    stream)."""
    if _m is None:
        return _ignore, _NO_GAPS
    from .internals.prometheus_writers import gap_writer

    return _child(_m.llm_first_chunk, model_name).observe, gap_writer(_child(_m.llm_chunk_gap, model_name),
                                                                 _CHUNK_GAP_BUCKETS[0])


def _ignore(_: float) -> None:
    pass


class _NoGaps:
    observe = staticmethod(_ignore)
    least = float("inf")

    def add_least(self, count: int, total: float) -> None:
        pass


_NO_GAPS = _NoGaps()


def render(accept: Optional[str]) -> Tuple[bytes, str]:
    """The scrape body (summed over all workers) and its content type, negotiated from ``Accept``."""
    from prometheus_client import CollectorRegistry, ProcessCollector, exposition

    encoder, content_type = exposition.choose_encoder(accept or "")
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        from prometheus_client import REGISTRY

        return encoder(REGISTRY), content_type
    scraper = _scraper(directory)
    registry = CollectorRegistry()
    if scraper is None:
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)
    ProcessCollector(registry=registry)

    def body() -> bytes:
        return encoder(registry) if scraper is None else _scraped(scraper, encoder, registry, content_type)

    for _ in range(2):
        try:
            return body(), content_type
        except FileNotFoundError:  # a dead worker's file went (folded into the dead totals) while it was read
            continue
    return body(), content_type


def _scraped(scraper: Any, encoder: Callable, process: Any, content_type: str) -> bytes:
    """The multi-process files as ``scraper`` writes them, then the process's own metrics (``process``) as
    prometheus-client's ``encoder`` writes them, in the negotiated format."""
    from prometheus_client.openmetrics.exposition import UNDERSCORES

    openmetrics_format = content_type.startswith("application/openmetrics-text")
    escaping = getattr(encoder, "keywords", {}).get("escaping", UNDERSCORES)
    files = scraper.render(openmetrics_format, escaping).encode("utf-8")
    own = encoder(process)
    return files + own  # OpenMetrics' "# EOF" ends the process's part, and so the whole


_scrapers: Dict[str, Any] = {}


def _scraper(directory: str) -> Any:
    """The directory's reader of internals/prometheus_scrape.py, or None with the internals off."""
    from .internals import ENABLED

    if not ENABLED:
        return None
    scraper = _scrapers.get(directory)
    if scraper is None:
        from .internals.prometheus_scrape import Scraper

        scraper = _scrapers[directory] = Scraper(directory)
    return scraper

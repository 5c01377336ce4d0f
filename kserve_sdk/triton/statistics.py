"""Triton's statistics extension: per-model inference counts and cumulative stage times, summed over workers.

Each worker keeps one small array of counters per model. With a metrics directory (always, once the
server runs: see :mod:`kserve_sdk.metrics`) the array is a memory-mapped file there, so a statistics
request to any worker sums every worker's files, as a Prometheus scrape does; a worker that died keeps
its counts in the totals. Recording is a few integer additions on the request's own thread.

A step of a ``@kserve_sdk.batch`` method (batch.py) is one execution: it adds to ``execution_count`` and to
Triton's ``batch_stats`` entry of its size. Those entries live in a second file per model and worker: a fixed
array of ``(executions, ns)`` pairs, one per batch size from 1 to :data:`BATCH_SIZES` (a larger step counts
under the last), summed over the workers' files like the rest; an untouched size costs no disk (sparse file).
"""
import glob
import mmap
import os
import time
from typing import Any, Dict, List, Optional

import numpy as np

FIELDS = ("inference_count", "execution_count", "last_inference", "success_count", "success_ns", "fail_count",
          "fail_ns", "queue_count", "queue_ns", "compute_input_count", "compute_input_ns", "compute_infer_count",
          "compute_infer_ns", "compute_output_count", "compute_output_ns")
(INFERENCES, EXECUTIONS, LAST, SUCCESS, SUCCESS_NS, FAIL, FAIL_NS, QUEUE, QUEUE_NS, INPUT, INPUT_NS, INFER,
 INFER_NS, OUTPUT, OUTPUT_NS) = range(len(FIELDS))
# Stage timings (ms) of the pipeline, and the Triton counters they feed.
_STAGE_SLOT = {"preprocess_ms": INPUT, "predict_ms": INFER, "explain_ms": INFER, "postprocess_ms": OUTPUT}

#: Batch sizes with their own ``batch_stats`` entry (1 to this); a step of more rows counts under the last.
BATCH_SIZES = 1024

_counters: Dict[str, memoryview] = {}
_batch_counters: Dict[str, memoryview] = {}
os.register_at_fork(after_in_child=_counters.clear)  # a forked worker starts its own files
os.register_at_fork(after_in_child=_batch_counters.clear)


def _directory() -> Optional[str]:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR")


def _file_prefix(model_name: str, kind: str = "stats") -> str:
    return f"triton_{kind}_{model_name.encode().hex()}_"


def _new_counters(model_name: str, kind: str, slots: int) -> memoryview:
    """``slots`` int64 counters of this worker: mapped from its file in the metrics directory, else in memory."""
    directory = _directory()
    if not directory:
        return memoryview(bytearray(8 * slots)).cast("q")
    path = os.path.join(directory, f"{_file_prefix(model_name, kind)}{os.getpid()}.bin")
    with open(path, "a+b") as f:
        if os.fstat(f.fileno()).st_size < 8 * slots:
            f.truncate(8 * slots)
        # int64 slots of the mapping through a memoryview: indexing it is C-fast, unlike numpy scalars
        return memoryview(mmap.mmap(f.fileno(), 8 * slots)).cast("q")


def _counters_of(model_name: str) -> memoryview:
    counters = _counters.get(model_name)
    if counters is None:
        counters = _counters[model_name] = _new_counters(model_name, "stats", len(FIELDS))
    return counters


def _batch_counters_of(model_name: str) -> memoryview:
    counters = _batch_counters.get(model_name)
    if counters is None:
        counters = _batch_counters[model_name] = _new_counters(model_name, "batches", 2 * BATCH_SIZES)
    return counters


def forget_model(model_name: str) -> None:
    """Drop this process's counters of ``model_name`` (a model repository's model no longer loaded), as Triton
    drops an unloaded model's statistics: they are unmapped and this process's files of the model removed, so
    the totals leave out its counts and a later call of the model counts from 0. Without a metrics directory
    the counters are this process's memory, and stay."""
    directory = _directory()
    if not directory:
        return
    for kind, counters in (("stats", _counters), ("batches", _batch_counters)):
        if counters.pop(model_name, None) is not None:
            try:
                os.unlink(os.path.join(directory, f"{_file_prefix(model_name, kind)}{os.getpid()}.bin"))
            except FileNotFoundError:
                pass


def record_success(model_name: str, timings: Any, total_ns: int) -> None:
    """A call that answered after ``total_ns``, with its :class:`~kserve_sdk.lifecycle.Timings`: stage
    durations in ms, the wait for a model thread or a batch (Triton's queue time, which KServe's
    ``predict_ms`` includes and Triton's ``compute_infer`` does not) and the executions it made."""
    counters = _counters_of(model_name)
    counters[INFERENCES] += 1
    counters[EXECUTIONS] += timings.executions
    counters[LAST] = time.time_ns() // 1_000_000
    counters[SUCCESS] += 1
    counters[SUCCESS_NS] += total_ns
    counters[QUEUE] += 1
    for key, ms in timings.items():
        slot = _STAGE_SLOT.get(key)
        if slot is not None:
            counters[slot] += 1
            counters[slot + 1] += int(ms * 1e6)
    queued_ns = int(timings.queue_s * 1e9)
    if queued_ns:
        counters[QUEUE_NS] += queued_ns
        counters[INFER_NS] -= queued_ns
    if timings.scheduled_s:  # the wait in the model's queue, before any stage: in no stage's time
        counters[QUEUE_NS] += int(timings.scheduled_s * 1e9)


def record_failure(model_name: str, total_ns: int, executions: int = 0) -> None:
    """A call that failed after ``total_ns``, having run the model ``executions`` times."""
    counters = _counters_of(model_name)
    counters[FAIL] += 1
    counters[FAIL_NS] += total_ns
    counters[EXECUTIONS] += executions
    counters[LAST] = time.time_ns() // 1_000_000


def record_batch_step(model_name: str, size: int, seconds: float) -> None:
    """A step of a ``@kserve_sdk.batch`` method computed ``size`` rows in ``seconds``: one execution."""
    _counters_of(model_name)[EXECUTIONS] += 1
    batches = _batch_counters_of(model_name)
    slot = 2 * (min(size, BATCH_SIZES) - 1)
    batches[slot] += 1
    batches[slot + 1] += int(seconds * 1e9)


def _files(model_name: str, kind: str, slots: int) -> List[np.ndarray]:
    """Every worker's counters of ``model_name`` (this process's alone without a metrics directory)."""
    directory = _directory()
    if not directory:
        own = (_counters if kind == "stats" else _batch_counters).get(model_name)
        return [] if own is None else [np.array(own.tolist(), dtype=np.int64)]
    paths = glob.glob(os.path.join(glob.escape(directory), _file_prefix(model_name, kind) + "*.bin"))
    every = []
    for path in paths:
        try:
            every.append(np.fromfile(path, dtype=np.int64))
        except FileNotFoundError:  # a dead worker's file, folded into the dead totals since the glob
            continue
    return [counts for counts in every if counts.size == slots]  # a file being made is not counted yet


def _totals(model_name: str) -> np.ndarray:
    total = np.zeros(len(FIELDS), dtype=np.int64)
    for counts in _files(model_name, "stats", len(FIELDS)):
        total[LAST] = max(total[LAST], counts[LAST])
        counts[LAST] = 0
        total += counts
    return total


def _batch_stats(model_name: str) -> List[Dict[str, Any]]:
    """Triton's ``batch_stats``: per batch size that ran, its executions and their compute time."""
    total = np.zeros(2 * BATCH_SIZES, dtype=np.int64)
    for counts in _files(model_name, "batches", 2 * BATCH_SIZES):
        total += counts
    pairs = total.reshape(BATCH_SIZES, 2)
    return [{"batch_size": int(size) + 1, "compute_input": {"count": 0, "ns": 0},
             "compute_infer": {"count": int(pairs[size, 0]), "ns": int(pairs[size, 1])},
             "compute_output": {"count": 0, "ns": 0}}
            for size in np.flatnonzero(pairs[:, 0])]


def model_statistics(model_name: str, version: str = "") -> Dict[str, Any]:
    """One model's statistics in Triton's JSON form (``ns`` as integers; gRPC sends the same numbers)."""
    t = [int(v) for v in _totals(model_name)]

    def duration(count: int, ns: int) -> Dict[str, int]:
        return {"count": t[count], "ns": t[ns]}

    return {
        "name": model_name, "version": version, "last_inference": t[LAST],
        "inference_count": t[INFERENCES], "execution_count": t[EXECUTIONS],
        "inference_stats": {
            "success": duration(SUCCESS, SUCCESS_NS), "fail": duration(FAIL, FAIL_NS),
            "queue": duration(QUEUE, QUEUE_NS), "compute_input": duration(INPUT, INPUT_NS),
            "compute_infer": duration(INFER, INFER_NS), "compute_output": duration(OUTPUT, OUTPUT_NS),
            "cache_hit": {"count": 0, "ns": 0}, "cache_miss": {"count": 0, "ns": 0},
        },
        "batch_stats": _batch_stats(model_name),
    }


def statistics(model_names: List[str], version: str = "") -> Dict[str, List[Dict[str, Any]]]:
    """``{"model_stats": [...]}`` for the given models."""
    return {"model_stats": [model_statistics(name, version) for name in model_names]}

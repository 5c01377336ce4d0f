"""Triton's statistics extension: per-model inference counts and cumulative stage times, summed over workers.

Each worker keeps one small array of counters per model. With a metrics directory (always, once the
server runs: see :mod:`kserve_sdk.metrics`) the array is a memory-mapped file there, so a statistics
request to any worker sums every worker's files, as a Prometheus scrape does; a worker that died keeps
its counts in the totals. Recording is a few integer additions on the request's own thread.
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

_counters: Dict[str, memoryview] = {}
os.register_at_fork(after_in_child=_counters.clear)  # a forked worker starts its own files


def _directory() -> Optional[str]:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR")


def _file_prefix(model_name: str) -> str:
    return f"triton_stats_{model_name.encode().hex()}_"


def _counters_of(model_name: str) -> memoryview:
    counters = _counters.get(model_name)
    if counters is None:
        directory = _directory()
        if directory:
            path = os.path.join(directory, f"{_file_prefix(model_name)}{os.getpid()}.bin")
            with open(path, "wb+") as f:
                f.truncate(8 * len(FIELDS))
                # int64 slots of the mapping through a memoryview: indexing it is C-fast, unlike numpy scalars
                counters = memoryview(mmap.mmap(f.fileno(), 8 * len(FIELDS))).cast("q")
        else:
            counters = memoryview(bytearray(8 * len(FIELDS))).cast("q")
        _counters[model_name] = counters
    return counters


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


def record_failure(model_name: str, total_ns: int, executions: int = 0) -> None:
    """A call that failed after ``total_ns``, having run the model ``executions`` times."""
    counters = _counters_of(model_name)
    counters[FAIL] += 1
    counters[FAIL_NS] += total_ns
    counters[EXECUTIONS] += executions
    counters[LAST] = time.time_ns() // 1_000_000


def _totals(model_name: str) -> np.ndarray:
    directory = _directory()
    if not directory:
        own = _counters.get(model_name)
        return np.zeros(len(FIELDS), dtype=np.int64) if own is None else np.array(own.tolist(), dtype=np.int64)
    total = np.zeros(len(FIELDS), dtype=np.int64)
    for path in glob.glob(os.path.join(glob.escape(directory), _file_prefix(model_name) + "*.bin")):
        counts = np.fromfile(path, dtype=np.int64)
        if counts.size == len(FIELDS):
            total[LAST] = max(total[LAST], counts[LAST])
            counts[LAST] = 0
            total += counts
    return total


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
        "batch_stats": [],
    }


def statistics(model_names: List[str], version: str = "") -> Dict[str, List[Dict[str, Any]]]:
    """``{"model_stats": [...]}`` for the given models."""
    return {"model_stats": [model_statistics(name, version) for name in model_names]}

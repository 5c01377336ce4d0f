"""sched_bench.py's server: a model that takes a fixed time per call, one call at a time, and a model that reports
what it did.

    python hack/bench/sched_model.py --model_name work --http_port 8080 --enable_grpc false \
        [--cost_ms 10] [--timeout_us 0] [--max_queue 0]

work        a plain ``def predict`` (so on a model thread) that sleeps ``cost_ms`` and answers INT32 output "y" = input
            "x". Its scheduling policy: instance_count=1, priority_levels=2, default_priority_level=2 (a call that
            asks for no priority is a priority-2 call), timeout_action REJECT; ``--timeout_us`` sets
            default_timeout_microseconds (0: the requests' own ``timeout`` parameter bounds the wait) and
            ``--max_queue`` max_queue_size (0: unbounded). Every execution records when it started and ended
            (perf_counter), and compares its start with two deadlines: the one the client sent in the header
            ``x-bench-deadline`` (time.time() seconds at sending + the timeout), and the one the server keeps
            (the call's arrival, which a wrapper of this bench puts in ``x-bench-arrived``, + the timeout).
<name>_stats an ``async def predict`` (on the event loop, no policy: it never queues) taking INT32 "op": 0 starts a
            new window (forgets what was recorded), 1 answers BYTES "stats", one JSON document about the window
            so far: its length, the union of the executions' busy intervals within it, executions, the most that
            ever ran at once, executions per priority, and those that started after their client's deadline and
            after the server's.
"""

import argparse
import bisect
import json
import statistics
import threading
import time
from collections import Counter

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse

DEADLINE_HEADER = "x-bench-deadline"
ARRIVED_HEADER = "x-bench-arrived"


class Ledger:
    """Every execution's busy interval and deadline check since the window began (thread-safe)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.begin_window()

    def begin_window(self):
        with self.lock:
            self.window_start = time.perf_counter()
            self.spans = []                 # (start, end) of executions that ended in the window
            self.running = getattr(self, "running", {})   # token -> start, executions under way (kept)
            self.max_running = len(self.running)
            self.executions = 0
            self.by_priority = Counter()
            self.late_by = []               # seconds past the client's deadline of each late start
            self.late_on_server = []        # and past the server's deadline
            self.next_token = getattr(self, "next_token", 0)
            self.releases = []              # perf_counter of every slot release (--trace_handoff)
            self.grants = []                # and of every slot the loop granted to a waiting call

    def started(self, priority, deadline, server_deadline):
        """Record an execution's start; returns its token for :meth:`ended`."""
        late_by = time.time() - deadline if deadline is not None else None
        now = time.perf_counter()
        late_on_server = now - server_deadline if server_deadline is not None else None
        with self.lock:
            token = self.next_token = self.next_token + 1
            self.running[token] = now
            self.max_running = max(self.max_running, len(self.running))
            self.executions += 1
            self.by_priority[str(priority)] += 1
            if late_by is not None and late_by > 0:
                self.late_by.append(late_by)
            if late_on_server is not None and late_on_server > 0:
                self.late_on_server.append(late_on_server)
        return token

    def ended(self, token):
        now = time.perf_counter()
        with self.lock:
            start = self.running.pop(token, None)
            if start is not None:
                self.spans.append((start, now))

    def released(self):
        self.releases.append(time.perf_counter())

    def granted(self):
        self.grants.append(time.perf_counter())

    def report(self):
        """The window so far as a dict (see the module's docstring)."""
        with self.lock:
            now = time.perf_counter()
            spans = self.spans + [(start, now) for start in self.running.values()]
            out = {"window_s": now - self.window_start, "busy_s": union_length(spans, self.window_start, now),
                   "executions": self.executions, "max_running": self.max_running,
                   "by_priority": dict(self.by_priority), "late": len(self.late_by),
                   "late_p50_ms": statistics.median(self.late_by) * 1000 if self.late_by else None,
                   "late_max_ms": max(self.late_by, default=0.0) * 1000,
                   "late_on_server": len(self.late_on_server),
                   "late_on_server_max_ms": max(self.late_on_server, default=0.0) * 1000}
            if self.releases:
                out["handoff"] = handoff(sorted(self.spans), sorted(self.releases), sorted(self.grants))
            return out


def union_length(spans, lo, hi):
    """Seconds of [lo, hi] covered by at least one of the (start, end) spans."""
    total, reached = 0.0, lo
    for start, end in sorted(spans):
        start, end = max(start, reached), min(end, hi)
        if end > start:
            total += end - start
            reached = end
    return total


def handoff(spans, releases, grants):
    """Where the idle time between one execution's end and the next one's start goes: ms from the end to the
    slot's release (on the model thread for a staged call, else on the loop), and from there to the next start;
    ``via_loop`` counts the gaps in which the event loop granted the slot (a call that waited unstaged)."""
    parts, via_loop = {"end_to_release": [], "release_to_start": []}, 0
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        release = next_at(releases, end, start)
        if release:
            parts["end_to_release"].append((release - end) * 1000)
            parts["release_to_start"].append((start - release) * 1000)
            via_loop += next_at(grants, release, start) is not None
    def quantiles(values):
        values = sorted(values)
        pick = lambda q: values[min(len(values) - 1, int(q * len(values)))] if values else None  # noqa: E731
        return {"p50_ms": pick(0.5), "p99_ms": pick(0.99), "max_ms": max(values, default=None),
                "mean_ms": sum(values) / len(values) if values else None}
    return {"gaps": len(parts["end_to_release"]), "via_loop": via_loop,
            **{name: quantiles(v) for name, v in parts.items()}}


def next_at(times, lo, hi):
    """The first of the sorted times in [lo, hi], else None."""
    i = bisect.bisect_left(times, lo)
    return times[i] if i < len(times) and times[i] <= hi else None


def trace_handoff():
    """Record every slot release of the SDK's model queues (on a model thread or on the loop) and every slot the
    loop grants to a waiting call (a diagnostic: the bench's own wrappers)."""
    from kserve_sdk.scheduling import queue

    leave, from_thread, grant = queue.ModelQueue.leave, queue.ModelQueue.hand_on_from_thread, queue.ModelQueue._grant

    def traced_leave(self, *args, **kwargs):
        LEDGER.released()
        return leave(self, *args, **kwargs)

    def traced_from_thread(self, *args, **kwargs):
        LEDGER.released()
        return from_thread(self, *args, **kwargs)

    def traced_grant(self, *args, **kwargs):
        LEDGER.granted()
        return grant(self, *args, **kwargs)

    queue.ModelQueue.leave, queue.ModelQueue.hand_on_from_thread, queue.ModelQueue._grant = (
        traced_leave, traced_from_thread, traced_grant)


def note_arrivals():
    """Put each call's arrival (``Call.started``, perf_counter), which the server counts its timeout from, into
    its headers as x-bench-arrived (the bench's own wrapper of DataPlane.model_call)."""
    from kserve_sdk.dataplane import DataPlane

    model_call = DataPlane.model_call

    def noted(self, model_name, call, headers=None, *args, **kwargs):
        if call is not None:
            for seen in (call.headers, headers):
                if seen is not None:
                    seen[ARRIVED_HEADER] = call.started
        return model_call(self, model_name, call, headers, *args, **kwargs)

    DataPlane.model_call = noted


LEDGER = Ledger()


class Work(kserve.Model):
    """cost_s of sleep per call, one call at a time, in two priorities."""

    def __init__(self, name, cost_s, timeout_us, max_queue):
        super().__init__(name)
        self.cost_s, self.timeout_s = cost_s, timeout_us / 1e6
        self.scheduling = kserve.SchedulingPolicy(
            instance_count=1, priority_levels=2, default_priority_level=2, timeout_action="REJECT",
            default_timeout_microseconds=timeout_us, max_queue_size=max_queue)
        self.ready = True

    def predict(self, payload: InferRequest, headers=None):
        headers = headers or {}
        deadline, arrived = headers.get(DEADLINE_HEADER), headers.get(ARRIVED_HEADER)
        parameters = payload.parameters or {}
        timeout_s = self.timeout_s or parameters.get("timeout", 0) / 1e6
        token = LEDGER.started(parameters.get("priority", 0), float(deadline) if deadline else None,
                               arrived + timeout_s if arrived is not None and timeout_s else None)
        try:
            time.sleep(self.cost_s)
        finally:
            LEDGER.ended(token)
        x = payload.inputs[0].as_numpy()
        out = InferOutput(name="y", shape=list(x.shape), datatype="INT32")
        out.set_data_from_numpy(x, binary_data=False)
        return InferResponse(model_name=self.name, infer_outputs=[out], response_id=payload.id)


class Stats(kserve.Model):
    """op 0: begin a new window; op 1: the window's report as JSON."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload: InferRequest, headers=None):
        op = int(payload.inputs[0].as_numpy().reshape(-1)[0])
        if op == 0:
            LEDGER.begin_window()
        report = json.dumps(LEDGER.report())
        out = InferOutput(name="stats", shape=[1], datatype="BYTES", data=[report])
        return InferResponse(model_name=self.name, infer_outputs=[out], response_id=payload.id)


def main():
    parser = argparse.ArgumentParser(parents=[kserve.model_server.parser], add_help=False)
    parser.add_argument("--cost_ms", type=float, default=10.0)
    parser.add_argument("--timeout_us", type=int, default=0, help="default_timeout_microseconds (0: none)")
    parser.add_argument("--max_queue", type=int, default=0, help="max_queue_size (0: unbounded)")
    parser.add_argument("--trace_handoff", action="store_true", help="time each slot release (a diagnostic)")
    args, _ = parser.parse_known_args()
    note_arrivals()
    if args.trace_handoff:
        trace_handoff()
    work = Work(args.model_name, args.cost_ms / 1000.0, args.timeout_us, args.max_queue)
    kserve.ModelServer().start([work, Stats(args.model_name + "_stats")])


if __name__ == "__main__":
    main()

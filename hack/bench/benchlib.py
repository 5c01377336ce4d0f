"""What the benches share.

Cases and their selection, the targets (how each server is started on free
127.0.0.1 ports and how its readiness is probed), process-group start and
stop, memory, CPU time and idle detection over the server's process tree, the
per-(target, case) measurement flow, the result table and the main loop.

A bench module describes itself as a ``Bench``: the cases, ``check`` (one real
request, returns None or what is wrong, or raises ``NotApplicable``) and
``load`` (one timed load run, returns a ``LoadResult``). ``run_bench`` starts
the targets, measures every (case, target) and returns the rows as data
(run_all.py uses that); ``main`` does the same for one bench on the command
line and prints its table.
"""

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
# The kserve_sdk tree that target "ours" runs (PYTHONPATH, cwd): this repo, or BENCH_SDK_TREE (another
# checkout, e.g. a git worktree of an older commit, measured by this same harness).
REPO = os.path.abspath(os.environ.get("BENCH_SDK_TREE") or os.path.dirname(os.path.dirname(HERE)))
HOST = "127.0.0.1"
MODEL = "addone"
ALL_TARGETS = ["bare", "ours", "kserve", "mlserver", "litserve", "bentoml"]


# --------------------------------------------------------------------------- cases

@dataclass(frozen=True)
class Case:
    name: str          # e.g. v2-json-small
    conc: int          # concurrent requests in flight
    proto: str         # bench specific: v1 | v2json | v2bin | grpc
    n: int             # FP32 elements, shape [1, n]
    min_seconds: float = 0  # a timed window at least this long, whatever --duration (slow cells)

    def window(self, duration: float) -> float:
        """The timed seconds of this case under ``--duration``."""
        return max(duration, self.min_seconds)

    @property
    def key(self):
        return f"{self.name}@c{self.conc}"


def select_cases(spec, cases):
    """'' -> all; else a comma list of NAME or NAME@cN."""
    if not spec:
        return list(cases)
    out = []
    for item in spec.split(","):
        item = item.strip()
        name, _, conc = item.partition("@")
        conc = conc.lstrip("c")
        hits = [c for c in cases if c.name == name and (not conc or str(c.conc) == conc)]
        if not hits:
            raise SystemExit(f"unknown case {item!r}; known: {', '.join(c.key for c in cases)}")
        out.extend(h for h in hits if h not in out)
    return out


# --------------------------------------------------------------------------- processes

def free_ports(n):
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def proc_tree(pid):
    """pid and all its descendants (from /proc/*/stat)."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def reset_hwm(pid):
    """Reset VmHWM to current RSS (clear_refs 5, Linux >= 4.0). Returns success."""
    ok = True
    for p in proc_tree(pid):
        try:
            with open(f"/proc/{p}/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            ok = False
    return ok


def cpu_ticks(pid):
    """utime + stime in clock ticks, summed over pid and its descendants."""
    total = 0
    for p in proc_tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])   # utime + stime
        except (OSError, IndexError, ValueError):
            pass
    return total


def wait_idle(pid, timeout=60.0, interval=0.25):
    """Wait until the server tree uses < ~10% CPU for two intervals in a row.

    Load generators abandon in-flight requests when they stop; a slow server
    keeps computing them and would steal CPU from the next measurement.
    Returns seconds waited.
    """
    hz = os.sysconf("SC_CLK_TCK")
    t0 = time.monotonic()
    last, quiet = cpu_ticks(pid), 0
    while time.monotonic() - t0 < timeout:
        time.sleep(interval)
        now = cpu_ticks(pid)
        quiet = quiet + 1 if (now - last) / hz < 0.1 * interval else 0
        last = now
        if quiet >= 2:
            break
    return time.monotonic() - t0


def status_mib(pid, key):
    """A /proc/<pid>/status kB field (e.g. VmRSS, VmHWM) summed over the process tree, in MiB."""
    total = 0
    for p in proc_tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith(key + ":"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def peak_mib(pid):
    """VmHWM (peak RSS since start or the last reset_hwm) summed over the process tree, in MiB."""
    return status_mib(pid, "VmHWM")


def rss_mib(pid):
    """Current RSS summed over the process tree, in MiB."""
    return status_mib(pid, "VmRSS")


def stop_group(proc, grace=10):
    """SIGTERM proc's process group, SIGKILL it after grace seconds. proc was started with
    start_new_session=True."""
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_bounded(cmd, timeout, **kwargs):
    """Run cmd in its own process group; (returncode, stdout, stderr) or None when it did not
    finish within timeout. The group is stopped on timeout, on errors and on Ctrl-C."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        return None
    finally:
        stop_group(proc, grace=5)


# --------------------------------------------------------------------------- readiness

def http_ready(*paths, port=None):
    """Ready when any of the paths answers 200 on port (default: the target's)."""
    def probe(target):
        for path in paths:
            try:
                conn = http.client.HTTPConnection(HOST, port or target.port, timeout=2)
                conn.request("GET", path)
                status = conn.getresponse().status
                conn.close()
                if status == 200:
                    return True
            except OSError:
                pass
        return False
    return probe


def grpc_ready(target):
    """Ready when inference.GRPCInferenceService/ServerReady says ready=true."""
    import grpc
    from tritonclient.grpc import service_pb2
    try:
        with grpc.insecure_channel(f"{HOST}:{target.grpc_port or target.port}") as ch:
            call = ch.unary_unary("/inference.GRPCInferenceService/ServerReady",
                                  request_serializer=service_pb2.ServerReadyRequest.SerializeToString,
                                  response_deserializer=service_pb2.ServerReadyResponse.FromString)
            return call(service_pb2.ServerReadyRequest(), timeout=2).ready
    except grpc.RpcError:
        return False


# --------------------------------------------------------------------------- targets

@dataclass
class Target:
    name: str
    desc: str = ""
    cmd: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    cwd: str = REPO
    port: int = 0                                      # the port under test (HTTP or gRPC)
    http_port: int = 0
    grpc_port: int = 0
    ready: Callable = None                             # ready(target) -> bool
    unsupported: dict = field(default_factory=dict)   # case name -> reason
    unavailable: str = ""                              # whole target skipped: why
    path: str = ""                                     # its own route for the v1-shaped JSON body ('' = KServe's)
    proc: subprocess.Popen = None
    log: str = ""
    ready_s: float = None                              # seconds from start to ready

    def start(self, workdir):
        self.log = os.path.join(workdir, f"{self.name}.log")
        env = dict(os.environ)
        env.update(self.env)
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen(self.cmd, cwd=self.cwd, env=env, stdout=logf,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout, interval=0.2):
        """None once ready(self) is true, else why not (exited, or timeout seconds passed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                return f"exited with code {self.proc.returncode} before ready"
            if self.ready(self):
                return None
            time.sleep(interval)
        return f"not ready after {timeout:.0f}s"

    def stop(self):
        """SIGTERM the process group, SIGKILL it after 10 s."""
        stop_group(self.proc)

    def log_tail(self, n=25):
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


def venv_version(python, dist):
    r = subprocess.run([python, "-c", f"from importlib.metadata import version; print(version({dist!r}))"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def build_targets(names, args, workdir, proto, unsupported=None, *, model=MODEL,
                  model_script="addone_model.py", mlserver_dir="mlserver_addone", bare_proto=None,
                  peer_api="addone"):
    """proto 'http', 'grpc' or 'both': which port is benched (target.port; 'both' benches
    target.http_port and target.grpc_port, port is the HTTP one), whether gRPC is enabled and how
    readiness is probed.

    unsupported: {target name: {case name: reason}}. model_script (for ours/kserve) and mlserver_dir
    (for mlserver) are in hack/bench/ and serve the model named ``model``; peer_api is the model the
    LitServe and BentoML flavors serve (peers.py: addone or stream).
    """
    if proto not in ("http", "grpc", "both"):
        raise ValueError(f"proto must be http, grpc or both, not {proto!r}")
    grpc = proto == "grpc"
    use_grpc = proto in ("grpc", "both")
    unsupported = unsupported or {}
    targets = []
    for name in names:
        http_port, grpc_port, metrics_port = free_ports(3)
        t = Target(name, port=grpc_port if grpc else http_port, http_port=http_port, grpc_port=grpc_port,
                   unsupported=dict(unsupported.get(name, {})))
        if name == "bare":
            bare_grpc = (bare_proto or proto) == "grpc"  # bare_proto: the one protocol the bare servers offer here
            if bare_grpc:
                t.cmd = [args.python, os.path.join(HERE, "bare_grpc.py"), "--host", HOST,
                         "--port", str(grpc_port)]
                t.desc = "grpc.aio + tritonclient's service_pb2 + numpy, 1 process"
            else:
                t.cmd = [args.python, os.path.join(HERE, "bare_tornado.py"), "--host", HOST,
                         "--port", str(http_port)]
                t.desc = "tornado+orjson+numpy, 1 process"
            t.ready = grpc_ready if bare_grpc else http_ready("/v2/health/ready")
        elif name in ("ours", "kserve"):
            model_args = [os.path.join(HERE, model_script), "--model_name", model,
                          "--http_port", str(http_port), "--grpc_port", str(grpc_port),
                          "--enable_grpc", "true" if use_grpc else "false"]
            ready_http = http_ready("/v2/health/ready", f"/v1/models/{model}", port=http_port)
            t.ready = grpc_ready if grpc else ready_http
            if proto == "both":
                t.ready = lambda tgt, _h=ready_http: _h(tgt) and grpc_ready(tgt)
            flags = "--enable_grpc true" if use_grpc else "default flags"
            if name == "ours":
                t.env = {"BENCH_IMPL": "ours", "PYTHONPATH": REPO}
                t.cmd = [args.python] + model_args
                r = subprocess.run([args.python, "-c", "import kserve_sdk"], cwd=REPO,
                                   env={**os.environ, **t.env}, capture_output=True, text=True)
                if r.returncode != 0:
                    t.unavailable = "kserve_sdk does not import:\n" + (r.stderr or r.stdout).strip()
                t.desc = f"kserve_sdk ({REPO}), {flags}"
            else:
                py = os.path.join(args.venvs, "kserve", "bin", "python")
                t.env = {"BENCH_IMPL": "kserve"}
                t.cmd = [py] + model_args
                ver = venv_version(py, "kserve") if os.path.exists(py) else None
                if ver is None:
                    t.unavailable = (f"no kserve in {os.path.dirname(os.path.dirname(py))}: "
                                     "run hack/bench/setup_peers.sh")
                t.desc = f"kserve {ver}, {flags}" + ("" if grpc else " (uvicorn, workers=1)")
        elif name == "mlserver":
            exe = os.path.join(args.venvs, "mlserver", "bin", "mlserver")
            ver = venv_version(os.path.join(args.venvs, "mlserver", "bin", "python"), "mlserver") \
                if os.path.exists(exe) else None
            if ver is None:
                t.unavailable = f"no mlserver in {args.venvs}/mlserver: run hack/bench/setup_peers.sh"
            mdir = os.path.join(workdir, mlserver_dir)
            shutil.copytree(os.path.join(HERE, mlserver_dir), mdir,
                            ignore=shutil.ignore_patterns("__pycache__"))
            with open(os.path.join(mdir, "settings.json")) as f:
                settings = json.load(f)
            settings.update(host=HOST, http_port=http_port, grpc_port=grpc_port,
                            metrics_port=metrics_port)
            with open(os.path.join(mdir, "settings.json"), "w") as f:
                json.dump(settings, f, indent=2)
            t.cmd = [exe, "start", mdir]
            t.cwd = mdir   # MLServer writes .metrics/.envs under its cwd
            # MLServer starts gRPC and REST together; the model-ready REST route
            # is the one that waits for the model to load.
            ready_http = http_ready(f"/v2/models/{model}/ready", port=http_port)
            # ready_http bound now: the lambda runs after the loop has moved on to other targets
            t.ready = (lambda tgt, http=ready_http: http(tgt) and grpc_ready(tgt)) if use_grpc else ready_http
            t.desc = f"mlserver {ver}, parallel_workers={settings.get('parallel_workers')}"
        elif name in ("litserve", "bentoml"):
            import peers  # here, not at the top: peers.py uses this module's helpers
            peers.configure(t, args, workdir, proto, peer_api)
        else:
            raise SystemExit(f"unknown target {name!r}; known: {', '.join(ALL_TARGETS)}")
        targets.append(t)
    return targets


# --------------------------------------------------------------------------- one measurement

class NotApplicable(Exception):
    """Raised by a bench's check when the target cannot serve the case (the row says n/a and why)."""


@dataclass
class LoadResult:
    """What one load run produced, load-generator independent."""
    seconds: float                 # timed window
    total: int                     # answers received (any status)
    ok: int                        # correct answers
    p50_ms: float = None
    p99_ms: float = None
    p999_ms: float = None          # p99.9, when the load generator reports every request's time
    errors: dict = field(default_factory=dict)   # error column key -> count


@dataclass
class Row:
    target: str
    case: Case
    rps: float = None
    p50: float = None
    p99: float = None
    p999: float = None    # p99.9
    errors: dict = field(default_factory=dict)
    mem: float = None
    cpu_ms: float = None  # server CPU (utime+stime, process tree) per answer over the timed window
    note: str = ""        # n/a reason or error text
    round_rps: list = field(default_factory=list)  # req/s of every round (--rounds), this row's among them
    round_p99: list = field(default_factory=list)  # p99 and p99.9 of every round
    round_p999: list = field(default_factory=list)


def precheck(target, case, payload, check):
    """The row's note when the (target, case) cannot be measured, else ''."""
    if target.unavailable:
        return "n/a: " + target.unavailable.splitlines()[0]
    if case.name in target.unsupported:
        return "n/a: " + target.unsupported[case.name]
    if not target.alive():
        return f"ERROR: server is not running (exit code {target.proc.returncode if target.proc else '?'})"
    try:
        err = check(target, case, payload)
    except NotApplicable as e:
        return f"n/a: {e}"
    return "ERROR (correctness check): " + err if err else ""


def timed_load(args, target, case, payload, load):
    """The timed load run: (LoadResult | None, error, server CPU ms per answer | None)."""
    hz = os.sysconf("SC_CLK_TCK")
    ticks0 = cpu_ticks(target.proc.pid)
    res, err = load(args, target, case, payload, case.window(args.duration))
    ticks = cpu_ticks(target.proc.pid) - ticks0
    cpu_ms = ticks * 1000 / hz / res.total if res is not None and res.total else None
    return res, err, cpu_ms


def bench_one(args, target, case, payload, hwm_reset_ok, check, load, warm_up=True):
    """check(target, case, payload) -> None | str (or raises NotApplicable);
    load(args, target, case, payload, seconds) -> (LoadResult | None, error str)."""
    row = Row(target.name, case)
    row.note = precheck(target, case, payload, check)
    if row.note:
        return row
    if hwm_reset_ok:
        reset_hwm(target.proc.pid)
    if warm_up and args.warmup > 0:
        load(args, target, case, payload, args.warmup)
        wait_idle(target.proc.pid)
    res, err, row.cpu_ms = timed_load(args, target, case, payload, load)
    row.mem = peak_mib(target.proc.pid)
    wait_idle(target.proc.pid)
    if res is None:
        row.note = "ERROR: " + err
        return row
    row.errors = res.errors
    nerr = sum(res.errors.values())
    errs = ", ".join(f"{k} {v}" for k, v in res.errors.items())
    if res.total == 0:
        row.note = f"TOO SLOW: no response completed within {case.window(args.duration)}s " \
                   f"({errs}); use a longer --duration"
        return row
    if res.ok <= 0:
        # All answers were errors: show one, not a rate.
        sample = check(target, case, payload) or "(a later request succeeded)"
        row.note = f"ERROR: no correct answer under load ({res.total} answers; {errs}); " \
                   f"sample: {sample}"
        return row
    row.rps = res.ok / res.seconds
    row.p50 = res.p50_ms
    row.p99 = res.p99_ms
    row.p999 = res.p999_ms
    if nerr:
        row.note = "some requests failed; probe: " + (check(target, case, payload) or "OK")
    return row


# --------------------------------------------------------------------------- report

def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def print_table(rows, targets, cases, err_cols, *, base="bare", headers=("req/s", "p50 ms", "p99 ms")):
    """err_cols: [(key in Row.errors, header)], printed between p99.9 and cpu ms/req.

    base: the target the rate of every other target is divided by in the ratio table.
    headers: the titles of Row.rps, Row.p50 and Row.p99.
    """
    rate_h, p50_h, p99_h = headers
    print()
    hdr = f"{'target':<9} {'case':<15} {'conc':>4} {rate_h:>9} {p50_h:>9} {p99_h:>9} {'p99.9 ms':>9} " + \
          "".join(f"{h:>8}" for _, h in err_cols) + f" {'cpu ms/req':>10} {'peak MiB':>9}"
    print(hdr)
    print("-" * len(hdr))
    notes = []
    for case in cases:
        for t in targets:
            r = rows[(t.name, case.key)]
            if r.rps is None:
                mem = fmt(r.mem, ".1f") if r.mem else ""
                print(f"{r.target:<9} {case.name:<15} {case.conc:>4} {r.note}" + (f"  [peak {mem} MiB]" if mem else ""))
                continue
            flag = " *" if r.note else ""
            errs = "".join(f"{r.errors.get(k, 0):>8d}" for k, _ in err_cols)
            print(f"{r.target:<9} {case.name:<15} {case.conc:>4} {r.rps:>9.1f} {fmt(r.p50, '9.2f')} "
                  f"{fmt(r.p99, '9.2f')} {fmt(r.p999, '9.2f')}{errs} {fmt(r.cpu_ms, '10.3f')} "
                  f"{fmt(r.mem, '9.1f')}{flag}")
            if r.note:
                notes.append(f"  * {r.target} {case.key}: {r.note}")
        print()
    if notes:
        print("notes:")
        print("\n".join(notes))
        print()
    print_ratios(rows, targets, cases, base, rate_h)


def print_ratios(rows, targets, cases, base, rate_h):
    """The rate of every target divided by base's, per case (paired by round: see paired_ratio)."""
    others = [t for t in targets if t.name != base]
    if not others:
        return
    print(f"{rate_h} ratio to {base} (same run):")
    print(f"{'case':<15} {'conc':>4} " + " ".join(f"{t.name:>9}" for t in others))
    for case in cases:
        base_row = rows.get((base, case.key))
        cells = []
        for t in others:
            r = rows[(t.name, case.key)]
            if base_row is None or base_row.rps is None:
                cells.append(f"{'no ' + base:>9}")
            elif r.rps is None:
                cells.append(f"{'n/a':>9}")
            else:
                cells.append(f"{paired_ratio(r, base_row):>9.2f}")
        print(f"{case.name:<15} {case.conc:>4} " + " ".join(cells))


def paired_ratio(row, base):
    """row's req/s over base's: the median of the rounds' ratios, each round's two rates measured back to
    back, so a busy spell of the machine moves one round's ratio rather than one target's median. Rows
    without the same rated rounds (one round, an error in one) fall back to the two medians' ratio."""
    pairs = [a / b for a, b in zip(row.round_rps, base.round_rps, strict=False) if a and b]
    if len(pairs) < 2 or len(pairs) != len(row.round_rps) or len(pairs) != len(base.round_rps):
        return row.rps / base.rps
    return statistics.median(pairs)


# --------------------------------------------------------------------------- running a bench

@dataclass
class Bench:
    """A bench module's description of itself, for run_bench and main.

    make_payload(case, workdir) -> payload; check and load: see bench_one; err_cols, base, headers:
    see print_table; banner: one line describing the load; unsupported: {target: {case name: reason}}
    for build_targets(names, args, workdir, proto, unsupported), or make_targets(names, args, workdir)
    -> [Target] instead; report(rows, targets, cases) prints more after the table while the servers
    still run; data: whatever the bench wants to hand back beside the rows.
    """
    tag: str
    cases: list
    proto: str
    make_payload: Callable
    check: Callable
    load: Callable
    err_cols: list
    banner: str
    unsupported: dict = None
    make_targets: Callable = None
    base: str = "bare"
    headers: tuple = ("req/s", "p50 ms", "p99 ms")
    report: Callable = None
    data: dict = field(default_factory=dict)


@dataclass
class BenchRun:
    """What run_bench measured: rows keyed by (target name, case key)."""
    rows: dict
    targets: list
    cases: list


def start_targets(targets, args, workdir):
    """Start every available target and wait for it; a failed one becomes unavailable.
    Returns whether the peak-memory reset works."""
    hwm_ok = True
    for t in targets:
        if t.unavailable:
            print(f"  {t.name:<9} UNAVAILABLE: {t.unavailable}")
            continue
        t0 = time.monotonic()
        t.start(workdir)
        err = t.wait_ready(args.ready_timeout)
        if err:
            t.unavailable = f"failed to start: {err}"
            print(f"  {t.name:<9} FAILED TO START ({err}); log tail:\n{t.log_tail()}")
            t.stop()
            continue
        t.ready_s = time.monotonic() - t0
        hwm_ok = hwm_ok and reset_hwm(t.proc.pid)
        print(f"  {t.name:<9} pid {t.proc.pid} port {t.port}: {t.desc} (ready in {t.ready_s:.1f}s)")
    return hwm_ok


def run_cases(args, bench, targets, cases, payloads, hwm_ok):
    """Every (case, target), case-major so drift hits every target alike. With --rounds R every case runs
    R rounds, each measuring all targets in turn (warm-up in the first only), and a target's row is its
    median round by req/s: a few seconds of a busy machine then move one round, not the result.
    Returns the rows."""
    rows = {}
    rounds = max(1, getattr(args, "rounds", 1))
    for case in cases:
        measured = {t.name: [] for t in targets}
        for r in range(rounds):
            for t in targets:
                row = bench_one(args, t, case, payloads[case.name], hwm_ok, bench.check, bench.load,
                                warm_up=r == 0)
                measured[t.name].append(row)
                shown = f"{row.rps:.1f} {bench.headers[0]}" if row.rps is not None else row.note
                label = f" round {r + 1}/{rounds}" if rounds > 1 else ""
                print(f"  .. {case.key:<20} {t.name:<9} {shown}{label}", flush=True)
        for t in targets:
            rows[(t.name, case.key)] = median_round(measured[t.name])
    return rows


def median_round(rounds):
    """The round with the median req/s (the lower middle one of an even count), with the highest peak
    memory and all rounds' errors; every round's req/s is kept in ``round_rps``. Its p99 and p99.9 are
    the medians over the rounds (a tail percentile of one window swings more than its rate), every
    round's in ``round_p99`` and ``round_p999``. Rounds without a rate (an error, n/a) count only when no
    round has one."""
    rated = sorted((r for r in rounds if r.rps is not None), key=lambda r: r.rps)
    if not rated:
        return rounds[0]
    row = rated[(len(rated) - 1) // 2]
    mems = [r.mem for r in rounds if r.mem is not None]
    row.mem = max(mems) if mems else None
    errors = {}
    for r in rounds:
        for k, v in r.errors.items():
            errors[k] = errors.get(k, 0) + v
    row.errors = errors
    row.round_rps = [r.rps for r in rounds]
    row.round_p99 = [r.p99 for r in rounds]
    row.round_p999 = [r.p999 for r in rounds]
    row.p99, row.p999 = median_of(row.round_p99), median_of(row.round_p999)
    return row


def median_of(values):
    """The median of the values that are there (a tail percentile over rounds), None when none is."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _int_if_whole(v):
    return int(v) if float(v).is_integer() else v


def run_bench(args, bench):
    """Start the targets, run every (case, target), print the table; return a BenchRun.

    The servers are stopped (by process group) at the end, also on errors and KeyboardInterrupt,
    which propagate. args: the bench's arg_parser namespace.
    """
    args.duration = _int_if_whole(args.duration)
    args.warmup = _int_if_whole(args.warmup)
    names = [n.strip() for n in args.targets.split(",") if n.strip()]
    cases = select_cases(args.cases, bench.cases)
    workdir = tempfile.mkdtemp(prefix=f"{bench.tag}-")
    args.workdir = workdir          # bodies, server logs, load-generator logs
    targets = []
    try:
        payloads = {c.name: bench.make_payload(c, workdir) for c in cases}
        targets = bench.make_targets(names, args, workdir) if bench.make_targets else \
            build_targets(names, args, workdir, bench.proto, bench.unsupported)
        print(f"{bench.tag}: {os.cpu_count()} CPUs, loopback {HOST}, {bench.banner}, "
              f"{args.warmup}s warm-up + {args.duration}s per case")
        hwm_ok = start_targets(targets, args, workdir)
        print(f"  peak MiB = VmHWM summed over the server's process tree, "
              f"{'reset before each case' if hwm_ok else 'since server start (clear_refs failed)'}; "
              f"cpu ms/req = server utime+stime over the timed window / answers")
        print("  running cases case-major (all targets per case) so drift hits every target alike",
              flush=True)
        rows = run_cases(args, bench, targets, cases, payloads, hwm_ok)
        print_table(rows, targets, cases, bench.err_cols, base=bench.base, headers=bench.headers)
        if bench.report is not None:
            bench.report(rows, targets, cases)
        for t in targets:
            if t.proc is not None and not t.alive():
                print(f"\n{t.name} exited with code {t.proc.returncode}; log tail:\n{t.log_tail()}")
        return BenchRun(rows, targets, cases)
    finally:
        for t in targets:
            t.stop()
        if args.keep_workdir:
            print(f"\nworkdir kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------- main

def arg_parser(description, cases):
    """The flags every bench takes (targets, cases, durations, venvs, interpreter, workdir)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--targets", default=",".join(ALL_TARGETS),
                    help=f"comma list from {','.join(ALL_TARGETS)} (default: all)")
    ap.add_argument("--cases", default="",
                    help="comma list of case names, optionally NAME@cN for one concurrency "
                         f"(default: all of {', '.join(c.key for c in cases)})")
    ap.add_argument("--duration", type=float, default=8, help="timed seconds per case (default 8)")
    ap.add_argument("--warmup", type=float, default=1, help="warm-up seconds per case (default 1)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds per case, all targets in turn in each; a row is its median round (default 1)")
    ap.add_argument("--ready-timeout", type=float, default=90, help="server start timeout in s (default 90)")
    ap.add_argument("--venvs", default=os.environ.get("BENCH_VENVS", "/tmp/bench-venvs"),
                    help="where setup_peers.sh put the peer venvs")
    ap.add_argument("--python", default=sys.executable, help="interpreter for bare and ours")
    ap.add_argument("--keep-workdir", action="store_true", help="keep request bodies and server logs")
    return ap


def raise_on_signals():
    """SIGINT (also when inherited as ignored, e.g. under `cmd &`), SIGTERM and SIGHUP all raise
    KeyboardInterrupt, so finally-blocks stop the servers."""
    def _interrupt(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)


def main(args, bench):
    """Command-line entry of one bench: run_bench, exit 130 when interrupted."""
    raise_on_signals()
    try:
        run_bench(args, bench)
    except KeyboardInterrupt as e:
        print(f"\ninterrupted ({e}); servers stopped", file=sys.stderr)
        sys.exit(130)


def report_alone(args, run, markdown, checks):
    """Command-line entry of a group's bench run alone (sched_bench, jobs_bench): ``run(args)``, its result
    written to ``--json`` when given, then its table and its checks printed; exit 130 when interrupted."""
    import bench_report

    raise_on_signals()
    try:
        result = run(args)
    except KeyboardInterrupt as e:
        print(f"\ninterrupted ({e}); servers stopped", file=sys.stderr)
        sys.exit(130)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print()
    print(markdown(result))
    print(bench_report.acceptance_md(checks(result)))

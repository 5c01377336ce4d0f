"""Side-by-side HTTP benchmark of add-one model servers on loopback.

    /work/main/.venv/bin/python hack/bench/http_bench.py \
        [--targets bare,ours,kserve,mlserver] [--cases v2-json-small,...] [--duration 8]

Targets (each started on free 127.0.0.1 ports, stopped by process group at exit):
  bare      hack/bench/bare_tornado.py          (Tornado + orjson + numpy, the ceiling)
  ours      hack/bench/addone_model.py with BENCH_IMPL=ours   (kserve_sdk, this repo)
  kserve    hack/bench/addone_model.py with BENCH_IMPL=kserve (kserve==0.21.0 venv)
  mlserver  mlserver start <copy of hack/bench/mlserver_addone> (mlserver==1.7.1 venv)

The peer venvs come from hack/bench/setup_peers.sh. The load generator is wrk
(apt-get install -y wrk) driven by hack/bench/wrk_post.lua. See README.md.
"""

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np
import orjson

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
HOST = "127.0.0.1"
MODEL = "addone"
HDR = "Inference-Header-Content-Length"
ALL_TARGETS = ["bare", "ours", "kserve", "mlserver"]


# --------------------------------------------------------------------------- cases

@dataclass(frozen=True)
class Case:
    name: str          # e.g. v2-json-small
    conc: int          # wrk connections
    proto: str         # v1 | v2json | v2bin
    n: int             # FP32 elements, shape [1, n]

    @property
    def key(self):
        return f"{self.name}@c{self.conc}"


CASES = [
    Case("v2-json-small", 1, "v2json", 16),
    Case("v2-json-small", 32, "v2json", 16),
    Case("v1-small", 32, "v1", 16),
    Case("v2-binary-1mib", 4, "v2bin", 262144),
    Case("v2-json-1mib", 4, "v2json", 262144),
]


@dataclass
class Payload:
    path: str
    body_file: str
    body: bytes
    ctype: str
    hdrlen: str          # "" when not using the binary extension
    x: np.ndarray        # the FP32 input, shape [1, n]


def make_payload(case, workdir):
    rng = np.random.default_rng(case.n)
    x = rng.random((1, case.n), dtype=np.float32)
    hdrlen = ""
    ctype = "application/json"
    if case.proto == "v1":
        path = f"/v1/models/{MODEL}:predict"
        body = orjson.dumps({"instances": x}, option=orjson.OPT_SERIALIZE_NUMPY)
    elif case.proto == "v2json":
        path = f"/v2/models/{MODEL}/infer"
        body = orjson.dumps(
            {"id": "bench", "inputs": [{"name": "input-0", "shape": list(x.shape),
                                        "datatype": "FP32", "data": x.reshape(-1)}]},
            option=orjson.OPT_SERIALIZE_NUMPY)
    else:
        path = f"/v2/models/{MODEL}/infer"
        raw = x.tobytes()
        header = orjson.dumps(
            {"id": "bench",
             "inputs": [{"name": "input-0", "shape": list(x.shape), "datatype": "FP32",
                         "parameters": {"binary_data_size": len(raw)}}],
             "parameters": {"binary_data_output": True}})
        body = header + raw
        hdrlen = str(len(header))
        ctype = "application/octet-stream"
    body_file = os.path.join(workdir, f"body-{case.name}.bin")
    with open(body_file, "wb") as f:
        f.write(body)
    return Payload(path, body_file, body, ctype, hdrlen, x)


def check_response(case, payload, status, headers, data):
    """Return None when the answer is input+1, else a description of what is wrong."""
    if not 200 <= status < 300:
        return f"HTTP {status}: {data[:300]!r}"
    try:
        if case.proto == "v1":
            inst = np.asarray(orjson.loads(payload.body)["instances"], dtype=np.float64)
            got = np.asarray(orjson.loads(data)["predictions"], dtype=np.float64)
            want = inst + 1
        else:
            hl = headers.get(HDR.lower())
            if hl is not None:
                n = int(hl)
                resp = orjson.loads(data[:n])
                raw = data[n:]
            else:
                resp, raw = orjson.loads(data), b""
            if case.proto == "v2bin" and hl is None:
                return "binary output requested but the response has no " + HDR
            out = resp["outputs"][0]
            if out.get("datatype") != "FP32":
                return f"datatype {out.get('datatype')!r} != 'FP32'"
            if list(out.get("shape", [])) != list(payload.x.shape):
                return f"shape {out.get('shape')} != {list(payload.x.shape)}"
            size = (out.get("parameters") or {}).get("binary_data_size")
            if size is not None:
                if size != len(raw):
                    return f"binary_data_size {size} != {len(raw)} bytes after the header"
                got = np.frombuffer(raw, dtype=np.float32)
            else:
                got = np.asarray(out["data"], dtype=np.float32)
            got = got.reshape(payload.x.shape)
            want = payload.x + np.float32(1)
        if got.shape != want.shape:
            return f"result shape {got.shape} != {want.shape}"
        if not np.allclose(got, want, rtol=1e-6, atol=0):
            bad = int(np.argmax(~np.isclose(got, want, rtol=1e-6, atol=0)))
            return f"wrong value at flat index {bad}: {got.reshape(-1)[bad]} != {want.reshape(-1)[bad]}"
    except Exception as e:  # noqa: BLE001 - any undecodable answer is a failure
        return f"undecodable response ({e!r}): {data[:300]!r}"
    return None


def one_request(port, payload, timeout=30):
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        headers = {"Content-Type": payload.ctype}
        if payload.hdrlen:
            headers[HDR] = payload.hdrlen
        conn.request("POST", payload.path, body=payload.body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        conn.close()


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

    wrk abandons in-flight requests when it stops; a slow server keeps computing
    them and would steal CPU from the next measurement. Returns seconds waited.
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


def peak_mib(pid):
    total = 0
    for p in proc_tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


@dataclass
class Target:
    name: str
    desc: str = ""
    cmd: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    cwd: str = REPO
    port: int = 0
    ready_paths: tuple = ("/v2/health/ready",)
    unsupported: dict = field(default_factory=dict)   # case name -> reason
    unavailable: str = ""                              # whole target skipped: why
    proc: subprocess.Popen = None
    log: str = ""

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

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                return f"exited with code {self.proc.returncode} before ready"
            for path in self.ready_paths:
                try:
                    conn = http.client.HTTPConnection(HOST, self.port, timeout=2)
                    conn.request("GET", path)
                    status = conn.getresponse().status
                    conn.close()
                    if status == 200:
                        return None
                except OSError:
                    pass
            time.sleep(0.2)
        return f"not ready after {timeout:.0f}s"

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=5)

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


def build_targets(names, args, workdir):
    targets = []
    for name in names:
        http_port, grpc_port, metrics_port = free_ports(3)
        t = Target(name, port=http_port)
        if name == "bare":
            t.cmd = [args.python, os.path.join(HERE, "bare_tornado.py"), "--host", HOST,
                     "--port", str(http_port)]
            t.desc = "tornado+orjson+numpy, 1 process"
        elif name in ("ours", "kserve"):
            model_args = [os.path.join(HERE, "addone_model.py"), "--model_name", MODEL,
                          "--http_port", str(http_port), "--grpc_port", str(grpc_port),
                          "--enable_grpc", "false"]
            t.ready_paths = ("/v2/health/ready", f"/v1/models/{MODEL}")
            if name == "ours":
                t.env = {"BENCH_IMPL": "ours", "PYTHONPATH": REPO}
                t.cmd = [args.python] + model_args
                r = subprocess.run([args.python, "-c", "import kserve_sdk"], cwd=REPO,
                                   env={**os.environ, **t.env}, capture_output=True, text=True)
                if r.returncode != 0:
                    t.unavailable = "kserve_sdk does not import:\n" + (r.stderr or r.stdout).strip()
                t.desc = "kserve_sdk (this repo), default flags"
            else:
                py = os.path.join(args.venvs, "kserve", "bin", "python")
                t.env = {"BENCH_IMPL": "kserve"}
                t.cmd = [py] + model_args
                ver = venv_version(py, "kserve") if os.path.exists(py) else None
                if ver is None:
                    t.unavailable = f"no kserve in {os.path.dirname(os.path.dirname(py))}: run hack/bench/setup_peers.sh"
                t.desc = f"kserve {ver}, default flags (uvicorn, workers=1)"
        elif name == "mlserver":
            exe = os.path.join(args.venvs, "mlserver", "bin", "mlserver")
            ver = venv_version(os.path.join(args.venvs, "mlserver", "bin", "python"), "mlserver") \
                if os.path.exists(exe) else None
            if ver is None:
                t.unavailable = f"no mlserver in {args.venvs}/mlserver: run hack/bench/setup_peers.sh"
            mdir = os.path.join(workdir, "mlserver_addone")
            shutil.copytree(os.path.join(HERE, "mlserver_addone"), mdir,
                            ignore=shutil.ignore_patterns("__pycache__"))
            with open(os.path.join(mdir, "settings.json")) as f:
                settings = json.load(f)
            settings.update(host=HOST, http_port=http_port, grpc_port=grpc_port,
                            metrics_port=metrics_port)
            with open(os.path.join(mdir, "settings.json"), "w") as f:
                json.dump(settings, f, indent=2)
            t.cmd = [exe, "start", mdir]
            t.cwd = mdir   # MLServer writes .metrics/.envs under its cwd
            t.ready_paths = (f"/v2/models/{MODEL}/ready",)
            t.unsupported = {
                "v1-small": "MLServer serves only the V2/Open Inference Protocol (no /v1 routes)",
                "v2-binary-1mib": "MLServer's REST server has no Triton binary tensor extension "
                                  "(Inference-Header-Content-Length is not parsed)",
            }
            t.desc = f"mlserver {ver}, parallel_workers={settings.get('parallel_workers')}"
        else:
            raise SystemExit(f"unknown target {name!r}; known: {', '.join(ALL_TARGETS)}")
        targets.append(t)
    return targets


# --------------------------------------------------------------------------- load

def run_wrk(args, target, case, payload, seconds):
    env = dict(os.environ, BENCH_BODY=payload.body_file, BENCH_CTYPE=payload.ctype,
               BENCH_HDRLEN=payload.hdrlen, BENCH_PATH=payload.path)
    threads = min(args.threads, case.conc)
    cmd = ["wrk", "-t", str(threads), "-c", str(case.conc), "-d", f"{seconds}s",
           "--timeout", f"{args.timeout}s", "-s", os.path.join(HERE, "wrk_post.lua"),
           f"http://{HOST}:{target.port}/"]
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=seconds + args.timeout + 30)
    except subprocess.TimeoutExpired:
        return None, "wrk did not finish in time"
    for line in r.stdout.splitlines():
        if line.startswith("BENCH_RESULT "):
            return json.loads(line.split(" ", 1)[1]), None
    return None, f"wrk failed (rc={r.returncode}): {(r.stderr or r.stdout).strip()[:500]}"


@dataclass
class Row:
    target: str
    case: Case
    rps: float = None
    p50: float = None
    p99: float = None
    non2xx: int = 0
    sockerr: int = 0
    mem: float = None
    note: str = ""        # n/a reason or error text


def bench_one(args, target, case, payload, hwm_reset_ok):
    row = Row(target.name, case)
    if target.unavailable:
        row.note = "n/a: " + target.unavailable.splitlines()[0]
        return row
    if case.name in target.unsupported:
        row.note = "n/a: " + target.unsupported[case.name]
        return row
    if not target.alive():
        row.note = f"ERROR: server is not running (exit code {target.proc.returncode if target.proc else '?'})"
        return row
    try:
        err = check_response(case, payload, *one_request(target.port, payload))
    except OSError as e:
        err = f"request failed: {e!r}"
    if err:
        row.note = "ERROR (correctness check): " + err
        return row
    if hwm_reset_ok:
        reset_hwm(target.proc.pid)
    if args.warmup > 0:
        run_wrk(args, target, case, payload, args.warmup)
        wait_idle(target.proc.pid)
    res, err = run_wrk(args, target, case, payload, args.duration)
    row.mem = peak_mib(target.proc.pid)
    wait_idle(target.proc.pid)
    if res is None:
        row.note = "ERROR: " + err
        return row
    secs = res["duration_us"] / 1e6
    row.non2xx = res["status_errors"]
    row.sockerr = res["connect"] + res["read"] + res["write"] + res["timeout"]
    ok = res["requests"] - res["status_errors"]
    if res["requests"] == 0:
        row.note = f"TOO SLOW: no response completed within {args.duration}s " \
                   f"({row.sockerr} socket errors); use a longer --duration"
        return row
    if ok <= 0:
        # All answers were errors: show one, not a rate.
        try:
            status, hdrs, data = one_request(target.port, payload)
            sample = check_response(case, payload, status, hdrs, data) or "(a later request succeeded)"
        except OSError as e:
            sample = repr(e)
        row.note = f"ERROR: no 2xx response under load ({res['requests']} answers, " \
                   f"{row.sockerr} socket errors); sample: {sample}"
        return row
    row.rps = ok / secs
    row.p50 = res["p50_us"] / 1000
    row.p99 = res["p99_us"] / 1000
    if row.non2xx or row.sockerr:
        try:
            status, hdrs, data = one_request(target.port, payload)
            row.note = "some requests failed; probe: " + (
                check_response(case, payload, status, hdrs, data) or "OK")
        except OSError as e:
            row.note = f"some requests failed; probe: {e!r}"
    return row


# --------------------------------------------------------------------------- report

def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def print_table(rows, targets, cases):
    print()
    hdr = f"{'target':<9} {'case':<15} {'conc':>4} {'req/s':>9} {'p50 ms':>9} {'p99 ms':>9} " \
          f"{'non2xx':>7} {'sockerr':>7} {'peak MiB':>9}"
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
            print(f"{r.target:<9} {case.name:<15} {case.conc:>4} {r.rps:>9.1f} {r.p50:>9.2f} {r.p99:>9.2f} "
                  f"{r.non2xx:>7d} {r.sockerr:>7d} {fmt(r.mem, '9.1f')}{flag}")
            if r.note:
                notes.append(f"  * {r.target} {case.key}: {r.note}")
        print()
    if notes:
        print("notes:")
        print("\n".join(notes))
        print()
    print("req/s ratio to bare (same run):")
    others = [t for t in targets if t.name != "bare"]
    print(f"{'case':<15} {'conc':>4} " + " ".join(f"{t.name:>9}" for t in others))
    for case in cases:
        base = rows.get(("bare", case.key))
        cells = []
        for t in others:
            r = rows[(t.name, case.key)]
            if base is None or base.rps is None:
                cells.append(f"{'no bare':>9}")
            elif r.rps is None:
                cells.append(f"{'n/a':>9}")
            else:
                cells.append(f"{r.rps / base.rps:>9.2f}")
        print(f"{case.name:<15} {case.conc:>4} " + " ".join(cells))


# --------------------------------------------------------------------------- main

def select_cases(spec):
    if not spec:
        return list(CASES)
    out = []
    for item in spec.split(","):
        item = item.strip()
        name, _, conc = item.partition("@")
        conc = conc.lstrip("c")
        hits = [c for c in CASES if c.name == name and (not conc or str(c.conc) == conc)]
        if not hits:
            raise SystemExit(f"unknown case {item!r}; known: {', '.join(c.key for c in CASES)}")
        out.extend(h for h in hits if h not in out)
    return out


def main():
    ap = argparse.ArgumentParser(description="Side-by-side loopback HTTP benchmark of add-one model servers.")
    ap.add_argument("--targets", default=",".join(ALL_TARGETS),
                    help=f"comma list from {','.join(ALL_TARGETS)} (default: all)")
    ap.add_argument("--cases", default="",
                    help="comma list of case names, optionally NAME@cN for one concurrency "
                         f"(default: all of {', '.join(c.key for c in CASES)})")
    ap.add_argument("--duration", type=float, default=8, help="timed seconds per case (default 8)")
    ap.add_argument("--warmup", type=float, default=1, help="warm-up seconds per case (default 1)")
    ap.add_argument("--threads", type=int, default=1, help="wrk threads (default 1: leave CPU to the server)")
    ap.add_argument("--timeout", type=int, default=10, help="wrk per-request timeout in s (default 10)")
    ap.add_argument("--ready-timeout", type=float, default=90, help="server start timeout in s (default 90)")
    ap.add_argument("--venvs", default=os.environ.get("BENCH_VENVS", "/tmp/bench-venvs"),
                    help="where setup_peers.sh put the peer venvs")
    ap.add_argument("--python", default=sys.executable, help="interpreter for bare and ours")
    ap.add_argument("--keep-workdir", action="store_true", help="keep bodies and server logs")
    args = ap.parse_args()
    args.duration = int(args.duration) if float(args.duration).is_integer() else args.duration
    args.warmup = int(args.warmup) if float(args.warmup).is_integer() else args.warmup

    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get update && apt-get install -y wrk")
    names = [n.strip() for n in args.targets.split(",") if n.strip()]
    cases = select_cases(args.cases)

    # SIGINT (also when inherited as ignored, e.g. under `cmd &`), SIGTERM and SIGHUP
    # all raise KeyboardInterrupt so the finally-block stops the servers.
    def _interrupt(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)

    workdir = tempfile.mkdtemp(prefix="http-bench-")
    targets = []
    try:
        payloads = {c.name: make_payload(c, workdir) for c in cases}
        targets = build_targets(names, args, workdir)
        print(f"http_bench: {os.cpu_count()} CPUs, loopback {HOST}, wrk -t{args.threads}, "
              f"{args.warmup}s warm-up + {args.duration}s per case, wrk timeout {args.timeout}s")
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
            hwm_ok = hwm_ok and reset_hwm(t.proc.pid)
            print(f"  {t.name:<9} pid {t.proc.pid} port {t.port}: {t.desc} "
                  f"(ready in {time.monotonic() - t0:.1f}s)")
        print(f"  peak MiB = VmHWM summed over the server's process tree, "
              f"{'reset before each case' if hwm_ok else 'since server start (clear_refs failed)'}")
        print("  running cases case-major (all targets per case) so drift hits every target alike",
              flush=True)

        rows = {}
        for case in cases:
            for t in targets:
                row = bench_one(args, t, case, payloads[case.name], hwm_ok)
                rows[(t.name, case.key)] = row
                shown = f"{row.rps:.1f} req/s" if row.rps is not None else row.note
                print(f"  .. {case.key:<20} {t.name:<9} {shown}", flush=True)
        print_table(rows, targets, cases)
        crashed = [t for t in targets if t.proc is not None and not t.alive()]
        for t in crashed:
            print(f"\n{t.name} exited with code {t.proc.returncode}; log tail:\n{t.log_tail()}")
    except KeyboardInterrupt as e:
        print(f"\ninterrupted ({e}); stopping servers", file=sys.stderr)
        sys.exit(130)
    finally:
        for t in targets:
            t.stop()
        if args.keep_workdir:
            print(f"\nworkdir kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Triton system shared memory vs binary REST for one 64 MiB FP32 tensor, kserve_sdk only.

    .venv/bin/python hack/bench/shm_bench.py [--duration 5] [--max-requests 1000]

One `ours` server (hack/bench/addone_model.py, kserve_sdk) on a free 127.0.0.1 port. Two cases, both
FP32 [1, 16777216] at concurrency 1, sent by shm_client.py (tritonclient.http, its own process):
  shm-64mib     input and output in system shared-memory regions registered with the server
  binary-64mib  the same tensor as binary REST (binary_data=True, binary output)
The first answer must be input + 1; then requests loop for --duration s (at most --max-requests).
Until the server serves /v2/systemsharedmemory/..., the shm row says n/a and why. See README.md.
"""

import functools
import http.client
import json
import os

import benchlib
from benchlib import HERE, HOST, MODEL, Case, LoadResult

N = 1 << 24                     # FP32 elements: 64 MiB
CASES = [Case("shm-64mib", 1, "shm", N), Case("binary-64mib", 1, "binary", N)]
STATUS = "/v2/systemsharedmemory/status"
ZERO_COPY = "ours-zc"


def make_targets(names, args, workdir):
    """`ours` serving the add-one model over HTTP with --allow_client_shm true (a flag servers without
    shared memory ignore), and `ours-zc` the same with --shm_zero_copy true (regions mapped, as Triton does);
    nothing else can run this bench."""
    if not names or set(names) - {"ours", ZERO_COPY}:
        raise SystemExit(f"shm_bench serves only the targets ours and {ZERO_COPY}")
    targets = benchlib.build_targets(["ours"] * len(names), args, workdir, "http")
    for name, target in zip(names, targets, strict=True):
        target.cmd += ["--allow_client_shm", "true"]
        target.desc += ", --allow_client_shm true"
        if name == ZERO_COPY:
            target.name = ZERO_COPY
            target.cmd += ["--shm_zero_copy", "true"]
            target.desc += " --shm_zero_copy true"
            target.unsupported["binary-64mib"] = "binary REST is the same server as ours"
    return targets


def shm_routes(port):
    """None when the server answers GET /v2/systemsharedmemory/status with 200, else why not."""
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        conn.request("GET", STATUS)
        r = conn.getresponse()
        body = r.read()
    except OSError as e:
        return f"GET {STATUS} failed: {e!r}"
    finally:
        conn.close()
    if r.status == 200:
        return None
    try:
        detail = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        detail = " ".join(body[:120].decode(errors="replace").split())
    return f"no system shared memory on this server (GET {STATUS}: HTTP {r.status}: {detail})"


def run_client(args, target, case, seconds, max_requests):
    """shm_client.py for one run: (result dict | None, error)."""
    cmd = [args.python, os.path.join(HERE, "shm_client.py"), "--mode", case.proto, "--host", HOST,
           "--port", str(target.port), "--model", MODEL, "--n", str(case.n), "--duration", str(seconds),
           "--max-requests", str(max_requests), "--timeout", str(args.timeout)]
    out = benchlib.run_bounded(cmd, timeout=seconds + 2 * args.timeout + 30)
    if out is None:
        return None, "shm_client.py did not finish in time"
    rc, stdout, stderr = out
    line = next((ln for ln in stdout.splitlines() if ln.startswith("SHM_RESULT ")), None)
    if line is None:
        return None, f"shm_client.py failed (rc={rc}): {(stderr or stdout).strip()[-500:]}"
    res = json.loads(line.split(" ", 1)[1])
    return (None, res["error"]) if res["error"] else (res, None)


def check(args, target, case, payload):
    """n/a without the shared-memory routes (shm case); else one request that must answer input + 1."""
    if case.proto == "shm":
        reason = shm_routes(target.port)
        if reason:
            raise benchlib.NotApplicable(reason)
    _res, err = run_client(args, target, case, 0, 1)
    return err


def load(args, target, case, payload, seconds):
    """The client looping for seconds (at most --max-requests) as a LoadResult."""
    res, err = run_client(args, target, case, seconds, args.max_requests)
    if res is None:
        return None, err
    return LoadResult(seconds=res["seconds"], total=res["ok"], ok=res["ok"],
                      p50_ms=res["p50_ms"], p99_ms=res["p99_ms"]), None


def shm_ratio(rows, target="ours"):
    """req/s of shm-64mib (on ``target``) / binary-64mib (on ours), or None."""
    shm, binary = rows.get((target, CASES[0].key)), rows.get(("ours", CASES[1].key))
    return shm.rps / binary.rps if shm and binary and shm.rps and binary.rps else None


def parser():
    """The command line of this bench (benchlib's flags plus the client's bounds)."""
    ap = benchlib.arg_parser("Triton system shared memory vs binary REST, 64 MiB FP32, kserve_sdk.", CASES)
    ap.set_defaults(targets=f"ours,{ZERO_COPY}", duration=5)
    ap.add_argument("--max-requests", type=int, default=1000, help="bound per timed run (default 1000)")
    ap.add_argument("--timeout", type=float, default=60, help="per-request network timeout in s (default 60)")
    return ap


def spec(args):
    """This bench as a benchlib.Bench; its data gets 'shm_over_binary' once the report ran."""
    def report(rows, targets, cases):
        ratio, zero_copy = shm_ratio(rows), shm_ratio(rows, ZERO_COPY)
        bench.data["shm_over_binary"], bench.data["shm_zero_copy_over_binary"] = ratio, zero_copy
        print("\nshm / binary REST req/s: " + ("n/a" if ratio is None else f"{ratio:.2f}x")
              + "; with --shm_zero_copy: " + ("n/a" if zero_copy is None else f"{zero_copy:.2f}x"))

    bench = benchlib.Bench(tag="shm_bench", cases=CASES, proto="http", make_payload=lambda case, workdir: None,
                           check=functools.partial(check, args), load=load, err_cols=[],
                           banner="shm_client.py (tritonclient.http, 1 request at a time, own process)",
                           make_targets=make_targets, base="ours", report=report)
    return bench


def main():
    args = parser().parse_args()
    benchlib.main(args, spec(args))


if __name__ == "__main__":
    main()

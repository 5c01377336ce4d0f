"""The scikit-learn runtime beside KServe's sklearnserver and MLServer's mlserver-sklearn, on loopback.

    .venv/bin/python hack/bench/runtime_bench.py --kserve-src /path/to/kserve/checkout \
        [--targets ours,kserve,mlserver] [--cases v1-small@c1,...] [--duration 5] [--rounds 3]

One model file, saved by samples/runtimes/train.py (an iris LogisticRegression, joblib), is served by:
  ours      python -m kserve_sdk.runtimes.sklearn (this repo)
  kserve    python -m sklearnserver from KServe's source tree (--kserve-src or $KSERVE_SRC: a checkout holding
            python/sklearnserver, put on PYTHONPATH as it is, never copied or built), run by the kserve==0.21.0
            venv, which also needs kserve-storage, scikit-learn and joblib (setup_peers.sh installs them);
            without a tree the target is skipped with a note
  mlserver  mlserver start <a folder of settings>, implementation mlserver_sklearn.SKLearnModel
            (mlserver==1.7.1 + mlserver-sklearn==1.7.1 venv)
All three get the same requests: 4 iris rows as v1 `instances` or one v2 JSON FP64 [4, 4] tensor, under wrk
at 1 and 32 connections, gRPC off; every answer is checked against the model's own predictions first.
After benchlib's table (req/s, p50/p99, server CPU per request, peak memory) it prints ours ÷ each peer
per cell (paired by round, benchlib.paired_ratio) beside the 1.5x goal. See README.md.
"""

import json
import os
import subprocess
import sys
from dataclasses import dataclass

import benchlib
import http_bench
import numpy as np
import orjson
from benchlib import HOST, REPO, Case, Target

MODEL = "iris"
GOAL = 1.5
ROWS = [0, 50, 100, 149]  # one or two flowers of each class
CASES = [
    Case("v1-small", 1, "v1", len(ROWS)),
    Case("v1-small", 32, "v1", len(ROWS)),
    Case("v2-json-small", 1, "v2json", len(ROWS)),
    Case("v2-json-small", 32, "v2json", len(ROWS)),
]
UNSUPPORTED = {"mlserver": {"v1-small": "MLServer serves only the V2/Open Inference Protocol (no /v1 routes)"}}


@dataclass
class Payload(http_bench.Payload):
    """http_bench's request body (what its run_wrk reads; x: the rows) and the predictions it must get."""
    expected: list = None


def model_dir(workdir: str) -> str:
    """The folder holding the one model file, trained on first use (every target serves this file)."""
    folder = os.path.join(workdir, "model")
    if not os.path.isdir(folder):
        sys.path.insert(0, REPO)
        from samples.runtimes.train import save_sklearn

        os.makedirs(folder)
        save_sklearn(folder)
    return folder


def make_payload(case: Case, workdir: str) -> Payload:
    import joblib
    from sklearn.datasets import load_iris

    rows = load_iris(return_X_y=True)[0][ROWS]
    expected = joblib.load(os.path.join(model_dir(workdir), "model.joblib")).predict(rows).tolist()
    if case.proto == "v1":
        path, doc = f"/v1/models/{MODEL}:predict", {"instances": rows.tolist()}
    else:
        path = f"/v2/models/{MODEL}/infer"
        doc = {"inputs": [{"name": "input-0", "shape": list(rows.shape), "datatype": "FP64",
                           "data": rows.reshape(-1).tolist()}]}
    body = orjson.dumps(doc)
    body_file = os.path.join(workdir, f"body-{case.name}.json")
    with open(body_file, "wb") as f:
        f.write(body)
    return Payload(path, body_file, body, "application/json", "", rows, expected)


def check(target: Target, case: Case, payload: Payload):
    """One real request; None when it answers the model's own predictions."""
    try:
        status, _, data = http_bench.one_request(target.port, payload)
    except OSError as e:
        return f"request failed: {e!r}"
    if status != 200:
        return f"HTTP {status}: {data[:300]!r}"
    try:
        doc = json.loads(data)
        got = doc["predictions"] if case.proto == "v1" else doc["outputs"][0]["data"]
    except (ValueError, KeyError, IndexError) as e:
        return f"undecodable answer ({e!r}): {data[:300]!r}"
    return None if np.array_equal(got, payload.expected) else f"predictions {got} != {payload.expected}"


# --------------------------------------------------------------------------- targets

def kserve_target(t: Target, args, folder: str) -> None:
    python = os.path.join(args.venvs, "kserve", "bin", "python")
    tree = os.path.join(args.kserve_src or "", "python", "sklearnserver")
    t.cmd = [python, "-m", "sklearnserver", "--model_dir", folder, "--model_name", MODEL,
             "--http_port", str(t.http_port), "--grpc_port", str(t.grpc_port), "--enable_grpc", "false"]
    t.env = {"PYTHONPATH": tree}
    t.ready = benchlib.http_ready("/v2/health/ready", f"/v1/models/{MODEL}", port=t.http_port)
    version = benchlib.venv_version(python, "kserve") if os.path.exists(python) else None
    t.desc = f"KServe sklearnserver from {tree} on kserve {version} (uvicorn, workers=1), gRPC off"
    if not args.kserve_src:
        t.unavailable = "no KServe source tree: pass --kserve-src (or set KSERVE_SRC) to a KServe checkout"
    elif version is None:
        t.unavailable = f"no kserve in {args.venvs}/kserve: run hack/bench/setup_peers.sh"
    else:
        probe = subprocess.run([python, "-c", "import sklearnserver"], env={**os.environ, **t.env},
                               capture_output=True, text=True)
        if probe.returncode != 0:
            t.unavailable = "sklearnserver does not import (setup_peers.sh installs its libraries): " + \
                (probe.stderr.strip().splitlines() or ["?"])[-1]


def mlserver_target(t: Target, args, workdir: str, folder: str, metrics_port: int) -> None:
    settings_dir = os.path.join(workdir, "mlserver")
    os.makedirs(settings_dir, exist_ok=True)
    with open(os.path.join(settings_dir, "settings.json"), "w") as f:
        json.dump({"host": HOST, "http_port": t.http_port, "grpc_port": t.grpc_port,
                   "metrics_port": metrics_port, "parallel_workers": 0}, f)
    with open(os.path.join(settings_dir, "model-settings.json"), "w") as f:
        json.dump({"name": MODEL, "implementation": "mlserver_sklearn.SKLearnModel",
                   "parameters": {"uri": os.path.join(folder, "model.joblib")}}, f)
    exe = os.path.join(args.venvs, "mlserver", "bin", "mlserver")
    t.cmd, t.cwd = [exe, "start", settings_dir], settings_dir  # MLServer writes .metrics/.envs under its cwd
    t.ready = benchlib.http_ready(f"/v2/models/{MODEL}/ready", port=t.http_port)
    python = os.path.join(args.venvs, "mlserver", "bin", "python")
    version = benchlib.venv_version(python, "mlserver-sklearn") if os.path.exists(python) else None
    t.desc = f"mlserver-sklearn {version}, parallel_workers=0"
    if version is None:
        t.unavailable = f"no mlserver-sklearn in {args.venvs}/mlserver: run hack/bench/setup_peers.sh"


def make_targets(names, args, workdir):
    folder = model_dir(workdir)
    targets = []
    for name in names:
        http_port, grpc_port, metrics_port = benchlib.free_ports(3)
        t = Target(name, port=http_port, http_port=http_port, grpc_port=grpc_port,
                   unsupported=dict(UNSUPPORTED.get(name, {})))
        if name == "ours":
            t.cmd = [args.python, "-m", "kserve_sdk.runtimes.sklearn", "--model_dir", folder, "--model_name", MODEL,
                     "--http_port", str(http_port), "--grpc_port", str(grpc_port), "--enable_grpc", "false"]
            t.env = {"PYTHONPATH": REPO}
            t.ready = benchlib.http_ready("/v2/health/ready", port=http_port)
            t.desc = "python -m kserve_sdk.runtimes.sklearn (this repo), gRPC off"
        elif name == "kserve":
            kserve_target(t, args, folder)
        elif name == "mlserver":
            mlserver_target(t, args, workdir, folder, metrics_port)
        else:
            raise SystemExit(f"unknown target {name!r}; known: ours, kserve, mlserver")
        targets.append(t)
    return targets


# --------------------------------------------------------------------------- report

def report(rows, targets, cases):
    """ours ÷ each peer, per cell, beside the goal."""
    peers = [t.name for t in targets if t.name != "ours"]
    print(f"ours ÷ peer req/s (goal ≥ {GOAL}x):")
    for case in cases:
        ours = rows.get(("ours", case.key))
        cells = []
        for peer in peers:
            other = rows.get((peer, case.key))
            if ours is None or ours.rps is None or other is None or other.rps is None:
                cells.append(f"{peer} n/a")
                continue
            ratio = benchlib.paired_ratio(ours, other)
            cells.append(f"{peer} {ratio:.2f}x {'PASS' if ratio >= GOAL else 'FAIL'}")
        print(f"  {case.key:<20} " + "   ".join(cells))


# --------------------------------------------------------------------------- main

def parser():
    ap = benchlib.arg_parser("The scikit-learn runtime beside KServe's sklearnserver and MLServer's "
                             "mlserver-sklearn.", CASES)
    ap.set_defaults(targets="ours,kserve,mlserver")
    ap.add_argument("--kserve-src", default=os.environ.get("KSERVE_SRC"),
                    help="a KServe source checkout holding python/sklearnserver (default $KSERVE_SRC)")
    ap.add_argument("--threads", type=int, default=1, help="wrk threads (default 1: leave CPU to the server)")
    ap.add_argument("--timeout", type=int, default=10, help="wrk per-request timeout in s (default 10)")
    return ap


def main():
    args = parser().parse_args()
    http_bench.require_wrk()
    bench = benchlib.Bench(tag="runtime_bench", cases=CASES, proto="http", make_payload=make_payload,
                           check=check, load=http_bench.run_wrk, make_targets=make_targets, base="ours",
                           err_cols=[("non2xx", "non2xx"), ("sockerr", "sockerr")],
                           banner=f"sklearn iris model, {len(ROWS)} rows per request, wrk -t{args.threads}",
                           report=report)
    benchlib.main(args, bench)


if __name__ == "__main__":
    main()

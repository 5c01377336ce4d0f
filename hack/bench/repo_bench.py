"""Issue 34's model repository benchmark: 10,000 small scikit-learn models served lazily within 200 loaded.

    .venv/bin/python hack/bench/repo_bench.py [--seconds 60] [--concurrency 4] [--parts lazy,budget,peers,compat]
    .venv/bin/python hack/bench/repo_bench.py --quick                # 10 s of Zipf, 1 hot round, 200 peer models
    .venv/bin/python hack/bench/repo_bench.py --skip-mlserver        # ours alone (peers and compat without MLServer)

Every `ours` server is `python -m kserve_sdk --model_repository DIR --model_control_mode MODE` on this repo's
kserve_sdk (PYTHONPATH, or BENCH_SDK_TREE), REST only, on a free 127.0.0.1 port, stopped by process group at the
end. The repositories are repo_models.py's (MLServer's layout: model-settings.json with implementation
mlserver_sklearn.SKLearnModel and parameters.uri ./model.joblib; a LogisticRegression on 4 features per model,
weights and classes of its own), generated once into REPO_BENCH_CACHE. The load is repo_client.py, its own process
(raw HTTP/1.1 keep-alive, closed loop, --concurrency requests in flight, every answer checked to be its model's).

  lazy    10,000 models, --model_control_mode lazy --max_loaded_models 200:
          ready-to-serve: process start -> GET /v2/health/ready 200 (probed every 10 ms);
          base RSS: the server's RSS once ready and quiet, before any request (repository scanned, nothing loaded);
          Zipf (s = --zipf-s) over every model for --seconds: cold-load latency (the first request to a model,
          which the server had not loaded) p50 / p99, the other requests' latency, requests/s;
          end RSS: once quiet after the Zipf run; READY models in POST /v2/repository/index (at most 200);
          hit path: --hot-rounds rounds, each --hot-seconds of Zipf over --hot-models models all loaded (each asked
          once before; none is evicted as they are fewer than 200), then as long against a one-model server
          (python -m kserve_sdk.runtimes.sklearn serving m00000's file): same client, same concurrency.
  budget  what 200 loaded models cost, for the end RSS's reference: RSS of ours on a 200-model repository in lazy
          mode (nothing loaded) and in none mode (all 200 loaded at start); likewise on a 1-model repository, which
          splits the cost into the first model's (scikit-learn's import) and each further model's. The reference
          is base RSS + (none-200 RSS - lazy-200 RSS).
  peers   --peer-models (1,000) of the same models: MLServer 1.7.1 (the `mlserver` venv of setup_peers.sh,
          `mlserver start`, parallel_workers 0: one process, as ours) loads them all at start: process start ->
          /v2/health/ready and the last model's ready both 200, and its RSS once quiet; then ours in none mode on
          the same folder, the same way.
  compat  MLServer's docs' three scikit-learn models (repo_models.DOCS_MODELS: their model-settings.json files as
          the docs write them, unchanged, under models/ as the docs' multi-model example) served by MLServer
          (`mlserver start FOLDER`, its server settings in MLSERVER_* variables) and by ours from the same folder;
          the same v2 requests (the docs' body: input "predict", FP32, nested rows; with and without the version in
          the path) to each; the outputs compared (their values; and whole: name, datatype, shape), and with
          scikit-learn's own predictions.

RSS is VmRSS summed over the server's process tree (/proc), read after benchlib.wait_idle and --settle seconds.
Goals (issue 34): ready-to-serve under 2 s; hit-path p50 within 1.1x the one-model server's; end RSS within 10% of
base + 200 models (at most 1.10x); no failed or wrong answer; equal answers from MLServer and ours. See README.md.
"""

import argparse
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import bench_report
import benchlib
import numpy as np
import repo_models
from benchlib import HERE, HOST, REPO, Target

PARTS = ("lazy", "budget", "peers", "compat")
READY_S = 2.0
HIT_RATIO = 1.1
RSS_RATIO = 1.10
MAX_LOADED = 200
COMPAT_READY_S = 180
QUICK = {"seconds": 10, "hot_seconds": 3, "hot_rounds": 1, "peer_models": 200}


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma list from {','.join(PARTS)}")
    ap.add_argument("--models", type=int, default=10000, help="models in the lazy repository (default 10000)")
    ap.add_argument("--max-loaded", type=int, default=MAX_LOADED, help="--max_loaded_models (default 200)")
    ap.add_argument("--seconds", type=float, default=60, help="seconds of Zipf requests (default 60)")
    ap.add_argument("--zipf-s", type=float, default=1.1, help="Zipf exponent (default 1.1)")
    ap.add_argument("--concurrency", type=int, default=4, help="requests in flight (default 4)")
    ap.add_argument("--hot-models", type=int, default=100, help="loaded models of the hit-path rounds (default 100)")
    ap.add_argument("--hot-seconds", type=float, default=10, help="seconds per server per hit-path round")
    ap.add_argument("--hot-rounds", type=int, default=3, help="hit-path rounds, ours then one-model (default 3)")
    ap.add_argument("--peer-models", type=int, default=1000, help="models MLServer and ours-none load (default 1000)")
    ap.add_argument("--seed", type=int, default=1, help="weights and draws (default 1)")
    ap.add_argument("--settle", type=float, default=1.0, help="quiet seconds before each RSS reading")
    ap.add_argument("--quick", action="store_true", help="shorter: " + str(QUICK))
    ap.add_argument("--ready-timeout", type=float, default=900, help="bound on each server's start in s")
    ap.add_argument("--venvs", default=os.environ.get("BENCH_VENVS", "/tmp/bench-venvs"))
    ap.add_argument("--skip-mlserver", action="store_true", help="leave MLServer out (peers and compat: ours only)")
    ap.add_argument("--python", default=sys.executable, help="interpreter for ours and the client")
    ap.add_argument("--keep-workdir", action="store_true", help="keep the server logs")
    ap.add_argument("--json", default="", help="also write every figure to this file")
    return ap


def parse(argv=None):
    args = parser().parse_args(argv)
    if args.quick:
        for k, v in QUICK.items():
            setattr(args, k, v)
    return args


# --------------------------------------------------------------------------- servers

def get(port, path, method="GET", body=None, timeout=10):
    """(status, body) of one request on a new connection; (None, why) when it could not be made."""
    try:
        conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        resp = conn.getresponse()
        out = resp.status, resp.read()
        conn.close()
        return out
    except OSError as e:
        return None, repr(e).encode()


def all_ready(*paths):
    """Ready when every path answers 200."""
    return lambda target: all(get(target.port, p, timeout=2)[0] == 200 for p in paths)


def ours(args, repository, mode, *extra):
    """`python -m kserve_sdk --model_repository` on a free port (not started)."""
    port = benchlib.free_ports(1)[0]
    cmd = [args.python, "-m", "kserve_sdk", "--model_repository", repository, "--model_control_mode", mode,
           "--http_port", str(port), "--enable_grpc", "false", *extra]
    return Target(f"ours-{mode}", cmd=cmd, env={"PYTHONPATH": REPO}, port=port, http_port=port,
                  ready=all_ready("/v2/health/ready"),
                  desc=f"python -m kserve_sdk --model_repository ({REPO}) --model_control_mode {mode} "
                       + " ".join(extra))


def one_model(args, folder, name):
    """The one-model server: the scikit-learn runtime serving one model file, no repository."""
    port = benchlib.free_ports(1)[0]
    cmd = [args.python, "-m", "kserve_sdk.runtimes.sklearn", "--model_dir", folder, "--model_name", name,
           "--http_port", str(port), "--enable_grpc", "false"]
    return Target("one-model", cmd=cmd, env={"PYTHONPATH": REPO}, port=port, http_port=port,
                  ready=all_ready("/v2/health/ready"), desc="python -m kserve_sdk.runtimes.sklearn, one model")


def mlserver(args, repository, workdir, last_model):
    """`mlserver start REPOSITORY` (it serves the folder it starts in), its settings in MLSERVER_* variables so
    that nothing is written into the repository."""
    http_port, grpc_port, metrics_port = benchlib.free_ports(3)
    env = {"MLSERVER_HOST": HOST, "MLSERVER_HTTP_PORT": str(http_port), "MLSERVER_GRPC_PORT": str(grpc_port),
           "MLSERVER_METRICS_PORT": str(metrics_port), "MLSERVER_PARALLEL_WORKERS": "0"}
    exe = os.path.join(args.venvs, "mlserver", "bin", "mlserver")
    # MLServer writes .metrics and .envs under its working directory: a folder of the workdir.
    cwd = tempfile.mkdtemp(prefix="mlserver-", dir=workdir)
    t = Target("mlserver", cmd=[exe, "start", repository], env=env, cwd=cwd, port=http_port, http_port=http_port,
               ready=all_ready("/v2/health/ready", f"/v2/models/{last_model}/ready"))
    python = os.path.join(args.venvs, "mlserver", "bin", "python")
    version = benchlib.venv_version(python, "mlserver") if os.path.exists(python) else None
    t.desc = f"mlserver {version} + mlserver-sklearn, parallel_workers 0"
    if version is None:
        t.unavailable = f"no mlserver in {args.venvs}/mlserver: run hack/bench/setup_peers.sh"
    if args.skip_mlserver:
        t.unavailable = "left out (--skip-mlserver, or mlserver not in run_all's --targets)"
    return t


def start(target, workdir, timeout):
    """Start target and time it to ready (probed every 10 ms); the seconds, or raise RuntimeError with why not."""
    if target.unavailable:
        raise RuntimeError("n/a: " + target.unavailable)
    t0 = time.monotonic()
    target.start(workdir)
    err = target.wait_ready(timeout, interval=0.01)
    if err:
        raise RuntimeError(f"{target.name}: {err}; log: {target.log_tail(8)}")
    return time.monotonic() - t0


def settled_rss(target, settle):
    benchlib.wait_idle(target.proc.pid, timeout=60)
    time.sleep(settle)
    return benchlib.rss_mib(target.proc.pid)


def ready_models(port):
    """Names of the READY models in the repository index (Triton's POST /v2/repository/index), or None."""
    status, body = get(port, "/v2/repository/index", "POST", b'{"ready": true}', timeout=30)
    if status != 200:
        return None
    return {row["name"] for row in json.loads(body) if row.get("state", "READY") == "READY"}


def server_state(target):
    """What the server says of itself (its /metrics: loads by outcome, evictions, loaded models, the memory it counts
    for them, the samples it exposes) and the RSS of its mapped Prometheus multiprocess files (.db, /proc smaps)."""
    status, body = get(target.port, "/metrics", timeout=30)
    out = {"db_rss_mib": mapped_rss_mib(target.proc.pid, ".db")}
    if status != 200:
        return out
    samples = [line for line in body.decode(errors="replace").splitlines() if line and not line.startswith("#")]
    out["metric_samples"] = len(samples)
    for line in samples:
        name, _, value = line.rpartition(" ")
        if name.startswith("kserve_repository_loads_total"):
            out.setdefault("loads", {})[name.split('"')[1]] = float(value)
        elif name == "kserve_repository_evictions_total":
            out["evictions"] = float(value)
        elif name == "kserve_repository_loaded_models":
            out["loaded"] = float(value)
        elif name.startswith("kserve_repository_model_memory_bytes"):
            out["model_memory_mib"] = out.get("model_memory_mib", 0.0) + float(value) / 2 ** 20
    return out


def mapped_rss_mib(pid, suffix):
    """RSS of the process's file mappings whose path ends with suffix, in MiB (/proc/<pid>/smaps)."""
    total_kb, counting = 0, False
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split()
                if head and "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
                    counting = len(head) >= 6 and head[-1].endswith(suffix)
                elif counting and head and head[0] == "Rss:":
                    total_kb += int(head[1])
    except OSError:
        return None
    return total_kb / 1024


def client(args, port, mode, models, seconds):
    """repo_client.py's result (a dict), or {"error": ...}."""
    cmd = [args.python, os.path.join(HERE, "repo_client.py"), "--port", str(port), "--mode", mode, "--models",
           str(models), "--seconds", str(seconds), "--concurrency", str(args.concurrency), "--zipf-s",
           str(args.zipf_s), "--seed", str(args.seed)]
    done = benchlib.run_bounded(cmd, timeout=seconds + 600)
    if done is None:
        return {"error": "repo_client.py did not finish in time"}
    rc, stdout, stderr = done
    for line in stdout.splitlines():
        if line.startswith("REPO_RESULT "):
            return json.loads(line.split(" ", 1)[1])
    return {"error": f"repo_client.py rc={rc}: {(stderr or stdout).strip()[-300:]}"}


class Servers:
    """The servers of one part, stopped together at its end (also on errors)."""

    def __init__(self, workdir):
        self.workdir, self.started = workdir, []

    def start(self, target, timeout):
        self.started.append(target)
        return start(target, self.workdir, timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for t in self.started:
            t.stop()


# --------------------------------------------------------------------------- parts

def part_lazy(args, workdir):
    """10,000 models in lazy mode: ready time, base RSS, the Zipf run, end RSS, then the hit-path rounds. A server
    that fails ends the part with what was measured before and the error."""
    repository = repo_models.generated(args.models, args.seed)
    out = {"repository": repository, "models": args.models, "max_loaded": args.max_loaded}
    with Servers(workdir) as servers:
        try:
            lazy = ours(args, repository, "lazy", "--max_loaded_models", str(args.max_loaded))
            out["desc"] = lazy.desc
            out["ready_s"] = servers.start(lazy, args.ready_timeout)
            out["base_rss_mib"] = settled_rss(lazy, args.settle)
            out["base_state"] = server_state(lazy)
            print(f"  .. repo lazy: ready in {out['ready_s']:.2f} s, base RSS {out['base_rss_mib']:.1f} MiB",
                  flush=True)
            out["zipf"] = client(args, lazy.port, "zipf", args.models, args.seconds)
            print(f"  .. repo lazy: Zipf {brief(out['zipf'])}", flush=True)
            out["end_rss_mib"] = settled_rss(lazy, args.settle)
            out["end_state"] = server_state(lazy)
            loaded = ready_models(lazy.port)
            out["loaded_at_end"] = None if loaded is None else len(loaded)
            print(f"  .. repo lazy: end RSS {out['end_rss_mib']:.1f} MiB, {out['loaded_at_end']} models READY",
                  flush=True)
            first = repo_models.model_name(0)
            single = one_model(args, os.path.join(repository, first), first)
            servers.start(single, args.ready_timeout)
            out["hit"] = hit_rounds(args, lazy, single)
            out["rss_after_hit_mib"] = benchlib.rss_mib(lazy.proc.pid)
        except RuntimeError as e:
            out["error"] = str(e)
            print(f"  .. repo lazy FAILED: {e}", flush=True)
    return out


def hit_rounds(args, lazy, single):
    """Rounds of Zipf over loaded models on ours, then as long on the one-model server."""
    rounds = []
    for r in range(args.hot_rounds):
        before = ready_models(lazy.port)
        ours_run = client(args, lazy.port, "hot", args.hot_models, args.hot_seconds)
        hot = {repo_models.model_name(i) for i in range(args.hot_models)}
        after = ready_models(lazy.port)
        benchlib.wait_idle(lazy.proc.pid)
        one_run = client(args, single.port, "hot", 1, args.hot_seconds)
        benchlib.wait_idle(single.proc.pid)
        rounds.append({"ours": ours_run, "one_model": one_run,
                       "hot_all_ready_after": None if after is None else hot <= after,
                       "ready_before": None if before is None else len(before)})
        print(f"  .. repo hit round {r + 1}/{args.hot_rounds}: ours {brief(ours_run)}; one-model {brief(one_run)}",
              flush=True)
    ratios = [p50(x["ours"]) / p50(x["one_model"]) for x in rounds if p50(x["ours"]) and p50(x["one_model"])]
    p99s = [p99(x["ours"]) / p99(x["one_model"]) for x in rounds if p99(x["ours"]) and p99(x["one_model"])]
    return {"rounds": rounds, "p50_ratio": statistics.median(ratios) if ratios else None,
            "p99_ratio": statistics.median(p99s) if p99s else None}


def part_budget(args, workdir):
    """RSS with nothing and with everything loaded, on 200-model and 1-model repositories."""
    out = {}
    with Servers(workdir) as servers:
        for count in (1, args.max_loaded):
            repository = repo_models.generated(count, args.seed)
            for mode in ("lazy", "none"):
                target = ours(args, repository, mode)
                try:
                    ready_s = servers.start(target, args.ready_timeout)
                    out[f"{mode}_{count}"] = {"ready_s": ready_s, "rss_mib": settled_rss(target, args.settle)}
                except RuntimeError as e:
                    out[f"{mode}_{count}"] = {"error": str(e)}
                finally:
                    target.stop()
                print(f"  .. repo budget: {count} models, {mode}: {shown(out[f'{mode}_{count}'])}", flush=True)
    return out


def part_peers(args, workdir):
    """MLServer and ours (none mode) loading the same --peer-models models at start."""
    repository = repo_models.generated(args.peer_models, args.seed)
    last = repo_models.model_name(args.peer_models - 1)
    out = {"models": args.peer_models}
    for name, make in (("mlserver", lambda: mlserver(args, repository, workdir, last)),
                       ("ours", lambda: ours(args, repository, "none"))):
        target = make()
        target.ready = all_ready("/v2/health/ready", f"/v2/models/{last}/ready")
        with Servers(workdir) as servers:
            try:
                ready_s = servers.start(target, args.ready_timeout)
                status, body = get(target.port, f"/v2/models/{last}/infer", "POST", repo_client_body())
                out[name] = {"desc": target.desc, "ready_s": ready_s, "rss_mib": settled_rss(target, args.settle),
                             "answer_ok": status == 200 and answer_of(body) is not None
                             and repo_models.model_of(answer_of(body)) == args.peer_models - 1}
            except RuntimeError as e:
                out[name] = {"desc": target.desc, "error": str(e)}
        print(f"  .. repo peers: {name} with {args.peer_models} models: {shown(out[name])}", flush=True)
    return out


def repo_client_body():
    return json.dumps({"inputs": [{"name": "predict", "shape": [1, repo_models.FEATURES], "datatype": "FP64",
                                   "data": repo_models.ROW}]}).encode()


def answer_of(body):
    try:
        return json.loads(body)["outputs"][0]["data"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def part_compat(args, workdir):
    """MLServer's docs' repository served by MLServer and by ours; the same requests to both, answers compared."""
    root = os.path.join(workdir, "docs-repository")
    os.makedirs(os.path.join(root, "models"))
    models = repo_models.docs_repository(os.path.join(root, "models"))
    requests = repo_models.docs_requests(models)
    answers = {}
    last = list(models)[-1]
    for name in ("mlserver", "ours"):
        if name == "mlserver":
            target = mlserver(args, root, workdir, last)
        else:
            target = ours(args, root, "none")
            target.ready = all_ready("/v2/health/ready", f"/v2/models/{last}/ready")
        with Servers(workdir) as servers:
            try:
                servers.start(target, min(args.ready_timeout, COMPAT_READY_S))
                answers[name] = [get(target.port, path, "POST", json.dumps(body).encode())
                                 for _, path, body in requests]
            except RuntimeError as e:
                answers[name] = str(e)
    expected = [models[path.split("/")[3]][0].predict(np.asarray(body["inputs"][0]["data"], dtype=np.float32))
                for _, path, body in requests]
    return compare(requests, answers, expected)


def output_of(status, body):
    """The first output's data (flat), shape, datatype and name, or a str saying what came instead."""
    if status != 200:
        return f"HTTP {status}: {body[:200].decode(errors='replace')}"
    try:
        out = json.loads(body)["outputs"][0]
        return {"data": np.asarray(out["data"]).reshape(-1).tolist(), "shape": list(out["shape"]),
                "datatype": out["datatype"], "name": out["name"]}
    except (ValueError, KeyError, IndexError, TypeError) as e:
        return f"undecodable answer ({e!r}): {body[:200].decode(errors='replace')}"


def compare(requests, answers, expected):
    """Per request: each server's output; whether their values (data and element count) are equal, whether the
    whole outputs (also name, shape, datatype) are, and whether ours equals scikit-learn's own predictions."""
    rows = []
    for i, (label, _, _) in enumerate(requests):
        row = {"request": label, "sklearn": np.asarray(expected[i]).reshape(-1).tolist()}
        for name, a in answers.items():
            row[name] = a if isinstance(a, str) else output_of(*a[i])
        m, o = row.get("mlserver"), row.get("ours")
        both = isinstance(m, dict) and isinstance(o, dict)
        row["values_equal"] = both and m["data"] == o["data"]
        row["outputs_equal"] = both and m == o
        row["ours_equals_sklearn"] = isinstance(o, dict) and o["data"] == row["sklearn"]
        rows.append(row)
    return {"rows": rows, "models": list(repo_models.DOCS_MODELS),
            "settings": {n: s for n, (_, s, *_) in repo_models.DOCS_MODELS.items()}}


# --------------------------------------------------------------------------- figures

def p50(run):
    return run.get("all", {}).get("p50_ms") if isinstance(run, dict) else None


def p99(run):
    return run.get("all", {}).get("p99_ms") if isinstance(run, dict) else None


def brief(run):
    if "error" in run:
        return run["error"]
    classes = run.get("classes", {})
    parts = [f"{run['rps']:.0f} req/s"] + [f"{k} {c['count']} p50 {c['p50_ms']:.2f} / p99 {c['p99_ms']:.2f} ms"
                                            for k, c in classes.items()]
    errors = sum(run.get("errors", {}).values())
    return ", ".join(parts) + (f", {errors} errors {run['errors']}" if errors else "")


def shown(row):
    if "error" in row:
        return row["error"]
    return f"ready in {row['ready_s']:.2f} s, RSS {row['rss_mib']:.1f} MiB"


def reference_rss(result):
    """base RSS + what 200 loaded models cost (none-200 RSS - lazy-200 RSS), or None."""
    lazy, budget = result.get("lazy") or {}, result.get("budget") or {}
    n = (lazy.get("max_loaded") or MAX_LOADED)
    full, empty = budget.get(f"none_{n}", {}).get("rss_mib"), budget.get(f"lazy_{n}", {}).get("rss_mib")
    base = lazy.get("base_rss_mib")
    if full is None or empty is None or base is None:
        return None
    return base + full - empty


def rss_ratio(result):
    ref, end = reference_rss(result), (result.get("lazy") or {}).get("end_rss_mib")
    return end / ref if ref and end else None


def run(args):
    """The parts asked for; the results as data (run_all.py's repo group)."""
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise SystemExit(f"unknown part {', '.join(unknown)}; parts: {', '.join(PARTS)}")
    workdir = tempfile.mkdtemp(prefix="repo_bench-")
    result = {"settings": {k: getattr(args, k) for k in ("models", "max_loaded", "seconds", "zipf_s", "concurrency",
                                                         "hot_models", "hot_seconds", "hot_rounds", "peer_models",
                                                         "seed")}, "tree": REPO}
    runners = {"lazy": part_lazy, "budget": part_budget, "peers": part_peers, "compat": part_compat}
    try:
        for part in parts:
            try:
                result[part] = runners[part](args, workdir)
            except (RuntimeError, OSError) as e:
                print(f"  .. repo {part} FAILED: {e}", flush=True)
                result[part] = {"error": str(e)}
    finally:
        if args.keep_workdir:
            print(f"workdir kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return result


# --------------------------------------------------------------------------- report

def num(v, spec=".2f"):
    return bench_report.num(v, spec)


def lat(c):
    """'count: p50 / p99 ms' of one latency class."""
    return f"{c['count']}: {num(c['p50_ms'])} / {num(c['p99_ms'])}" if c else "-"


def lazy_md(result):
    lazy = result.get("lazy")
    if not lazy:
        return ""
    s, zipf = result["settings"], lazy.get("zipf") or {}
    classes, base, end = zipf.get("classes", {}), lazy.get("base_state") or {}, lazy.get("end_state") or {}
    one = (result.get("budget") or {}).get("lazy_1", {}).get("ready_s")
    ref, ratio = reference_rss(result), rss_ratio(result)
    rows = [["ready to serve (process start → /v2/health/ready 200)", f"{num(lazy.get('ready_s'))} s",
             f"< {READY_S:g} s"],
            ["the same on a 1-model repository (budget part): interpreter, imports, server", f"{num(one)} s", ""],
            ["base RSS (repository scanned, nothing loaded)", f"{num(lazy.get('base_rss_mib'), '.1f')} MiB", ""],
            ["Zipf requests/s", num(zipf.get("rps"), ".0f"), ""],
            ["cold loads (first request to a model): count: p50 / p99 ms", lat(classes.get("cold")), ""],
            ["requests joining a load in progress: count: p50 / p99 ms", lat(classes.get("joined")), ""],
            ["other requests (loaded, or loaded again after eviction): count: p50 / p99 ms",
             lat(classes.get("repeat")), ""],
            ["distinct models asked", zipf.get("distinct_models", "-"), ""],
            ["failed or wrong answers", f"{sum((zipf.get('errors') or {}).values())} "
                                        f"{json.dumps(zipf.get('error_samples') or {})[:300]}", "0"],
            ["end RSS (quiet, after the Zipf run)", f"{num(lazy.get('end_rss_mib'), '.1f')} MiB", ""],
            ["READY models in the repository index at the end", lazy.get("loaded_at_end", "-"),
             f"≤ {lazy.get('max_loaded')}"],
            ["base + 200 models (budget part)", f"{num(ref, '.1f')} MiB", ""],
            ["the server's counters at the end: loads by outcome; evictions", f"{end.get('loads', '-')}; "
                                                                             f"{num(end.get('evictions'), '.0f')}", ""],
            ["memory the server counts for its loaded models (kserve_repository_model_memory_bytes, summed)",
             f"{num(end.get('model_memory_mib'), '.1f')} MiB", ""],
            ["Prometheus samples exposed, base → end", f"{base.get('metric_samples', '-')} → "
                                                       f"{end.get('metric_samples', '-')}", ""],
            ["RSS of its Prometheus multiprocess files (.db mappings), base → end",
             f"{num(base.get('db_rss_mib'), '.1f')} → {num(end.get('db_rss_mib'), '.1f')} MiB", ""],
            ["end RSS ÷ (base + 200 models)", num(ratio, ".3f"), f"≤ {RSS_RATIO:.2f}"]]
    text = (f"**lazy**: {lazy.get('models')} models, `{lazy.get('desc', '')}`; Zipf s = {s['zipf_s']} for "
            f"{s['seconds']:g} s at {s['concurrency']} requests in flight.\n\n"
            + bench_report.table(["figure", "value", "goal"], rows))
    if lazy.get("error"):
        text += f"\nERROR: {lazy['error']}\n"
    return text + hit_md(result)


def hit_md(result):
    hit = (result.get("lazy") or {}).get("hit")
    if not hit:
        return ""
    s = result["settings"]
    rows = []
    for i, r in enumerate(hit["rounds"], 1):
        o, one = r["ours"], r["one_model"]
        rows.append([i, f"{num(p50(o))} / {num(p99(o))}", num(o.get("rps"), ".0f"),
                     f"{num(p50(one))} / {num(p99(one))}", num(one.get("rps"), ".0f"),
                     num(p50(o) / p50(one) if p50(o) and p50(one) else None),
                     {True: "yes", False: "**no**", None: "-"}[r.get("hot_all_ready_after")],
                     sum((o.get("errors") or {}).values()) + sum((one.get("errors") or {}).values())])
    return (f"\n**hit path**: Zipf over {s['hot_models']} loaded models of the lazy server ({s['hot_seconds']:g} s), "
            f"then the one-model server (`python -m kserve_sdk.runtimes.sklearn`, m00000's file) as long, same client "
            f"and concurrency; p50 ratio (median over rounds) **{num(hit.get('p50_ratio'))}** (goal ≤ {HIT_RATIO}), "
            f"p99 ratio {num(hit.get('p99_ratio'))}.\n\n"
            + bench_report.table(["round", "ours p50 / p99 ms", "ours req/s", "one-model p50 / p99 ms",
                                  "one-model req/s", "p50 ÷", "hot models all READY after", "errors"], rows))


def budget_md(result):
    budget = result.get("budget")
    if not budget:
        return ""
    rows = [[key.split("_")[1], key.split("_")[0], num(v.get("ready_s")), num(v.get("rss_mib"), ".1f"),
             v.get("error", "")] for key, v in budget.items()]
    n = (result.get("lazy") or {}).get("max_loaded") or MAX_LOADED
    rss = {key: v.get("rss_mib") for key, v in budget.items()}
    first = rss["none_1"] - rss["lazy_1"] if rss.get("none_1") and rss.get("lazy_1") else None
    each = (rss[f"none_{n}"] - rss["none_1"]) * 1024 / (n - 1) if rss.get(f"none_{n}") and rss.get("none_1") else None
    return ("\n**budget**: what loaded models cost (ours, none mode loads all at start; lazy loads none). "
            f"First model (scikit-learn's import with it): {num(first, '.1f')} MiB; each further model: "
            f"{num(each, '.1f')} KiB. The end RSS's reference is base + (none-{n} − lazy-{n}).\n\n"
            + bench_report.table(["models", "mode", "ready s", "RSS MiB", "error"], rows))


def peers_md(result):
    peers = result.get("peers")
    if not peers:
        return ""
    rows = [[name, peers.get("models"), num(peers[name].get("ready_s")), num(peers[name].get("rss_mib"), ".1f"),
             {True: "yes", False: "**no**"}.get(peers[name].get("answer_ok"), "-"),
             peers[name].get("error", peers[name].get("desc", ""))]
            for name in ("mlserver", "ours") if name in peers]
    o, m = peers.get("ours", {}), peers.get("mlserver", {})
    ready = o.get("ready_s") / m["ready_s"] if o.get("ready_s") and m.get("ready_s") else None
    rss = o.get("rss_mib") / m["rss_mib"] if o.get("rss_mib") and m.get("rss_mib") else None
    return (f"\n**peers**: {peers.get('models')} of the same models, all loaded at start (MLServer always does; ours "
            f"with --model_control_mode none). Ours ÷ MLServer: time to ready **{num(ready)}**, RSS **{num(rss)}**.\n\n"
            + bench_report.table(["server", "models", "ready s", "RSS MiB", "last model answers", "what"], rows))


def compat_md(result):
    compat = result.get("compat")
    if not compat:
        return ""
    if "rows" not in compat:
        return f"\n**compat**: {compat.get('error', 'not run')}\n"

    def cell(v):
        if not isinstance(v, dict):
            return str(v)[:120]
        return f"{v['name']} {v['datatype']} {v['shape']}: {v['data']}"

    word = {True: "yes", False: "**no**"}
    rows = [[r["request"], r["sklearn"], cell(r.get("mlserver")), cell(r.get("ours")), word[r["values_equal"]],
             word[r["outputs_equal"]]] for r in compat["rows"]]
    settings = "\n".join(f"- `{json.dumps(s)}`" for s in compat["settings"].values())
    values = sum(r["values_equal"] for r in compat["rows"])
    whole = sum(r["outputs_equal"] for r in compat["rows"])
    return (f"\n**compat**: MLServer's docs' scikit-learn `model-settings.json` files, unchanged:\n\n{settings}\n\n"
            f"Of {len(compat['rows'])} answers, {values} have equal values (the outputs' data) and {whole} equal "
            "outputs (name, datatype, shape and data).\n\n"
            + bench_report.table(["request", "scikit-learn", "MLServer", "ours", "values equal", "outputs equal"],
                                 rows))


def markdown(result):
    """The repo group's section of bench.md ('' when it did not run)."""
    if not result:
        return ""
    if "settings" not in result:
        return f"### repo (repo_bench.py)\n\n{result.get('error') or result.get('skipped') or 'not run'}\n"
    return (f"### repo (repo_bench.py)\n\nkserve_sdk ({result['tree']}) serving a model repository "
            "(repo_models.py's generated scikit-learn models); RSS summed over the server's processes once quiet.\n\n"
            + lazy_md(result) + budget_md(result) + peers_md(result) + compat_md(result))


def checks(result):
    """Issue 34's goals, as bench_report's acceptance checks."""
    if not result or "settings" not in result:
        return []
    lazy, out = result.get("lazy") or {}, []
    if "lazy" in result:
        zipf = lazy.get("zipf") or {}
        out += [bench_report.verdict("ready to serve, 10,000 models lazy (s)", "repo lazy", lazy.get("ready_s"),
                                     "<", READY_S),
                bench_report.verdict("hit-path p50 ÷ one-model p50", "repo lazy",
                                     (lazy.get("hit") or {}).get("p50_ratio"), "<=", HIT_RATIO),
                bench_report.verdict("end RSS ÷ (base + 200 models)", "repo lazy", rss_ratio(result), "<=",
                                     RSS_RATIO),
                bench_report.verdict("failed or wrong answers under Zipf", "repo lazy",
                                     sum(zipf["errors"].values()) if "errors" in zipf else None, "<=", 0)]
    if "compat" in result:
        rows = (result.get("compat") or {}).get("rows")
        served = bool(rows) and any(isinstance(r.get("mlserver"), dict) for r in rows)  # not left out
        out += [bench_report.verdict(f"answers whose {what} differ, MLServer vs ours (docs' repository)",
                                     "repo compat", sum(not r[key] for r in rows) if served else None, "<=", 0)
                for what, key in (("values", "values_equal"), ("outputs (name, shape)", "outputs_equal"))]
        out.append(bench_report.verdict("answers of ours differing from scikit-learn's (docs' repository)",
                                        "repo compat", sum(not r["ours_equals_sklearn"] for r in rows) if rows
                                        else None, "<=", 0))
    return out


def main():
    benchlib.report_alone(parse(), run, markdown, checks)


if __name__ == "__main__":
    main()

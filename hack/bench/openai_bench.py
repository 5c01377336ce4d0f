"""Streamed chunks per second and time to first chunk over OpenAI's routes: kserve_sdk beside its own
generate_stream, KServe 0.21 (kserve[llm]) and LitServe's OpenAISpec.

    .venv/bin/python hack/bench/openai_bench.py [--targets ours,generate,kserve,litserve] \
        [--cases chat@c1,...] [--duration 8] [--rounds 1] [--count 200]

Targets (free 127.0.0.1 ports, one process each, stopped by process group at exit), every one streaming
token_source.tokens(prompt), one token per chunk:
  ours      python -m kserve_sdk openai_model.py: the KServe model file, unchanged, on kserve_sdk
  generate  the same command; the cases go to /v2/models/tok-gen/generate_stream (the same tokens as
            Open Inference Protocol responses): kserve_sdk's own streaming, the reference for ``ours``
  kserve    openai_model.py on KServe 0.21 with vllm, from /tmp/bench-venvs/kserve-llm (setup_peers.sh)
  litserve  litserve_openai.py (LitAPI + OpenAISpec) from /tmp/bench-venvs/litserve; chat only
Cases: chat (POST /openai/v1/chat/completions; LitServe: /v1/chat/completions) and completions
(POST /openai/v1/completions), each at 1 and 8 streams in flight. The load is openai_client.py in its own
process; every stream must bring exactly --count chunks holding the right numbers, and only those count.
The closing lines give ours ÷ each other target, beside the goals: ≥ 0.8× generate, ≥ 2× KServe and
≥ 2× LitServe.
"""

import functools
import os
import shutil
import sys

import benchlib
import stream_bench
from benchlib import HERE, HOST, REPO, Case, Target

MODEL = "tok"
TARGETS = ["ours", "generate", "kserve", "litserve"]
COUNT = 200
CASES = [Case("chat", 1, "chat", COUNT), Case("chat", 8, "chat", COUNT),
         Case("completions", 1, "completions", COUNT), Case("completions", 8, "completions", COUNT)]
GOALS = {"generate": 0.8, "kserve": 2.0, "litserve": 2.0}
MODEL_FILES = ("openai_model.py", "litserve_openai.py", "token_source.py")


def make_targets(names, args, workdir):
    """The targets of ``names`` (see the module's docstring), each on a free port."""
    bad = [n for n in names if n not in TARGETS]
    if bad:
        raise SystemExit(f"openai_bench serves only {', '.join(TARGETS)}, not {', '.join(bad)}")
    # the model files run from a folder of their own: a script's folder comes first on sys.path, and
    # hack/bench's profile.py would stand in for the standard library's (which torch imports)
    models = os.path.join(workdir, "models")
    os.makedirs(models)
    for name in MODEL_FILES:
        shutil.copy(os.path.join(HERE, name), models)
    targets = []
    for name in names:
        port, grpc_port = benchlib.free_ports(2)
        server_flags = ["--http_port", str(port), "--grpc_port", str(grpc_port), "--enable_grpc", "false"]
        t = Target(name, port=port, http_port=port, cwd=models)
        if name in ("ours", "generate"):
            t.cmd = [args.python, "-m", "kserve_sdk", "openai_model.py", *server_flags]
            t.env = {"PYTHONPATH": REPO}
            t.ready = benchlib.http_ready("/openai/v1/models")
            t.desc = "kserve_sdk (this repo), python -m kserve_sdk openai_model.py" + (
                ", generate_stream" if name == "generate" else "")
        elif name == "kserve":
            py = os.path.join(args.venvs, "kserve-llm", "bin", "python")
            version = benchlib.venv_version(py, "kserve") if os.path.exists(py) else None
            if version is None:
                t.unavailable = f"no kserve in {args.venvs}/kserve-llm: run hack/bench/setup_peers.sh"
            t.cmd = [py, "openai_model.py", *server_flags]
            t.ready = benchlib.http_ready("/openai/v1/models")
            t.desc = f"kserve {version} + vllm {benchlib.venv_version(py, 'vllm') if version else '?'}, " \
                     "openai_model.py (uvicorn, workers=1)"
        else:
            py = os.path.join(args.venvs, "litserve", "bin", "python")
            version = benchlib.venv_version(py, "litserve") if os.path.exists(py) else None
            if version is None:
                t.unavailable = f"no litserve in {args.venvs}/litserve: run hack/bench/setup_peers.sh"
            t.cmd = [py, "litserve_openai.py", "--port", str(port)]
            t.ready = benchlib.http_ready("/health")
            t.desc = f"litserve {version}, OpenAISpec, 1 worker"
            t.unsupported = {"completions": "LitServe's OpenAISpec serves /v1/chat/completions only"}
        targets.append(t)
    return targets


def run_client(args, target, case, *extra, timeout):
    """openai_client.py against the target, on the route of the case (generate: generate_stream)."""
    route = "generate" if target.name == "generate" else case.proto
    model = "tok-gen" if route == "generate" else MODEL
    prefix = "" if target.name == "litserve" else "/openai"
    cmd = [args.python, os.path.join(HERE, "openai_client.py"), "--proto", "sse", "--server", "ours",
           "--host", HOST, "--port", str(target.port), "--route", route, "--prefix", prefix, "--model", model,
           "--count", str(args.count), "--conc", str(case.conc), "--stream-timeout", str(args.stream_timeout),
           *extra]
    return stream_bench.stream_result(cmd, timeout)


def report(rows, targets, cases):
    """ours ÷ each other target per case, with the goal and PASS/FAIL."""
    names = [t.name for t in targets if t.name != "ours"]
    print("ours ÷ target (chunks/s, paired by round), goal in brackets:")
    print(f"{'case':<15} {'conc':>4} " + " ".join(f"{n + ' [' + format(GOALS[n], 'g') + ']':>16}" for n in names))
    for case in cases:
        ours = rows.get(("ours", case.key))
        cells = []
        for name in names:
            other = rows[(name, case.key)]
            if ours is None or ours.rps is None or other.rps is None:
                cells.append(f"{'n/a':>16}")
                continue
            ratio = 1 / benchlib.paired_ratio(other, ours)
            cells.append(f"{format(ratio, '.2f') + (' PASS' if ratio >= GOALS[name] else ' FAIL'):>16}")
        print(f"{case.name:<15} {case.conc:>4} " + " ".join(cells))


def parser():
    """The command line of this bench (benchlib's flags plus the stream client's)."""
    ap = benchlib.arg_parser("Streamed chunks per second over OpenAI's routes, kserve_sdk vs KServe and LitServe.",
                             CASES)
    ap.set_defaults(targets=",".join(TARGETS), ready_timeout=300)
    ap.add_argument("--count", type=int, default=COUNT, help=f"chunks per stream (default {COUNT})")
    ap.add_argument("--stream-timeout", type=float, default=30, help="seconds per stream (default 30)")
    return ap


def spec(args):
    """This bench as a benchlib.Bench for the parsed args."""
    return benchlib.Bench(tag="openai_bench", cases=CASES, proto="http",
                          make_payload=lambda case, workdir: None,
                          check=functools.partial(stream_bench.check, args, run_client=run_client),
                          load=functools.partial(stream_bench.load, run_client=run_client),
                          err_cols=[("bad", "bad"), ("failed", "failed")],
                          banner=f"openai_client.py in its own process ({sys.executable.split('/')[-1]}), "
                                 f"{args.count} chunks per stream",
                          make_targets=make_targets, base="ours", report=report,
                          headers=("chunks/s", "ttfc p50", "ttfc p99"))


def main():
    args = parser().parse_args()
    benchlib.main(args, spec(args))


if __name__ == "__main__":
    main()

"""Side-by-side gRPC benchmark of add-one model servers on loopback.

    .venv/bin/python hack/bench/grpc_bench.py \
        [--targets bare,ours,kserve,mlserver] [--cases grpc-small,grpc-1mib] [--duration 8]

Every target serves inference.GRPCInferenceService/ModelInfer (Open Inference
Protocol v2) on a free 127.0.0.1 port:
  bare      hack/bench/bare_grpc.py   (grpc.aio + tritonclient's service_pb2 + numpy, the ceiling)
  ours      hack/bench/addone_model.py --enable_grpc true, BENCH_IMPL=ours   (kserve_sdk, this repo)
  kserve    hack/bench/addone_model.py --enable_grpc true, BENCH_IMPL=kserve (kserve==0.21.0 venv)
  mlserver  mlserver start <copy of hack/bench/mlserver_addone>, its grpc_port (mlserver==1.7.1 venv)

The request is the ModelInferRequest tritonclient builds (FP32 input in
raw_input_contents), serialized once. Before timing, one request per (target,
case) goes through tritonclient.grpc.InferenceServerClient and the answer is
checked (values = input + 1, shape, FP32). The load generator is h2load
(apt-get install -y nghttp2-client) with gRPC framing; --loadgen aio uses
grpc_load.py instead. Targets, process handling, memory and the table come
from benchlib.py. See README.md.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

import benchlib
import numpy as np
from benchlib import HERE, HOST, MODEL, Case, LoadResult

METHOD = "/inference.GRPCInferenceService/ModelInfer"
INPUT, OUTPUT = "input-0", "output-0"

CASES = [
    Case("grpc-small", 1, "grpc", 16),
    Case("grpc-small", 32, "grpc", 16),
    Case("grpc-1mib", 4, "grpc", 262144),
]


@dataclass
class Payload:
    x: np.ndarray          # the FP32 input, shape [1, n]
    body: bytes            # serialized ModelInferRequest
    body_file: str         # the message alone (grpc_load.py)
    framed_file: str       # the message with gRPC's 5-byte prefix (h2load -d)
    resp_size: dict = field(default_factory=dict)   # target -> size of its OK response message


def infer_input(x):
    import tritonclient.grpc as tgrpc
    inp = tgrpc.InferInput(INPUT, list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return inp


def make_payload(case, workdir):
    from tritonclient.grpc._utils import _get_inference_request
    rng = np.random.default_rng(case.n)
    x = rng.random((1, case.n), dtype=np.float32)
    # Exactly the message tritonclient's InferenceServerClient.infer() sends.
    req = _get_inference_request(model_name=MODEL, inputs=[infer_input(x)], model_version="",
                                 request_id="", outputs=None, sequence_id=0, sequence_start=False,
                                 sequence_end=False, priority=0, timeout=None, parameters=None)
    assert len(req.raw_input_contents) == 1, "tritonclient did not use raw_input_contents"
    body = req.SerializeToString()
    body_file = os.path.join(workdir, f"req-{case.name}.bin")
    framed_file = os.path.join(workdir, f"req-{case.name}.grpc")
    with open(body_file, "wb") as f:
        f.write(body)
    with open(framed_file, "wb") as f:
        f.write(b"\x00" + len(body).to_bytes(4, "big") + body)
    return Payload(x, body, body_file, framed_file)


def check_result(x, shape, datatype, got):
    want = x + np.float32(1)
    if datatype != "FP32":
        return f"datatype {datatype!r} != 'FP32'"
    if list(shape) != list(x.shape):
        return f"shape {list(shape)} != {list(x.shape)}"
    if got is None or got.dtype != np.float32 or got.shape != want.shape:
        return f"result {None if got is None else (got.dtype, got.shape)} is not float32 {want.shape}"
    if not np.allclose(got, want, rtol=1e-6, atol=0):
        bad = int(np.argmax(~np.isclose(got, want, rtol=1e-6, atol=0)))
        return f"wrong value at flat index {bad}: {got.reshape(-1)[bad]} != {want.reshape(-1)[bad]}"
    return None


def check(target, case, payload):
    """One tritonclient request (values, shape, dtype), then the pre-serialized
    load request as bytes: must be OK and decode to the same answer; its size is
    what the h2load accounting expects."""
    import grpc
    import tritonclient.grpc as tgrpc
    from tritonclient.grpc import service_pb2
    from tritonclient.utils import InferenceServerException
    url = f"{HOST}:{target.port}"
    client = tgrpc.InferenceServerClient(url)
    try:
        res = client.infer(MODEL, [infer_input(payload.x)], client_timeout=30)
        out = res.get_output(OUTPUT)
        if out is None:
            return f"tritonclient: no {OUTPUT!r} in response: {str(res.get_response())[:300]}"
        err = check_result(payload.x, out.shape, out.datatype, res.as_numpy(OUTPUT))
        if err:
            return "tritonclient: " + err
    except InferenceServerException as e:
        return f"tritonclient: {e}"
    except Exception as e:  # noqa: BLE001 - an undecodable answer is a failure
        return f"tritonclient: {e!r}"
    finally:
        client.close()
    opts = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    try:
        with grpc.insecure_channel(url, options=opts) as ch:
            raw = ch.unary_unary(METHOD)(payload.body, timeout=30)
    except grpc.RpcError as e:
        return f"raw request: {e.code().name}: {e.details()}"
    resp = service_pb2.ModelInferResponse.FromString(raw)
    got = tgrpc.InferResult(resp).as_numpy(OUTPUT) if resp.outputs else None
    err = check_result(payload.x, resp.outputs[0].shape if resp.outputs else [],
                       resp.outputs[0].datatype if resp.outputs else None, got)
    if err:
        return "raw request: " + err
    payload.resp_size[target.name] = len(raw)
    return None


# --------------------------------------------------------------------------- load: h2load

H2_RE = {
    "seconds": re.compile(r"^finished in ([\d.]+)(m?s),", re.M),
    "requests": re.compile(r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                           r"(\d+) failed, (\d+) errored, (\d+) timeout", re.M),
    "codes": re.compile(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", re.M),
    "data": re.compile(r"^traffic: .*\((\d+)\) data", re.M),
}


def run_h2load(args, target, case, payload, seconds):
    """h2load on one HTTP/2 connection with case.conc streams, POSTing the framed message.

    h2load cannot read grpc-status, so an answer counts as OK only if its DATA
    carried the full OK response message: a non-OK gRPC status is a
    trailers-only answer with no DATA. good = min(2xx, DATA bytes // (5 + size
    of the OK response)); the rest of the 2xx answers are non-OK.
    """
    frame = 5 + payload.resp_size[target.name]
    log = os.path.join(args.workdir, f"h2load-{target.name}-{case.name}.log")
    if os.path.exists(log):
        os.remove(log)          # h2load appends; keep only this run's requests
    cmd = ["h2load", "-D", str(seconds), "-t", "1", "-c", "1", "-m", str(case.conc),
           "-d", payload.framed_file, "-H", "content-type: application/grpc",
           "-H", "te: trailers", "--log-file", log, f"http://{HOST}:{target.port}{METHOD}"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30)
    except subprocess.TimeoutExpired:
        return None, "h2load did not finish in time"
    m = {k: rx.search(r.stdout) for k, rx in H2_RE.items()}
    if r.returncode != 0 or not all(m.values()):
        return None, f"h2load failed (rc={r.returncode}): {(r.stdout + r.stderr).strip()[-500:]}"
    secs = float(m["seconds"].group(1)) / (1000 if m["seconds"].group(2) == "ms" else 1)
    _total, _started, done, _succ, _failed, errored, timeout = map(int, m["requests"].groups())
    c2, c3, c4, c5 = map(int, m["codes"].groups())
    good = min(c2, int(m["data"].group(1)) // frame)
    lat = []
    with open(log) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[1] == "200":
                lat.append(int(parts[2]))
    p50, p99, p999 = (float(v) / 1000 for v in np.percentile(lat, [50, 99, 99.9])) if lat else (None,) * 3
    return LoadResult(seconds=secs, total=done, ok=good, p50_ms=p50, p99_ms=p99, p999_ms=p999,
                      errors={"nonok": (c2 - good) + c3 + c4 + c5, "sockerr": errored + timeout}), None


# --------------------------------------------------------------------------- load: grpc.aio client

TRANSPORT_CODES = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"}


def run_aio(args, target, case, payload, seconds):
    """grpc_load.py in args.procs processes (case.conc split between them)."""
    procs = max(1, min(args.procs, case.conc))
    concs = [case.conc // procs + (1 if i < case.conc % procs else 0) for i in range(procs)]
    start_at = time.time() + 2.0          # after imports and channel_ready in every process
    running = []
    for i, conc in enumerate(concs):
        lat_out = os.path.join(args.workdir, f"lat-{target.name}-{case.name}-{i}.f64")
        cmd = [sys.executable, os.path.join(HERE, "grpc_load.py"), "--target", f"{HOST}:{target.port}",
               "--method", METHOD, "--body", payload.body_file, "--conc", str(conc),
               "--duration", str(seconds), "--timeout", str(args.timeout), "--start-at", str(start_at),
               "--expect-size", str(payload.resp_size[target.name]), "--lat-out", lat_out]
        running.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results, failures = [], []
    for p in running:
        try:
            out, err = p.communicate(timeout=seconds + args.timeout + 30)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            failures.append("grpc_load.py did not finish in time")
            continue
        line = next((ln for ln in out.splitlines() if ln.startswith("GRPC_LOAD ")), None)
        if p.returncode != 0 or line is None:
            failures.append(f"grpc_load.py failed (rc={p.returncode}): {(err or out).strip()[-500:]}")
            continue
        results.append(json.loads(line.split(" ", 1)[1]))
    if failures:
        return None, "; ".join(failures)
    lat = np.concatenate([np.fromfile(r["lat_file"], dtype=np.float64) for r in results])
    ok = sum(r["ok"] - r["badsize"] for r in results)
    codes = {}
    for r in results:
        for k, v in r["errors"].items():
            codes[k] = codes.get(k, 0) + v
    sock = sum(v for k, v in codes.items() if k in TRANSPORT_CODES)
    nonok = sum(v for k, v in codes.items() if k not in TRANSPORT_CODES) + sum(r["badsize"] for r in results)
    p50, p99, p999 = (float(v) * 1000 for v in np.percentile(lat, [50, 99, 99.9])) if len(lat) else (None,) * 3
    return LoadResult(seconds=max(r["seconds"] for r in results),
                      total=sum(r["ok"] for r in results) + sum(codes.values()), ok=ok,
                      p50_ms=p50, p99_ms=p99, p999_ms=p999, errors={"nonok": nonok, "sockerr": sock}), None


# --------------------------------------------------------------------------- main

def parser():
    """The command line of this bench (benchlib's flags plus the load generator's)."""
    ap = benchlib.arg_parser("Side-by-side loopback gRPC benchmark of add-one model servers.", CASES)
    ap.set_defaults(targets="bare,ours,kserve,mlserver")   # LitServe and BentoML serve no gRPC
    ap.add_argument("--loadgen", choices=["h2load", "aio"], default="h2load",
                    help="h2load (default; nghttp2-client) or aio (grpc_load.py, grpc.aio on bytes)")
    ap.add_argument("--procs", type=int, default=1, help="aio only: client processes (default 1)")
    ap.add_argument("--timeout", type=int, default=10, help="aio only: per-call deadline in s (default 10)")
    return ap


def spec(args):
    """This bench as a benchlib.Bench for the parsed args; exits when h2load is wanted but missing."""
    if args.loadgen == "h2load":
        if shutil.which("h2load") is None:
            raise SystemExit("h2load not found: apt-get update && apt-get install -y nghttp2-client "
                             "(or use --loadgen aio)")
        load, banner = run_h2load, "h2load -t1 -c1 -m<conc> (1 HTTP/2 connection, <conc> streams)"
    else:
        load = run_aio
        banner = f"grpc_load.py (grpc.aio, bytes in/out) in {args.procs} process(es), 1 channel each"
    return benchlib.Bench(tag="grpc_bench", cases=CASES, proto="grpc", make_payload=make_payload,
                          check=check, load=load, err_cols=[("nonok", "non-OK"), ("sockerr", "sockerr")],
                          banner=banner)


def main():
    args = parser().parse_args()
    benchlib.main(args, spec(args))


if __name__ == "__main__":
    main()

"""Side-by-side HTTP benchmark of add-one model servers on loopback.

    .venv/bin/python hack/bench/http_bench.py \
        [--targets bare,ours,kserve,mlserver] [--cases v2-json-small,...] [--duration 8]

Targets (each started on free 127.0.0.1 ports, stopped by process group at exit):
  bare      hack/bench/bare_tornado.py          (Tornado + orjson + numpy, the ceiling)
  ours      hack/bench/addone_model.py with BENCH_IMPL=ours   (kserve_sdk, this repo)
  kserve    hack/bench/addone_model.py with BENCH_IMPL=kserve (kserve==0.21.0 venv)
  mlserver  mlserver start <copy of hack/bench/mlserver_addone> (mlserver==1.7.1 venv)
  litserve  hack/bench/litserve_server.py (litserve venv), POST /predict, v1 cases only
  bentoml   bentoml serve hack/bench/bentoml_addone (bentoml venv), POST /predict, v1 cases only

The peer venvs come from hack/bench/setup_peers.sh. The load generator is wrk
(apt-get install -y wrk) driven by hack/bench/wrk_post.lua. Targets, process
handling, memory and the table come from benchlib.py. See README.md.
"""

import http.client
import json
import os
import shutil
import subprocess
from dataclasses import dataclass

import benchlib
import numpy as np
import orjson
from benchlib import HERE, HOST, MODEL, Case, LoadResult

HDR = "Inference-Header-Content-Length"

CASES = [
    Case("v2-json-small", 1, "v2json", 16),
    Case("v2-json-small", 32, "v2json", 16),
    Case("v1-small", 1, "v1", 16),
    Case("v1-small", 32, "v1", 16),
    Case("v2-binary-1mib", 4, "v2bin", 262144),
    Case("v2-json-1mib", 4, "v2json", 262144, min_seconds=8),  # KServe needs ~5 s per request here
    Case("v1-json-1mib", 4, "v1", 262144, min_seconds=8),
]

#: LitServe and BentoML have their own JSON route, which takes the v1 body; the v2 cases are not theirs.
NOT_V2 = "its own JSON route only (no Open Inference Protocol v2)"

UNSUPPORTED = {
    "mlserver": {
        "v1-small": "MLServer serves only the V2/Open Inference Protocol (no /v1 routes)",
        "v1-json-1mib": "MLServer serves only the V2/Open Inference Protocol (no /v1 routes)",
        "v2-binary-1mib": "MLServer's REST server has no Triton binary tensor extension "
                          "(Inference-Header-Content-Length is not parsed)",
    },
    **{peer: {case.name: NOT_V2 for case in CASES if case.proto != "v1"} for peer in ("litserve", "bentoml")},
}


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


def one_request(port, payload, timeout=30, path=""):
    """POST the payload to path (default: its own); (status, headers, body)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        headers = {"Content-Type": payload.ctype}
        if payload.hdrlen:
            headers[HDR] = payload.hdrlen
        conn.request("POST", path or payload.path, body=payload.body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        conn.close()


def check(target, case, payload):
    """One real request; None when the answer is exactly input + 1."""
    try:
        return check_response(case, payload, *one_request(target.port, payload, path=target.path))
    except OSError as e:
        return f"request failed: {e!r}"


# --------------------------------------------------------------------------- load

def run_wrk(args, target, case, payload, seconds):
    env = dict(os.environ, BENCH_BODY=payload.body_file, BENCH_CTYPE=payload.ctype,
               BENCH_HDRLEN=payload.hdrlen, BENCH_PATH=target.path or payload.path)
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
            res = json.loads(line.split(" ", 1)[1])
            return LoadResult(
                seconds=res["duration_us"] / 1e6,
                total=res["requests"],
                ok=res["requests"] - res["status_errors"],
                p50_ms=res["p50_us"] / 1000,
                p99_ms=res["p99_us"] / 1000,
                p999_ms=res["p999_us"] / 1000,
                errors={"non2xx": res["status_errors"],
                        "sockerr": res["connect"] + res["read"] + res["write"] + res["timeout"]},
            ), None
    return None, f"wrk failed (rc={r.returncode}): {(r.stderr or r.stdout).strip()[:500]}"


# --------------------------------------------------------------------------- main

def parser():
    """The command line of this bench (benchlib's flags plus wrk's)."""
    ap = benchlib.arg_parser("Side-by-side loopback HTTP benchmark of add-one model servers.", CASES)
    ap.add_argument("--threads", type=int, default=1, help="wrk threads (default 1: leave CPU to the server)")
    ap.add_argument("--timeout", type=int, default=10, help="wrk per-request timeout in s (default 10)")
    return ap


def require_wrk():
    """Exit with the install hint when wrk is missing."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get update && apt-get install -y wrk")


def spec(args):
    """This bench as a benchlib.Bench for the parsed args."""
    return benchlib.Bench(tag="http_bench", cases=CASES, proto="http", make_payload=make_payload,
                          check=check, load=run_wrk, err_cols=[("non2xx", "non2xx"), ("sockerr", "sockerr")],
                          banner=f"wrk -t{args.threads}, wrk timeout {args.timeout}s", unsupported=UNSUPPORTED)


def main():
    args = parser().parse_args()
    require_wrk()
    benchlib.main(args, spec(args))


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""A bounded soak of the model server on loopback: mixed REST JSON, REST binary, REST v1, gRPC unary and
gRPC streaming requests, valid and invalid, against ``tests/models/zoo.py --workers 2``.

Every answer is checked: a valid request must get exactly the right answer, an invalid one its own status
and message. It reports requests sent, answered correctly, refused with the right error, wrong, lost (no
answer at all; must be 0), 5xx from our own code (must be 0) and the server's RSS (parent + workers) after
warm-up and at the end. A second, short phase drives a server with ``--max_concurrent_requests`` at twice
its limit. It only talks to 127.0.0.1 and stops by itself (``--requests`` and ``--seconds`` bound it).

    .venv/bin/python hack/soak.py --requests 100000 --seconds 600 [--json out.json]
"""
import argparse
import asyncio
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Dict, List, Optional, Tuple

import aiohttp
import grpc
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb  # noqa: E402
from kserve_sdk.protocol.grpc.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub  # noqa: E402

HOST = "127.0.0.1"  # loopback only
BODY_LIMIT = 256 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *flags: str, models: str):
        self.http_port, self.grpc_port = free_port(), free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="kserve-sdk-soak-", suffix=".log", delete=False)
        argv = [sys.executable, os.path.join(ROOT, "tests/models/zoo.py"), "--http_port", str(self.http_port),
                "--grpc_port", str(self.grpc_port), "--enable_latency_logging", "false", *flags]
        env = {**os.environ, "PYTHONPATH": ROOT, "ZOO_MODELS": models, "KSERVE_LOGLEVEL": "WARNING"}
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    async def wait_live(self, session: aiohttp.ClientSession, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {open(self.log.name).read()[-2000:]}")
            try:
                async with session.get(f"http://{HOST}:{self.http_port}/v2/health/ready") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        raise RuntimeError("server did not become ready")

    def rss_bytes(self) -> int:
        """RSS of the server process and all its children (the workers)."""
        pids = [self.proc.pid]
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    if int(fields[1]) == self.proc.pid:
                        pids.append(int(pid))
                except OSError:
                    pass
        total = 0
        for pid in pids:
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1]) * 1024
            except OSError:
                pass
        return total

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        os.unlink(self.log.name)


# --- request kinds: each returns ("valid"|"invalid", outcome) where outcome is "correct", "refused",
# "wrong:<why>", "ours5xx:<why>" ----------------------------------------------------------------------------
Outcome = Tuple[str, str]


def _v2_doc(rng: random.Random) -> Tuple[dict, list]:
    datatype = rng.choice(["FP32", "INT64", "BYTES"])
    n = rng.randint(1, 16)
    if datatype == "FP32":
        data = [rng.randint(-1000, 1000) / 4 for _ in range(n)]
    elif datatype == "INT64":
        data = [rng.randint(-2 ** 40, 2 ** 40) for _ in range(n)]
    else:
        data = ["".join(rng.choice("abcxyz é") for _ in range(rng.randint(0, 8))) for _ in range(n)]
    tensor = {"name": "INPUT0", "shape": [n], "datatype": datatype, "data": data}
    return {"id": str(rng.random()), "inputs": [tensor]}, data


async def rest_json(ctx, rng) -> Outcome:
    doc, data = _v2_doc(rng)
    status, body, _ = await ctx.post("/v2/models/echo/infer", json.dumps(doc).encode())
    out = json.loads(body)
    ok = status == 200 and out["id"] == doc["id"] and out["outputs"][0]["data"] == data
    return "valid", "correct" if ok else f"wrong:rest_json {status} {body[:120]!r}"


async def rest_binary(ctx, rng) -> Outcome:
    values = np.array([rng.randint(-1000, 1000) for _ in range(rng.randint(1, 256))], dtype=np.float32)
    header = json.dumps({"inputs": [{"name": "INPUT0", "shape": [values.size], "datatype": "FP32",
                                     "parameters": {"binary_data_size": values.nbytes}}],
                         "parameters": {"binary_data_output": True}}).encode()
    status, body, headers = await ctx.post("/v2/models/echo/infer", header + values.tobytes(),
                                           {"Inference-Header-Content-Length": str(len(header))})
    if status != 200:
        return "valid", f"wrong:rest_binary {status} {body[:120]!r}"
    length = int(headers.get("Inference-Header-Content-Length", -1))
    ok = body[length:] == values.tobytes()
    return "valid", "correct" if ok else "wrong:rest_binary bytes differ"


async def rest_v1(ctx, rng) -> Outcome:
    instances = [[rng.randint(0, 99) for _ in range(3)] for _ in range(rng.randint(1, 4))]
    status, body, _ = await ctx.post("/v1/models/echo:predict", json.dumps({"instances": instances}).encode())
    ok = status == 200 and json.loads(body) == {"predictions": instances}
    return "valid", "correct" if ok else f"wrong:rest_v1 {status} {body[:120]!r}"


def _bytes_element(s: bytes) -> bytes:
    return struct.pack("<I", len(s)) + s


#: (name, method, path, body, headers, status, message) of invalid REST requests
def _invalid_rest(rng: random.Random):
    good, _ = _v2_doc(rng)
    entry = good["inputs"][0]
    lying = _bytes_element(b"abc")[:-1]
    lying_header = json.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "BYTES",
                                           "parameters": {"binary_data_size": len(lying)}}]}).encode()
    cases = [
        ("malformed-json", "/v2/models/echo/infer", b'{"inputs": [', {}, 400, "Unrecognized request format"),
        ("depth-bomb", "/v2/models/echo/infer", b"[" * 2000 + b"]" * 2000, {}, 400, "depth limit exceeded"),
        ("shape-vs-data", "/v2/models/echo/infer",
         json.dumps({"inputs": [{**entry, "shape": [len(entry["data"]) + 1]}]}).encode(), {}, 400, "values given"),
        ("shape-overflow", "/v2/models/echo/infer",
         json.dumps({"inputs": [{**entry, "shape": [2 ** 62, 2 ** 62]}]}).encode(), {}, 400, "int64 can count"),
        ("bad-datatype", "/v2/models/echo/infer",
         json.dumps({"inputs": [{**entry, "datatype": "FP99"}]}).encode(), {}, 400, "unsupported datatype"),
        ("duplicate-input", "/v2/models/echo/infer", json.dumps({"inputs": [entry, entry]}).encode(), {}, 400,
         "duplicate input name"),
        ("inputs-not-list", "/v2/models/echo/infer", b'{"inputs": {"a": 1}}', {}, 400, "to be a list"),
        ("instances-not-list", "/v1/models/echo:predict", b'{"instances": 3}', {}, 400, "to be a list"),
        ("lying-bytes-prefix", "/v2/models/echo/infer", lying_header + lying,
         {"Inference-Header-Content-Length": str(len(lying_header))}, 400, "runs past the end of the data"),
        ("header-length-past-body", "/v2/models/echo/infer", b"{}", {"Inference-Header-Content-Length": "9" * 30},
         400, "is outside the request body"),
        ("path-trick", "/v2/models/..%2Fecho/infer", json.dumps(good).encode(), {}, 400, "path separator"),
        ("long-name", "/v2/models/" + "n" * 400 + "/infer", json.dumps(good).encode(), {}, 400, "characters long"),
        ("unknown-model", "/v2/models/nope/infer", json.dumps(good).encode(), {}, 404, "does not exist"),
        ("non-utf8", "/v2/models/echo/infer", b'{"id": "\xff", "inputs": []}', {}, 400, "UTF-8"),
        ("model-raises", "/v1/models/failing:predict", b'{"instances": ["boom"]}', {}, 500,
         "RuntimeError : kaboom (model 'failing')"),
    ]
    if rng.random() < 0.02:  # rarely: over the body limit (costs 256 KiB of traffic)
        cases = [("too-large", "/v2/models/echo/infer", b" " * (BODY_LIMIT + 1), {}, 413, "--max_body_size")]
    return rng.choice(cases)


async def rest_invalid(ctx, rng) -> Outcome:
    name, path, body, headers, status, message = _invalid_rest(rng)
    got, answer, _ = await ctx.post(path, body, headers)
    try:
        error = json.loads(answer).get("error", "")
    except ValueError:
        error = answer[:120]
    if got == status and message in error:
        return "invalid", f"refused:rest {name}"
    if got >= 500:
        return "invalid", f"ours5xx:{name} {got} {error[:120]}"
    return "invalid", f"wrong:{name} {got} {error[:120]}"


def _grpc_valid(rng):
    values = np.array([rng.randint(-1000, 1000) for _ in range(rng.randint(1, 64))], dtype=np.float32)
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[values.size])
    message = pb.ModelInferRequest(model_name="echo", id=str(rng.random()), inputs=[tensor],
                                   raw_input_contents=[values.tobytes()])
    return message, values.tobytes()


def _grpc_invalid(rng):
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[4])
    kind = rng.choice(["size", "overflow", "path", "dtype", "unknown"])
    if kind == "size":
        return pb.ModelInferRequest(model_name="echo", inputs=[tensor], raw_input_contents=[b"\0" * 12]), \
            grpc.StatusCode.INVALID_ARGUMENT, "do not match shape", "raw-size-vs-shape"
    if kind == "overflow":
        tensor.shape[:] = [2 ** 62, 2 ** 62]
        return pb.ModelInferRequest(model_name="echo", inputs=[tensor], raw_input_contents=[b""]), \
            grpc.StatusCode.INVALID_ARGUMENT, "int64 can count", "shape-overflow"
    if kind == "path":
        return pb.ModelInferRequest(model_name="../echo"), grpc.StatusCode.INVALID_ARGUMENT, "path separator", \
            "path-trick"
    if kind == "dtype":
        tensor.datatype = "FP99"
        return pb.ModelInferRequest(model_name="echo", inputs=[tensor], raw_input_contents=[b"\0" * 16]), \
            grpc.StatusCode.INVALID_ARGUMENT, "unsupported datatype", "bad-datatype"
    return pb.ModelInferRequest(model_name="nope"), grpc.StatusCode.NOT_FOUND, "does not exist", "unknown-model"


async def grpc_unary(ctx, rng) -> Outcome:
    if rng.random() < 0.7:
        message, raw = _grpc_valid(rng)
        response = await ctx.stub.ModelInfer(message, timeout=30)
        ok = response.raw_output_contents == [raw] and response.id == message.id
        return "valid", "correct" if ok else "wrong:grpc_unary"
    message, code, text, name = _grpc_invalid(rng)
    try:
        await ctx.stub.ModelInfer(message, timeout=30)
    except grpc.aio.AioRpcError as e:
        if e.code() == code and text in e.details():
            return "invalid", f"refused:grpc {name}"
        if e.code() == grpc.StatusCode.INTERNAL or e.code() == grpc.StatusCode.UNKNOWN:
            return "invalid", f"ours5xx:grpc {e.code()} {e.details()[:120]}"
        return "invalid", f"wrong:grpc {e.code()} {e.details()[:120]}"
    return "invalid", "wrong:grpc invalid request answered OK"


async def grpc_stream(ctx, rng) -> List[Outcome]:
    """One ModelStreamInfer call of several requests, valid and invalid, each answered in order."""
    plan = []
    for _ in range(rng.randint(2, 6)):
        if rng.random() < 0.75:
            message, raw = _grpc_valid(rng)
            plan.append((message, raw, None))
        else:
            message, _, text, name = _grpc_invalid(rng)
            message.id = str(rng.random())
            plan.append((message, None, (text, name)))

    async def requests():
        for message, _, _ in plan:
            yield message

    answers = [a async for a in ctx.stub.ModelStreamInfer(requests(), timeout=30)]
    outcomes = []
    for i, (message, raw, text) in enumerate(plan):
        answer = answers[i] if i < len(answers) else None
        if answer is None:
            outcomes.append(("valid" if raw else "invalid", "lost"))
        elif raw is not None:
            ok = not answer.error_message and answer.infer_response.raw_output_contents == [raw] \
                and answer.infer_response.id == message.id
            outcomes.append(("valid", "correct" if ok else f"wrong:stream {answer.error_message[:100]}"))
        else:
            ok = text[0] in answer.error_message and answer.infer_response.id == message.id
            outcomes.append(("invalid", f"refused:grpc-stream {text[1]}" if ok
                             else f"wrong:stream-invalid {answer.error_message[:100]}"))
    if len(answers) != len(plan):
        outcomes.append(("valid", f"wrong:stream got {len(answers)} answers for {len(plan)}"))
    return outcomes


KINDS = [(rest_json, 3), (rest_binary, 2), (rest_v1, 1), (rest_invalid, 3), (grpc_unary, 3), (grpc_stream, 1)]


class Context:
    def __init__(self, session: aiohttp.ClientSession, base: str, stub):
        self.session, self.base, self.stub = session, base, stub

    async def post(self, path: str, body: bytes, headers: Optional[Dict[str, str]] = None):
        async with self.session.post(self.base + path, data=body, headers=headers or {}) as r:
            return r.status, await r.read(), r.headers


async def soak(args) -> Dict:
    server = Server("--workers", "2", "--max_body_size", str(BODY_LIMIT), models="echo,failing")
    counts: Counter = Counter()
    problems: Counter = Counter()
    refused_kinds: Counter = Counter()
    rss: Dict[str, int] = {}
    try:
        connector = aiohttp.TCPConnector(limit=args.concurrency)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60),
                                         skip_auto_headers=["Content-Type"]) as session:
            await server.wait_live(session)
            channel = grpc.aio.insecure_channel(f"{HOST}:{server.grpc_port}")
            ctx = Context(session, f"http://{HOST}:{server.http_port}", GRPCInferenceServiceStub(channel))
            rng_master = random.Random(args.seed)
            kinds = [k for k, w in KINDS for _ in range(w)]
            start = time.monotonic()
            deadline = start + args.seconds
            warmup = min(args.warmup, args.requests // 10)

            async def worker(seed: int) -> None:
                rng = random.Random(seed)
                while counts["sent"] < args.requests and time.monotonic() < deadline:
                    kind = rng.choice(kinds)
                    try:
                        result = await kind(ctx, rng)
                    except Exception as e:  # no answer at all
                        result = ("valid", f"lost:{kind.__name__} {type(e).__name__}: {str(e)[:100]}")
                    for validity, outcome in (result if isinstance(result, list) else [result]):
                        counts["sent"] += 1
                        counts[validity] += 1
                        key = outcome.split(":", 1)[0]
                        counts[key] += 1
                        if key == "refused":
                            refused_kinds[outcome.split(":", 1)[1]] += 1
                        elif key != "correct":
                            problems[outcome[:160]] += 1
                    if "rss_warm" not in rss and counts["sent"] >= warmup:
                        rss["rss_warm"] = server.rss_bytes()

            rss["rss_start"] = server.rss_bytes()
            await asyncio.gather(*(worker(rng_master.randrange(2 ** 32)) for _ in range(args.concurrency)))
            elapsed = time.monotonic() - start
            await asyncio.sleep(1)
            rss["rss_end"] = server.rss_bytes()
            await channel.close()
    finally:
        server.stop()
    return {"counts": dict(counts), "problems": dict(problems.most_common(20)), "seconds": round(elapsed, 1),
            "refused_kinds": dict(sorted(refused_kinds.items())),
            **rss}


async def overload(args) -> Dict:
    """Twice the per-worker concurrency limit, one worker: half answered, half refused at once."""
    limit = 8
    server = Server("--max_concurrent_requests", str(limit), models="sleepy")
    result: Counter = Counter()
    refusal_ms: List[float] = []
    try:
        async with aiohttp.ClientSession() as session:
            await server.wait_live(session)
            url = f"http://{HOST}:{server.http_port}/v1/models/sleepy:predict"

            async def one():
                t0 = time.monotonic()
                async with session.post(url, data=b'{"instances": [0.5]}') as r:
                    body = await r.read()
                    if r.status == 200:
                        result["answered"] += 1
                    elif r.status == 503 and r.headers.get("Retry-After") == "1" and b"max_concurrent" in body:
                        result["refused_503_retry_after"] += 1
                        refusal_ms.append((time.monotonic() - t0) * 1000)
                    else:
                        result[f"other_{r.status}"] += 1

            for _ in range(args.overload_rounds):
                await asyncio.gather(*(one() for _ in range(2 * limit)))
    finally:
        server.stop()
    return {"limit": limit, "offered_per_round": 2 * limit, "rounds": args.overload_rounds, **result,
            "max_refusal_ms": round(max(refusal_ms), 1) if refusal_ms else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20000, help="stop after this many checked answers")
    parser.add_argument("--seconds", type=float, default=120, help="and at the latest after this long")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=10000, help="answers before the 'after warm-up' RSS")
    parser.add_argument("--overload_rounds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers (finally:) when stopped
    report = {"soak": asyncio.run(soak(args)), "overload": asyncio.run(overload(args))}
    c = report["soak"]["counts"]
    warm, end = report["soak"].get("rss_warm", 0), report["soak"].get("rss_end", 0)
    growth = (end - warm) / warm * 100 if warm else float("nan")
    report["soak"]["rss_growth_after_warmup_pct"] = round(growth, 2)
    mib = 1024 * 1024
    print(f"| answers checked | {c.get('sent', 0)} in {report['soak']['seconds']} s |")
    print(f"| valid / invalid sent | {c.get('valid', 0)} / {c.get('invalid', 0)} |")
    print(f"| answered correctly | {c.get('correct', 0)} |")
    print(f"| refused with the right error | {c.get('refused', 0)} |")
    print(f"| wrong | {c.get('wrong', 0)} |")
    print(f"| lost | {c.get('lost', 0)} |")
    print(f"| 5xx from our code | {c.get('ours5xx', 0)} |")
    print(f"| server RSS start / after warm-up / end | {report['soak'].get('rss_start', 0) / mib:.1f} / "
          f"{warm / mib:.1f} / {end / mib:.1f} MiB ({growth:+.1f}% after warm-up) |")
    o = report["overload"]
    print(f"| at 2x --max_concurrent_requests {o['limit']} ({o['rounds']} rounds of {o['offered_per_round']}) | "
          f"{o.get('answered', 0)} answered, {o.get('refused_503_retry_after', 0)} refused 503 + Retry-After "
          f"(slowest refusal {o['max_refusal_ms']} ms) |")
    print("| bad inputs refused, by kind | " + ", ".join(f"{k} {v}" for k, v in report["soak"]["refused_kinds"].items())
          + " |")
    if report["soak"]["problems"]:
        print("problems:", json.dumps(report["soak"]["problems"], indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    bad = c.get("lost", 0) + c.get("wrong", 0) + c.get("ours5xx", 0)
    return 1 if bad or growth >= 10 else 0


if __name__ == "__main__":
    sys.exit(main())

"""Closed-loop gRPC load generator on bytes: no protobuf work per request.

One process, one grpc.aio channel (one HTTP/2 connection), --conc coroutines.
Each coroutine sends the pre-serialized request in --body through a generic
``channel.unary_unary(method)`` with no (de)serializers, waits for the answer,
records the latency and loops until the deadline. grpc_bench.py starts one
or more of these processes and merges their results.

Prints one line: ``GRPC_LOAD {json}`` with ok, non-OK statuses by code, OK
answers whose size differs from --expect-size, the timed seconds, and the
path of a float64 file of per-request latencies (seconds).

    python hack/bench/grpc_load.py --target 127.0.0.1:8081 \
        --method /inference.GRPCInferenceService/ModelInfer --body req.bin \
        --conc 32 --duration 8 [--start-at EPOCH] [--expect-size N] --lat-out lat.f64
"""

import argparse
import asyncio
import json
import time
from collections import Counter

import grpc
import numpy as np


async def run(args):
    with open(args.body, "rb") as f:
        body = f.read()
    opts = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    async with grpc.aio.insecure_channel(args.target, options=opts) as channel:
        call = channel.unary_unary(args.method, request_serializer=None, response_deserializer=None)
        await asyncio.wait_for(channel.channel_ready(), timeout=10)
        delay = args.start_at - time.time()
        if delay > 0:
            await asyncio.sleep(delay)

        clock = time.perf_counter
        t0 = clock()
        deadline = t0 + args.duration
        lats, codes = [], Counter()
        badsize = 0
        expect = args.expect_size

        async def worker():
            nonlocal badsize
            append = lats.append
            while True:
                start = clock()
                if start >= deadline:
                    return
                try:
                    resp = await call(body, timeout=args.timeout)
                except grpc.aio.AioRpcError as e:
                    codes[e.code().name] += 1
                    continue
                append(clock() - start)
                if expect and len(resp) != expect:
                    badsize += 1

        await asyncio.gather(*(worker() for _ in range(args.conc)))
        seconds = clock() - t0
    np.asarray(lats, dtype=np.float64).tofile(args.lat_out)
    return {"ok": len(lats), "errors": dict(codes), "badsize": badsize,
            "seconds": seconds, "lat_file": args.lat_out}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--method", required=True)
    ap.add_argument("--body", required=True, help="file with the serialized request message")
    ap.add_argument("--conc", type=int, default=1)
    ap.add_argument("--duration", type=float, default=8)
    ap.add_argument("--timeout", type=float, default=10, help="per-call deadline in s")
    ap.add_argument("--start-at", type=float, default=0, help="wall-clock time to start (sync processes)")
    ap.add_argument("--expect-size", type=int, default=0, help="expected response message size")
    ap.add_argument("--lat-out", required=True)
    args = ap.parse_args()
    print("GRPC_LOAD " + json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()

"""Load client for shm_bench.py: one FP32 tensor [1, n] through Triton system shared memory, or the
same tensor as binary REST, with tritonclient.http in a loop (concurrency 1), in its own process.

    python hack/bench/shm_client.py --mode shm|binary --port P [--model addone] [--n 16777216] \
        [--duration 5] [--max-requests 1000]

shm: creates an input and an output region (tritonclient.utils.shared_memory), registers both
with client.register_system_shared_memory, then sends requests whose input and requested output
name the regions (InferInput.set_shared_memory, InferRequestedOutput.set_shared_memory); the
input is written once. binary: InferInput.set_data_from_numpy(binary_data=True) and a binary
output. The first answer must be input + 1 (read from the output region for shm). Requests run
until --duration seconds or --max-requests. Regions are unregistered and destroyed at the end,
also on errors and SIGTERM. Prints one line `SHM_RESULT {json}`: ok, seconds, p50/p99 ms, error.
"""

import argparse
import json
import os
import signal
import time

import numpy as np

INPUT, OUTPUT = "input-0", "output-0"


def _terminate(signum, _frame):
    raise SystemExit(f"signal {signum}")


def verify(x, got):
    """None when got is x + 1 (float32, same shape), else what is wrong."""
    want = x + np.float32(1)
    if got is None or got.shape != want.shape or got.dtype != np.float32:
        return f"output {None if got is None else (got.dtype, got.shape)} is not float32 {want.shape}"
    if not np.array_equal(got, want):
        bad = int(np.argmax(got.reshape(-1) != want.reshape(-1)))
        return f"wrong value at flat index {bad}: {got.reshape(-1)[bad]} != {want.reshape(-1)[bad]}"
    return None


class ShmRegions:
    """An input and an output system shared-memory region, registered with the server."""

    def __init__(self, client, nbytes):
        import tritonclient.utils.shared_memory as shm
        self.shm, self.client, self.nbytes = shm, client, nbytes
        pid = os.getpid()
        self.names = {"in": f"bench_in_{pid}", "out": f"bench_out_{pid}"}
        self.handles, self.registered = {}, []

    def __enter__(self):
        try:
            for role, name in self.names.items():
                self.handles[role] = self.shm.create_shared_memory_region(name, f"/{name}", self.nbytes)
                self.client.register_system_shared_memory(name, f"/{name}", self.nbytes)
                self.registered.append(name)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for name in self.registered:
            try:
                self.client.unregister_system_shared_memory(name)
            except Exception as e:  # noqa: BLE001 - keep cleaning up; say what failed
                print(f"shm_client: unregister {name} failed: {e}", flush=True)
        for handle in self.handles.values():
            self.shm.destroy_shared_memory_region(handle)


def shm_request(regions, x):
    """Input and output naming the regions; the input written into its region."""
    import tritonclient.http as thttp
    regions.shm.set_shared_memory_region(regions.handles["in"], [x])
    inp = thttp.InferInput(INPUT, list(x.shape), "FP32")
    inp.set_shared_memory(regions.names["in"], x.nbytes)
    out = thttp.InferRequestedOutput(OUTPUT)
    out.set_shared_memory(regions.names["out"], x.nbytes)
    return [inp], [out]


def binary_request(x):
    """Input and output as binary REST tensors."""
    import tritonclient.http as thttp
    inp = thttp.InferInput(INPUT, list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    return [inp], [thttp.InferRequestedOutput(OUTPUT, binary_data=True)]


def timed_loop(send, duration, max_requests):
    """Call send() until duration seconds or max_requests; (count, seconds, latencies in s)."""
    lat = []
    t0 = time.perf_counter()
    deadline = t0 + duration
    while len(lat) < max_requests and time.perf_counter() < deadline:
        start = time.perf_counter()
        send()
        lat.append(time.perf_counter() - start)
    return len(lat), time.perf_counter() - t0, lat


def run(args, client, x):
    """The first request checked, then the timed loop; the SHM_RESULT dict."""
    def go(inputs, outputs, read):
        result = client.infer(args.model, inputs, outputs=outputs)
        err = verify(x, read(result))
        if err:
            return {"ok": 0, "seconds": 0.0, "error": err}
        n, secs, lat = timed_loop(lambda: client.infer(args.model, inputs, outputs=outputs),
                                  args.duration, args.max_requests)
        p50, p99 = (float(v) * 1000 for v in np.percentile(lat, [50, 99])) if lat else (None, None)
        return {"ok": n, "seconds": secs, "p50_ms": p50, "p99_ms": p99, "error": ""}

    if args.mode == "binary":
        return go(*binary_request(x), lambda r: r.as_numpy(OUTPUT))
    with ShmRegions(client, x.nbytes) as regions:
        def read(_result):
            return regions.shm.get_contents_as_numpy(regions.handles["out"], np.float32, list(x.shape))
        return go(*shm_request(regions, x), read)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["shm", "binary"], required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", default="addone")
    ap.add_argument("--n", type=int, default=1 << 24, help="FP32 elements (default 16777216 = 64 MiB)")
    ap.add_argument("--duration", type=float, default=5, help="seconds of requests (default 5)")
    ap.add_argument("--max-requests", type=int, default=1000)
    ap.add_argument("--timeout", type=float, default=60, help="per-request network timeout in s")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, _terminate)
    import tritonclient.http as thttp
    from tritonclient.utils import InferenceServerException
    x = np.random.default_rng(args.n).random((1, args.n), dtype=np.float32)
    client = thttp.InferenceServerClient(f"{args.host}:{args.port}", connection_timeout=args.timeout,
                                         network_timeout=args.timeout)
    try:
        out = run(args, client, x)
    except InferenceServerException as e:
        out = {"ok": 0, "seconds": 0.0, "error": f"tritonclient: {e}"}
    finally:
        client.close()
    print("SHM_RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

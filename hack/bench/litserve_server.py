"""The bench's two models on LitServe, run from the `litserve` venv of setup_peers.sh.

    /tmp/bench-venvs/litserve/bin/python hack/bench/litserve_server.py --port 8080 [--api addone|stream]

addone  POST /predict {"instances": [[...]]} -> {"predictions": [[... + 1]]}: the add-one model of
        addone_model.py with LitServe's own request/response hooks.
stream  POST /predict {"start": s, "count": n} -> n lines of newline-delimited JSON {"y": s + i}
        (LitAPI(stream=True)): the counter of stream_model.py.
LitServer runs with its defaults (accelerator auto, here the CPU: one inference worker, one API server
process, log level info) and fast_queue=True (its ZeroMQ request queue). Bound to 127.0.0.1; no client
file is written.
"""

import argparse

import litserve as ls
import numpy as np


class AddOneAPI(ls.LitAPI):
    """output = input + 1, on the JSON body KServe's v1 protocol uses."""

    def setup(self, device):
        self.device = device

    def decode_request(self, request):
        return np.asarray(request["instances"], dtype=np.float32)

    def predict(self, x):
        return x + np.float32(1)

    def encode_response(self, output):
        return {"predictions": output.tolist()}


class CounterAPI(ls.LitAPI):
    """Streams `count` answers y = start, start + 1, ... with no sleeps."""

    def setup(self, device):
        self.device = device

    def decode_request(self, request):
        return int(request["start"]), int(request["count"])

    def predict(self, x):
        start, count = x
        for i in range(count):
            yield start + i

    def encode_response(self, output):
        for y in output:
            yield {"y": y}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--api", choices=["addone", "stream"], default="addone")
    args = ap.parse_args()
    api = AddOneAPI() if args.api == "addone" else CounterAPI(stream=True)
    server = ls.LitServer(api, fast_queue=True)
    server.run(host="127.0.0.1", port=args.port, generate_client_file=False)


if __name__ == "__main__":
    main()

"""cb_bench.py's language model on LitServe's continuous batching loop, run from the `litserve` venv of
setup_peers.sh.

    /tmp/bench-venvs/litserve/bin/python hack/bench/litserve_cb.py --port 8080 [--max-batch-size 64]

POST /predict {"start": s, "count": n} -> n lines of newline-delimited JSON {"y": s + i}, one per step of
cb_step.py's model. The model is written the way LitServe's ContinuousBatchingLoop asks: the LitAPI keeps the
active streams (add_request, has_capacity, has_active_requests) and its step(prev_outputs) advances all of
them at once, returning an Output per stream and a FINISH_STREAMING Output for each stream that ends.
LitServer runs with its defaults (one inference worker, one API server process) and fast_queue=True, as
litserve_server.py; bound to 127.0.0.1; no client file is written.

One change to the loop: with no active stream, LitServe 0.2.19's loop calls run() again at once, so its
worker holds a core at 100% while idle, which on a shared 2-core machine slows whatever else runs (here the
other targets, between their turns). IdleLoop waits in an idle run() until add_request has added a stream
(at most a second), as a user would to get the core back; a new stream is not delayed by it.
"""

import argparse
import asyncio

import cb_step
import litserve as ls
from litserve.loops import ContinuousBatchingLoop, Output
from litserve.utils import LitAPIStatus


class IdleLoop(ContinuousBatchingLoop):
    """ContinuousBatchingLoop whose idle run() waits for a stream instead of returning at once."""

    def __init__(self):
        super().__init__()
        self.arrived = asyncio.Event()  # set by add_request, which runs on the loop's own event loop

    def add_request(self, *args, **kwargs):
        super().add_request(*args, **kwargs)
        self.arrived.set()

    async def run(self, lit_api, *args, **kwargs):
        if not lit_api.has_active_requests():
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), 1)
            except TimeoutError:
                return None
        return await super().run(lit_api, *args, **kwargs)


class StepAPI(ls.LitAPI):
    """The streams' rows and how many tokens each still owes; step() advances them all."""

    def setup(self, device):
        self.device = device
        self.lm = cb_step.StepModel()
        self.streams = {}  # uid -> [row, tokens left]

    def decode_request(self, request):
        return int(request["start"]), int(request["count"])

    def add_request(self, uid, request):
        start, count = self.decode_request(request)
        self.streams[uid] = [self.lm.row(start), count]

    def has_capacity(self):
        return len(self.streams) < self.max_batch_size

    def has_active_requests(self):
        return bool(self.streams)

    def step(self, prev_outputs):
        live = list(self.streams.items())  # streams added while this step runs join the next one
        tokens = self.lm.step([row for _, (row, _) in live])
        outputs = []
        for (uid, stream), token in zip(live, tokens, strict=True):
            outputs.append(Output(uid, token, LitAPIStatus.OK))
            stream[1] -= 1
            if stream[1] <= 0:
                outputs.append(Output(uid, "", LitAPIStatus.FINISH_STREAMING))
                del self.streams[uid]
        return outputs

    def encode_response(self, output):
        return {"y": output} if output != "" else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--max-batch-size", type=int, default=64)
    args = ap.parse_args()
    api = StepAPI(stream=True, max_batch_size=args.max_batch_size, loop=IdleLoop())
    server = ls.LitServer(api, fast_queue=True)
    server.run(host="127.0.0.1", port=args.port, generate_client_file=False)


if __name__ == "__main__":
    main()

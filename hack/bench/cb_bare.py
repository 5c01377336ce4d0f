"""cb_bench.py's ceiling: cb_step.py's model step-batched by a few lines on bare Tornado, no SDK.

    python hack/bench/cb_bare.py --http_port 8080

The same wire as cb_model.py's generate_stream (POST /v2/models/<m>/generate_stream with the INT32 tensor
[start, count]; one SSE event per token, the v2 response holding "y" = [token]), each event flushed as it is
written. The batcher is the least that batches streams: a stream that wants its next token joins the waiting
rows; once every live stream waits (looked at after the loop's turn) and no step runs, they all go to one step on
a thread. No validation, metrics, logging, coalescing or cancellation: what is left of a stream's cost is
Tornado's and the step's.
"""

import argparse
import asyncio
from typing import List, Set, Tuple

import cb_step
import orjson
import tornado.web

MODEL = cb_step.StepModel()


class Batcher:
    """The rows waiting for the next step; a step runs on the loop's default thread pool."""

    def __init__(self) -> None:
        self.waiting: List[Tuple[cb_step.Row, asyncio.Future, asyncio.Task]] = []
        self.live: Set[asyncio.Task] = set()
        self.running = False

    async def next_token(self, row: cb_step.Row) -> int:
        loop = asyncio.get_running_loop()
        task, future = asyncio.current_task(), loop.create_future()
        self.live.add(task)
        self.waiting.append((row, future, task))
        loop.call_soon(self.start)
        return await future

    def leave(self) -> None:
        self.live.discard(asyncio.current_task())
        asyncio.get_running_loop().call_soon(self.start)

    def start(self) -> None:
        if self.running or not self.waiting or not self.live <= {task for _, _, task in self.waiting}:
            return
        rows, self.waiting = self.waiting, []
        self.running = True
        step = asyncio.get_running_loop().run_in_executor(None, MODEL.step, [row for row, _, _ in rows])
        step.add_done_callback(lambda done: self.ended(rows, done))

    def ended(self, rows, done: asyncio.Future) -> None:
        self.running = False
        for (_, future, _), token in zip(rows, done.result(), strict=True):
            future.set_result(token)
        asyncio.get_running_loop().call_soon(self.start)


BATCHER = Batcher()


class GenerateStream(tornado.web.RequestHandler):
    async def post(self, name: str) -> None:
        request = orjson.loads(self.request.body)
        start, count = request["inputs"][0]["data"][:2]
        row = MODEL.row(start)
        self.set_header("Content-Type", "text/event-stream")
        self.request.connection.stream.set_nodelay(True)
        try:
            for _ in range(count):
                token = await BATCHER.next_token(row)
                event = {"model_name": name, "id": request.get("id"),
                         "outputs": [{"name": "y", "shape": [1], "datatype": "INT32", "data": [token]}]}
                self.write(b"data: " + orjson.dumps(event) + b"\n\n")
                self.flush()
        finally:
            BATCHER.leave()


class Ready(tornado.web.RequestHandler):
    def get(self) -> None:
        self.write({"ready": True})


async def serve(port: int) -> None:
    app = tornado.web.Application([(r"/v2/models/([^/]+)/generate_stream", GenerateStream),
                                   (r"/v2/health/ready", Ready)], log_function=lambda handler: None)
    app.listen(port, "127.0.0.1")
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--http_port", type=int, required=True)
    args, _ = parser.parse_known_args()
    asyncio.run(serve(args.http_port))


if __name__ == "__main__":
    main()

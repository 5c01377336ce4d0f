"""Streaming load client for stream_bench.py: `conc` asyncio workers, each opening one stream after
another until the deadline (or --max-streams streams in all), in its own process.

    python hack/bench/stream_client.py --proto sse|grpc --server ours|mlserver --port P \
        --model stream --count 1000 --conc 8 --duration 8      # timed
    python hack/bench/stream_client.py ... --conc 2 --streams 4                 # a fixed number

A stream asks for `count` responses with the INT32 tensor [start, count] (start unique per stream)
and is correct when exactly `count` responses arrive holding start, start + 1, ... in order.
  sse   POST /v2/models/<m>/generate_stream, HTTP/1.1 on a raw asyncio socket (one keep-alive
        connection per worker, Accept-Encoding: identity), chunked or length-delimited bodies,
        events split on a blank line, each `data:` line parsed as a v2 JSON response. With
        --server litserve: POST /predict {"start", "count"} on the same socket, the body being
        LitServe's stream, one JSON object {"y": ...} per line.
  grpc  inference.GRPCInferenceService/ModelStreamInfer on one grpc.aio channel, the request
        pre-serialized (tritonclient's ModelInferRequest, raw_input_contents), answers decoded as
        ModelStreamInferResponse (ours, Triton's proto) or ModelInferResponse (MLServer's proto).
Prints one line `STREAM_RESULT {json}`: streams ok / bad / failed, responses in correct streams,
all responses, the elapsed time (first start to last stream end; streams started before the deadline
run to their end), time to first response p50/p99 over correct streams, and a sample problem.
"""

import argparse
import asyncio
import json
import time

import numpy as np
import orjson


class Problem(Exception):
    """A stream delivered something else than expected."""


def expect(values, start, count):
    if len(values) != count:
        raise Problem(f"{len(values)} responses, expected {count}")
    if values != list(range(start, start + count)):
        bad = next(i for i, v in enumerate(values) if v != start + i)
        raise Problem(f"response {bad} holds {values[bad]}, expected {start + bad}")


# --------------------------------------------------------------------------- SSE

class SSEConnection:
    def __init__(self, host, port, model, lines=False):
        self.host, self.port, self.model = host, port, model
        self.lines = lines          # LitServe: a JSON object per line instead of SSE events
        self.reader = self.writer = None

    async def close(self):
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
            self.reader = self.writer = None

    def request(self, sid, start, count):
        """(path, JSON body) of the stream asking for `count` responses from `start`."""
        if self.lines:  # LitServe's stream=True route
            return "/predict", orjson.dumps({"start": start, "count": count})
        body = orjson.dumps({"id": f"s{sid}", "inputs": [{"name": "x", "shape": [2], "datatype": "INT32",
                                                          "data": [start, count]}]})
        return f"/v2/models/{self.model}/generate_stream", body

    def parse_event(self, data):
        """The number one event's data carries (None: an event that carries none)."""
        doc = orjson.loads(data)
        if "error" in doc:
            raise Problem(f"error event: {doc['error']}")
        return doc["outputs"][0]["data"][0]

    async def stream(self, sid, start, count):
        """Returns (values, ttfr seconds)."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        path, body = self.request(sid, start, count)
        t0 = time.perf_counter()
        self.writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\nAccept-Encoding: identity\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        values, ttfr, buf = [], None, b""
        keep = headers.get("connection", "").lower() != "close"

        def feed(data):
            nonlocal buf, ttfr
            buf += data
            while self.lines:
                end = buf.find(b"\n")
                if end < 0:
                    return
                line, buf = buf[:end], buf[end + 1:]
                if line.strip():
                    if ttfr is None:
                        ttfr = time.perf_counter() - t0
                    values.append(orjson.loads(line)["y"])
            while True:
                end = buf.find(b"\n\n")
                if end < 0:
                    return
                event, buf = buf[:end], buf[end + 2:]
                for line in event.split(b"\n"):
                    if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                        continue
                    try:
                        value = self.parse_event(line[5:])
                    except Problem as e:
                        raise Problem(f"after {len(values)} responses: {e}") from None
                    if value is None:
                        continue
                    if ttfr is None:
                        ttfr = time.perf_counter() - t0
                    values.append(value)

        sink = bytearray()              # an error answer's body, for the message
        consume = feed if status == 200 else sink.extend
        if status != 200:
            keep = False
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    while (await self.reader.readuntil(b"\r\n")) != b"\r\n":
                        pass
                    break
                consume((await self.reader.readexactly(size + 2))[:-2])
        elif "content-length" in headers:
            consume(await self.reader.readexactly(int(headers["content-length"])))
        else:
            consume(await self.reader.read())
            keep = False
        if not keep:
            await self.close()
        if status != 200:
            raise Problem(f"HTTP {status}: {bytes(sink[:200])!r}")
        if buf.strip():
            raise Problem(f"the body ends inside an event: {buf[:200]!r}")
        return values, ttfr


# --------------------------------------------------------------------------- gRPC

class GRPCStreams:
    def __init__(self, host, port, model, server):
        import grpc
        from tritonclient.grpc import service_pb2

        self.pb, self.model = service_pb2, model
        self.channel = grpc.aio.insecure_channel(f"{host}:{port}")
        self.call = self.channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
        self.wrapped = server != "mlserver"      # ours, bare: ModelStreamInferResponse; MLServer: ModelInferResponse

    async def close(self):
        await self.channel.close()

    def request(self, sid, start, count):
        req = self.pb.ModelInferRequest(model_name=self.model, id=f"s{sid}")
        x = req.inputs.add()
        x.name, x.datatype = "x", "INT32"
        x.shape.extend([2])
        req.raw_input_contents.append(np.array([start, count], dtype="<i4").tobytes())
        return req.SerializeToString()

    async def stream(self, sid, start, count):
        values, ttfr = [], None
        t0 = time.perf_counter()
        call = self.call(iter([self.request(sid, start, count)]))
        decode = self.pb.ModelStreamInferResponse.FromString if self.wrapped else self.pb.ModelInferResponse.FromString
        async for raw in call:
            msg = decode(raw)
            if self.wrapped:
                if msg.error_message:
                    raise Problem(f"error_message after {len(values)} responses: {msg.error_message}")
                msg = msg.infer_response
            if ttfr is None:
                ttfr = time.perf_counter() - t0
            if msg.raw_output_contents:
                values.append(int.from_bytes(msg.raw_output_contents[0][:4], "little", signed=True))
            else:
                values.append(msg.outputs[0].contents.int_contents[0])
        return values, ttfr


# --------------------------------------------------------------------------- driver

async def run(args, sse_connection=SSEConnection):
    """The load of ``args``; SSE streams go through ``sse_connection(host, port, model)``."""
    stats = {"streams_ok": 0, "streams_bad": 0, "streams_failed": 0, "responses_ok": 0, "responses": 0,
             "sample": ""}
    ttfrs = []
    started = [0]
    limit = args.streams or args.max_streams
    grpc_streams = GRPCStreams(args.host, args.port, args.model, args.server) if args.proto == "grpc" else None
    t_begin = time.perf_counter()
    deadline = t_begin + args.duration if not args.streams else float("inf")

    async def worker(index):
        conn = sse_connection(args.host, args.port, args.model, lines=args.server == "litserve") \
            if grpc_streams is None else grpc_streams
        first = True
        try:
            while started[0] < limit and time.perf_counter() < deadline:
                sid = started[0]
                started[0] += 1
                start = sid * args.count
                count = max(1, round((index + 1) * args.count / args.conc)) if first and args.stagger \
                    else args.count
                values = []
                try:
                    values, ttfr = await asyncio.wait_for(conn.stream(sid, start, count), args.stream_timeout)
                    expect(values, start, count)
                except Problem as e:
                    stats["streams_bad"] += 1
                    stats["sample"] = stats["sample"] or f"stream {sid}: {e}"
                    if grpc_streams is None:
                        await conn.close()     # the rest of that body is unread
                except (TimeoutError, Exception) as e:  # noqa: BLE001 - counted and shown
                    stats["streams_failed"] += 1
                    stats["sample"] = stats["sample"] or f"stream {sid}: {type(e).__name__}: {e}"
                    if grpc_streams is None:
                        await conn.close()
                else:
                    stats["streams_ok"] += 1
                    stats["responses_ok"] += len(values)
                    if not (first and args.stagger):  # the first streams all begin together
                        ttfrs.append(ttfr)
                stats["responses"] += len(values)
                first = False
        finally:
            if grpc_streams is None:
                await conn.close()

    try:
        await asyncio.gather(*(worker(i) for i in range(args.conc)))
    finally:
        if grpc_streams is not None:
            await grpc_streams.close()
    stats["elapsed_s"] = time.perf_counter() - t_begin
    if ttfrs:
        stats["ttfr_p50_ms"] = float(np.percentile(ttfrs, 50)) * 1000
        stats["ttfr_p99_ms"] = float(np.percentile(ttfrs, 99)) * 1000
    return stats


def parser():
    """The command line (openai_client.py adds to it)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--proto", choices=["sse", "grpc"], required=True)
    ap.add_argument("--server", choices=["bare", "ours", "mlserver", "litserve"], required=True,
                    help="which gRPC answer message to expect; litserve: its own HTTP stream")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", default="stream")
    ap.add_argument("--count", type=int, default=1000, help="responses per stream")
    ap.add_argument("--conc", type=int, default=1, help="streams in flight")
    ap.add_argument("--duration", type=float, default=8, help="start streams for this many seconds")
    ap.add_argument("--streams", type=int, default=0, help="run exactly this many streams instead")
    ap.add_argument("--max-streams", type=int, default=100000, help="bound on streams in a timed run")
    ap.add_argument("--stream-timeout", type=float, default=30, help="seconds per stream")
    ap.add_argument("--stagger", action="store_true",
                    help="worker i's first stream asks for count x (i + 1) / conc responses, so that the workers' "
                         "streams end apart from then on, as independent clients' do; the first streams' time to "
                         "first response is not counted (they all begin together)")
    return ap


def main():
    args = parser().parse_args()
    print("STREAM_RESULT " + json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()

"""Feature-less Tornado + orjson + numpy "add-one" server: the benchmark ceiling.

Serves one model, ``addone`` (output = input + 1, same dtype), on:
  * KServe v1:   POST /v1/models/addone:predict   {"instances": ...} -> {"predictions": ...}
  * OIP v2 REST: POST /v2/models/addone/infer     JSON, or Triton's binary tensor
    extension (``Inference-Header-Content-Length``, ``binary_data_size``,
    ``binary_data_output`` / per-output ``binary_data``).
  * health:      GET /v2/health/live, /v2/health/ready, /v2/models/addone/ready, /v1/models/addone

No logging, no metrics, no validation beyond what is needed to answer correctly.

    python hack/bench/bare_tornado.py --port 8080 [--host 127.0.0.1]
"""

import argparse

import numpy as np
import orjson
import tornado.httpserver
import tornado.ioloop
import tornado.web

MODEL = "addone"
OUTPUT = "output-0"
HEADER_LEN = "Inference-Header-Content-Length"

DTYPES = {
    "BOOL": np.bool_,
    "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}
DTYPE_NAMES = {np.dtype(v): k for k, v in DTYPES.items()}
DUMPS_OPTS = orjson.OPT_SERIALIZE_NUMPY


class BadRequest(Exception):
    pass


class Base(tornado.web.RequestHandler):
    def set_default_headers(self):
        # Tornado adds Server/Date/Content-Type defaults; keep them minimal.
        self.clear_header("Server")

    def error(self, status, msg):
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(orjson.dumps({"error": msg}))


class Ready(Base):
    def get(self, *_):
        self.set_header("Content-Type", "application/json")
        self.finish(b'{"ready":true}')


class V1Predict(Base):
    def post(self):
        try:
            body = orjson.loads(self.request.body)
            arr = np.asarray(body["instances"]) + 1
        except Exception as e:  # noqa: BLE001 - any decode problem is a 400
            return self.error(400, f"bad v1 request: {e!r}")
        self.set_header("Content-Type", "application/json")
        self.finish(orjson.dumps({"predictions": arr}, option=DUMPS_OPTS))


def decode_v2(body, header_len):
    """Return (header_dict, [input ndarray]) for a JSON or binary-extension body."""
    if header_len is None:
        header, raw = orjson.loads(body), b""
    else:
        n = int(header_len)
        if n < 0 or n > len(body):
            raise BadRequest(f"{HEADER_LEN}={n} larger than body ({len(body)})")
        header, raw = orjson.loads(body[:n]), memoryview(body)[n:]
    arrays, offset = [], 0
    for inp in header.get("inputs") or ():
        dtype = DTYPES.get(inp.get("datatype"))
        if dtype is None:
            raise BadRequest(f"unsupported datatype {inp.get('datatype')!r}")
        shape = inp["shape"]
        size = (inp.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            if offset + size > len(raw):
                raise BadRequest("binary_data_size exceeds the body")
            arr = np.frombuffer(raw[offset:offset + size], dtype=dtype).reshape(shape)
            offset += size
        else:
            arr = np.asarray(inp["data"], dtype=dtype).reshape(shape)
        arrays.append(arr)
    if offset != len(raw):
        raise BadRequest(f"{len(raw) - offset} unread binary bytes")
    if not arrays:
        raise BadRequest("no inputs")
    return header, arrays


def wants_binary(header):
    binary = bool((header.get("parameters") or {}).get("binary_data_output", False))
    for out in header.get("outputs") or ():
        if out.get("name") == OUTPUT:
            binary = bool((out.get("parameters") or {}).get("binary_data", binary))
    return binary


class V2Infer(Base):
    def post(self):
        try:
            header, arrays = decode_v2(self.request.body, self.request.headers.get(HEADER_LEN))
        except (BadRequest, ValueError, KeyError, TypeError) as e:
            return self.error(400, f"bad v2 request: {e}")
        y = arrays[0] + arrays[0].dtype.type(1)
        out = {"name": OUTPUT, "datatype": DTYPE_NAMES[y.dtype], "shape": list(y.shape)}
        resp = {"model_name": MODEL, "outputs": [out]}
        if "id" in header:
            resp["id"] = header["id"]
        if wants_binary(header):
            out["parameters"] = {"binary_data_size": y.nbytes}
            js = orjson.dumps(resp)
            self.set_header("Content-Type", "application/octet-stream")
            self.set_header(HEADER_LEN, str(len(js)))
            self.finish(b"".join((js, memoryview(y).cast("B"))))  # one copy, no tobytes()
        else:
            out["data"] = y.reshape(-1)
            self.set_header("Content-Type", "application/json")
            self.finish(orjson.dumps(resp, option=DUMPS_OPTS))


def make_app():
    return tornado.web.Application([
        (r"/v2/health/(?:live|ready)", Ready),
        (rf"/v2/models/{MODEL}/ready", Ready),
        (rf"/v1/models/{MODEL}", Ready),
        (rf"/v1/models/{MODEL}:predict", V1Predict),
        (rf"/v2/models/{MODEL}/infer", V2Infer),
    ], log_function=lambda handler: None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    args = ap.parse_args()
    # the read size kserve_sdk uses (model_server.READ_CHUNK_BYTES): Tornado zeroes a buffer this big per read
    server = tornado.httpserver.HTTPServer(make_app(), max_body_size=256 << 20, chunk_size=16 * 1024)
    server.listen(args.port, address=args.host)
    tornado.ioloop.IOLoop.current().start()


if __name__ == "__main__":
    main()

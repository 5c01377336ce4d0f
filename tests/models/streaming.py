"""Streaming test models, written with the KServe-style API plus async-generator predict / predict_stream.

STREAM_MARKERS (a directory) is where "tokens" records that its generator was cancelled.
"""
import argparse
import asyncio
import os
import time

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse, model_server


def _text_response(model, request_id, text, index):
    out = InferOutput("text_output", [1], "BYTES")
    out.set_data_from_numpy(np.array([text.encode()], dtype=np.object_))
    idx = InferOutput("index", [1], "INT64")
    idx.set_data_from_numpy(np.array([index], dtype=np.int64))
    return InferResponse(response_id=request_id, model_name=model, infer_outputs=[out, idx])


class Tokens(kserve.Model):
    """Yields the words of its prompt one by one, every ``delay_ms`` (default 20) after a first ``gap_ms``."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload, headers=None):
        if isinstance(payload, InferRequest):
            prompt = payload.inputs[0].as_string()[0]
            params = payload.parameters or {}
        else:
            prompt, params = payload["text_input"], payload.get("parameters", {})
        words = prompt.split()[: int(params.get("max_tokens", 1000))]
        delay, gap = params.get("delay_ms", 20) / 1000, params.get("gap_ms", 0) / 1000
        try:
            for i, word in enumerate(words):
                text = word if i == 0 else " " + word
                if isinstance(payload, InferRequest):
                    yield _text_response(self.name, payload.id, text, i)
                else:
                    yield {"text_output": text, "index": i}
                await asyncio.sleep(gap if i == 0 and gap else delay)
        except (asyncio.CancelledError, GeneratorExit):
            marker_dir = os.environ.get("STREAM_MARKERS")
            if marker_dir:  # written then renamed, so the test never reads a half-written marker
                path = os.path.join(marker_dir, f"cancelled-{os.getpid()}-{time.time_ns()}")
                with open(path + ".tmp", "w") as f:
                    f.write(str(time.time()))
                os.replace(path + ".tmp", path)
            raise


class Broken(kserve.Model):
    """Yields two tokens, then fails."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload, headers=None):
        yield {"text_output": "one"}
        yield {"text_output": " two"}
        raise RuntimeError("the model broke mid-stream")


class Summer(kserve.Model):
    """Consumes a whole stream of requests and answers once with the sum of all their values."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    async def predict_stream(self, payloads):
        total, last_id = 0.0, None
        async for payload in payloads:
            total += float(payload.inputs[0].as_numpy().sum())
            last_id = payload.id
        out = InferOutput("sum", [1], "FP64")
        out.set_data_from_numpy(np.array([total]))
        yield InferResponse(response_id=last_id, model_name=self.name, infer_outputs=[out])


class Headered(kserve.Model):
    """Sets a response header before its first yield."""

    def __init__(self, name):
        super().__init__(name, return_response_headers=True)
        self.ready = True

    async def predict(self, payload, headers=None, response_headers=None):
        response_headers["x-stream-started"] = "yes"
        for word in ("a", "b"):
            yield {"text_output": word}


class Unary(kserve.Model):
    """An ordinary model: over streaming endpoints it answers once."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        if isinstance(payload, InferRequest):
            x = payload.inputs[0].as_numpy()
            out = InferOutput("doubled", list(x.shape), payload.inputs[0].datatype)
            out.set_data_from_numpy(x * 2)
            return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[out])
        return {"text_output": payload.get("text_input", "").upper()}


class Shouted(Tokens):
    """Tokens whose every streamed item goes through a (sync) postprocess that upper-cases its text."""

    def postprocess(self, result, headers=None):
        return {**result, "text_output": result["text_output"].upper()}


class ScaledSummer(Summer):
    """Summer with a preprocess (each request's values doubled) and a postprocess (the sum plus 0.5)."""

    async def preprocess(self, payload, headers=None):
        x = payload.inputs[0].as_numpy()
        payload.inputs[0].set_data_from_numpy(x * 2, binary_data=False)
        return payload

    def postprocess(self, result, headers=None):
        out = InferOutput("sum", [1], "FP64")
        out.set_data_from_numpy(result.outputs[0].as_numpy() + 0.5)
        return InferResponse(response_id=result.id, model_name=self.name, infer_outputs=[out])


class Flood(kserve.Model):
    """Yields ``count`` events of ``size`` characters as fast as it can, awaiting nothing; records in
    STREAM_MARKERS how many it had yielded when its generator was closed. With ``"together": [group, n]``
    it first waits (10 s at most) until n floods of that group have started, so they run side by side."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True
        self.groups = {}  # group name -> the events of the floods waiting in it

    async def _wait_for_group(self, group: str, size: int) -> None:
        waiting = self.groups.setdefault(group, [])
        arrived = asyncio.Event()
        waiting.append(arrived)
        if len(waiting) >= size:
            for event in self.groups.pop(group):
                event.set()
        await asyncio.wait_for(arrived.wait(), 10)

    async def predict(self, payload, headers=None):
        params = payload.get("parameters", {})
        text, yielded = "x" * int(params.get("size", 100)), 0
        if "together" in params:
            await self._wait_for_group(*params["together"])
        try:
            for i in range(int(params.get("count", 1000))):
                yield {"text_output": text, "index": i}
                yielded += 1
        finally:
            marker_dir = os.environ.get("STREAM_MARKERS")
            if marker_dir:
                path = os.path.join(marker_dir, f"flood-{os.getpid()}-{time.time_ns()}")
                with open(path + ".tmp", "w") as f:
                    f.write(str(yielded))
                os.replace(path + ".tmp", path)


class Clock(kserve.Model):
    """Yields ``count`` (default 20) events ``delay_ms`` (default 10) apart, each the wall-clock time it was
    yielded at."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload, headers=None):
        params = payload.get("parameters", {})
        for i in range(int(params.get("count", 20))):
            yield {"text_output": repr(time.time()), "index": i}
            await asyncio.sleep(params.get("delay_ms", 10) / 1000)


MODELS = {"tokens": Tokens, "broken": Broken, "summer": Summer, "headered": Headered, "unary": Unary,
          "shouted": Shouted, "scaled_summer": ScaledSummer, "flood": Flood, "clock": Clock}

if __name__ == "__main__":
    args, _ = argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
    kserve.ModelServer().start([cls(name) for name, cls in MODELS.items()])

"""Model classes the model-repository tests put in generated repositories (``"implementation":
"tests.models.repository_models:Echo"``). Each reads what it needs from its settings' ``parameters.extra``
(``self.settings_extra``); ``events``, when given, is a file each appends a line to when it loads
(``load <name> <version> <pid>``) and stops (``stop <name> <version> <pid>``), so a test counts loads in
every worker."""
import asyncio
import os
import time

from kserve_sdk import InferRequest, Model
from kserve_sdk.utils.utils import get_predict_response


def record(model: Model, event: str) -> None:
    """Append ``event <name> <version> <pid>`` to the model's ``events`` file, if it has one."""
    path = model.settings_extra.get("events")
    if path:
        with open(path, "a") as f:
            f.write(f"{event} {model.name} {model.version or '-'} {os.getpid()}\n")


class Echo(Model):
    """Answers who it is: v1 ``{"predictions": [name, version, pid]}``; v2 the input times its version's
    ``factor`` (its folder's ``factor.txt``, else 1)."""

    def load(self) -> bool:
        record(self, "load")
        path = os.path.join(self.model_dir, "factor.txt")
        self.factor = float(open(path).read()) if os.path.isfile(path) else 1.0
        self.ready = True
        return True

    def stop(self) -> None:
        record(self, "stop")
        super().stop()

    def predict(self, payload, headers=None):
        if isinstance(payload, InferRequest):
            return get_predict_response(payload, payload.inputs[0].as_numpy() * self.factor, self.name)
        return {"predictions": [self.name, self.version, os.getpid()]}


class Blocker(Echo):
    """Its v1 ``predict`` writes ``<started>.<request id>`` and waits (30 s at most) until the file ``release``
    (settings) exists: a call held in flight."""

    async def predict(self, payload, headers=None):
        extra = self.settings_extra
        with open(f"{extra['started']}.{payload.get('id', 'x')}", "w") as f:
            f.write("started")
        deadline = time.monotonic() + 30
        while not os.path.exists(extra["release"]) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return {"predictions": [self.name, "released"]}


class Sized(Echo):
    """Says it takes ``mb`` (settings) megabytes."""

    def memory_bytes(self) -> int:
        return int(self.settings_extra["mb"] * 2 ** 20)


class Flaky(Echo):
    """Its load fails unless the file ``ok`` (settings) exists."""

    def load(self) -> bool:
        record(self, "try")
        if not os.path.exists(self.settings_extra["ok"]):
            raise RuntimeError("the ok file is missing")
        return super().load()


class Streamer(Echo):
    """Streams ``count`` answers (a generate request's parameters; default 5) ``gap_ms`` apart (default 200), each
    ``{"text_output": "<tag>", "index": i, "stopped": bool}``: ``tag`` is its version folder's ``tag.txt`` as
    it loaded, ``stopped`` whether the server has stopped it meanwhile."""

    def load(self) -> bool:
        self.tag = open(os.path.join(self.model_dir, "tag.txt")).read().strip()
        self.stopped = False
        return super().load()

    def stop(self) -> None:
        self.stopped = True
        super().stop()

    async def predict(self, payload, headers=None):
        parameters = payload.get("parameters", {})
        for index in range(int(parameters.get("count", 5))):
            yield {"text_output": self.tag, "index": index, "stopped": self.stopped}
            await asyncio.sleep(parameters.get("gap_ms", 200) / 1000)

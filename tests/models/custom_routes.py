"""A server with routes of its own (ModelServer.route / add_route) and a task in ModelServer.servers, for
tests/test_kserve_server_parity.py.

Routes: ``GET /hello`` (JSON, the query's ``name``), ``POST /echo/<word>`` (the JSON body back, 201, a header),
``GET /boom`` (raises RuntimeError), ``GET /refuse`` (raises InvalidInput), ``GET /sync`` (a plain function:
the thread it ran on and the worker's pid), ``GET /text`` (a RouteResponse of text), ``GET /slow`` (answers after
SLOW_SECONDS, for the drain), ``GET|PUT /handler/<rest>`` (a BaseHandler subclass). ``servers`` holds a
coroutine that logs "background task ticks" and runs until the server stops, and with ROUTES_FAIL set one that
raises "background task broke" after a moment. Model ``doubler`` doubles v1 instances.
"""
import asyncio
import os
import threading

import kserve_sdk as kserve
from kserve_sdk.errors import InvalidInput
from kserve_sdk.handlers.base import BaseHandler
from kserve_sdk.handlers.custom_routes import RouteRequest, RouteResponse
from kserve_sdk.logging import logger

SLOW_SECONDS = float(os.environ.get("SLOW_SECONDS", "2"))


class Doubler(kserve.Model):
    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload, headers=None):
        return {"predictions": [2 * x for x in payload["instances"]]}


class Greeting(BaseHandler):
    """A Tornado handler of the script's own: ``GET`` and ``PUT`` of ``/handler/<rest>``."""

    def get(self, rest: str) -> None:
        self.send_json({"handler": rest, "request_id": self.request_headers()["x-request-id"]})

    def put(self, rest: str) -> None:
        raise InvalidInput(f"cannot put {rest}")


async def ticking() -> None:
    logger.info("background task ticks")
    while True:
        await asyncio.sleep(3600)


async def breaking() -> None:
    await asyncio.sleep(0.5)
    raise RuntimeError("background task broke")


if __name__ == "__main__":
    server = kserve.ModelServer()

    @server.route("/hello", methods=["GET"])
    async def hello(request: RouteRequest) -> dict:
        return {"hello": request.query.get("name", "world")}

    @server.route("/echo/([a-z]+)", methods=["POST"])
    async def echo(request: RouteRequest, word: str) -> RouteResponse:
        return RouteResponse({"word": word, "body": request.json()}, status=201, headers={"x-echo": word})

    @server.route("/boom")
    async def boom() -> dict:
        raise RuntimeError("the route broke")

    @server.route("/refuse")
    def refuse() -> dict:
        raise InvalidInput("this route refuses")

    @server.route("/sync")
    def sync() -> dict:
        return {"thread": threading.current_thread().name, "pid": os.getpid()}

    @server.route("/text", name="plain_text")
    async def text() -> RouteResponse:
        return RouteResponse("just text", content_type="text/plain; charset=utf-8")

    @server.route("/slow")
    async def slow() -> str:
        await asyncio.sleep(SLOW_SECONDS)
        return "done"

    server.add_route("/handler/(.*)", Greeting)
    server.servers.append(ticking())
    if os.environ.get("ROUTES_FAIL"):
        server.servers.append(breaking())
    server.start([Doubler("doubler")])

"""The server's own routes: ``GET /`` (the process is alive) and ``GET /metrics`` (Prometheus)."""
import asyncio

from .. import metrics
from .api import RestAPI
from .base import BaseHandler


class LiveHandler(BaseHandler):
    """``GET /``: the process is alive."""

    protocol, endpoint = "rest_v1", "live"

    async def get(self) -> None:
        self.send_json(await self.dataplane.live())


class MetricsHandler(BaseHandler):
    """``GET /metrics``: Prometheus metrics of every worker, in the format the scraper asks for."""

    endpoint = "metrics"

    async def get(self) -> None:
        # On a thread: the event loop goes on serving while a large scrape is written.
        body, content_type = await asyncio.get_running_loop().run_in_executor(
            None, metrics.render, self.request.headers.get("Accept"))
        self.send_body(body, content_type)


#: The server's own routes: liveness at ``/`` and the Prometheus metrics, neither ever traced.
API = RestAPI("server", [(r"/", LiveHandler), (r"/metrics", MetricsHandler)], untraced=("live", "metrics"))

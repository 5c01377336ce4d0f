"""The HTTP route table: which handler answers which path, and the per-request access log and metrics."""
import logging
from typing import Any, Dict, Optional

from tornado.web import Application, RequestHandler

from .. import metrics
from ..dataplane import DataPlane
from ..logging import ACCESS_LOGGER_NAME
from . import docs, streaming, v1, v2
from .base import LiveHandler, MetricsHandler, NotFoundHandler

access_logger = logging.getLogger(ACCESS_LOGGER_NAME)

#: The default ``--access_log_format``. Fields: client, method, path, query, status, bytes,
#: duration_ms, request_id, protocol, endpoint, model, http_version, user_agent.
DEFAULT_ACCESS_LOG_FORMAT = '%(client)s "%(method)s %(path)s HTTP/%(http_version)s" %(status)s %(bytes)s %(duration_ms).3fms'


def access_log_fields(handler: RequestHandler, model: str, duration: float) -> Dict[str, Any]:
    """The named fields an access log format can use."""
    request = handler.request
    return {
        "client": request.remote_ip, "method": request.method, "path": request.path, "query": request.query,
        "status": handler.get_status(), "bytes": handler._headers.get("Content-Length", "-"),
        "duration_ms": duration * 1000, "request_id": handler._headers.get("x-request-id", "-"),
        "protocol": handler.protocol, "endpoint": handler.endpoint, "model": model or "-",
        "http_version": request.version.rpartition("/")[2], "user_agent": request.headers.get("User-Agent", "-"),
    }


def request_logger(dataplane: DataPlane, access_log_format: Optional[str]):
    """Tornado's ``log_function``: one access line and the request metrics, for every request."""
    fmt = access_log_format or DEFAULT_ACCESS_LOG_FORMAT

    def log_request(handler: RequestHandler) -> None:
        duration = handler.request.request_time()
        protocol = getattr(handler, "protocol", "rest_v2")
        model = dataplane.model_label(handler.path_args[0]) if handler.path_args else ""
        metrics.request_finished(model, protocol, getattr(handler, "endpoint", "other"),
                                 str(handler.get_status()), duration, started=getattr(handler, "in_flight_counted", False))
        if access_logger.isEnabledFor(logging.INFO):
            try:
                access_logger.info(fmt, access_log_fields(handler, model, duration))
            except (KeyError, ValueError, TypeError) as e:
                access_logger.info("bad --access_log_format %r: %s", fmt, e)

    return log_request

_MODEL = r"([^/]+?)"
_VERSION = r"(?:/versions/([^/]+))?"


def make_app(dataplane: DataPlane, access_log_format: Optional[str] = None, enable_docs_url: bool = False,
             enable_gzip: bool = True, max_body_size: Optional[int] = None,
             **settings: Any) -> Application:
    """A Tornado application serving KServe v1 and Open Inference Protocol v2 REST."""
    ctx: Dict[str, Any] = {"dataplane": dataplane}
    routes = [
        (r"/", LiveHandler),
        (r"/metrics", MetricsHandler),
        (r"/v1/models", v1.ListModelsHandler),
        (rf"/v1/models/{_MODEL}:predict", v1.PredictHandler),
        (rf"/v1/models/{_MODEL}:explain", v1.ExplainHandler),
        (rf"/v1/models/{_MODEL}", v1.ModelReadyHandler),
        (r"/v2", v2.ServerMetadataHandler),
        (r"/v2/health/live", v2.ServerLiveHandler),
        (r"/v2/health/ready", v2.ServerReadyHandler),
        (r"/v2/models", v2.ListModelsHandler),
        (rf"/v2/models/{_MODEL}{_VERSION}/infer", v2.InferHandler),
        (rf"/v2/models/{_MODEL}{_VERSION}/infer_stream", streaming.InferStreamHandler),
        (rf"/v2/models/{_MODEL}{_VERSION}/generate", streaming.GenerateHandler),
        (rf"/v2/models/{_MODEL}{_VERSION}/generate_stream", streaming.GenerateStreamHandler),
        (rf"/v2/models/{_MODEL}{_VERSION}/ready", v2.ModelReadyHandler),
        (rf"/v2/models/{_MODEL}{_VERSION}", v2.ModelMetadataHandler),
        (r"/v2/repository/index", v2.RepositoryIndexHandler),
        (rf"/v2/repository/models/{_MODEL}/(load|unload)", v2.RepositoryHandler),
        (r"/openapi\.json", docs.OpenAPIHandler),
        *docs.docs_routes(enable_docs_url),
    ]
    return Application(
        [(path, handler, ctx) for path, handler in routes],
        default_handler_class=NotFoundHandler,
        default_handler_args=ctx,
        compress_response=enable_gzip,
        log_function=request_logger(dataplane, access_log_format),
        max_body_size=max_body_size,
        **settings,
    )

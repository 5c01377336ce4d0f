"""The HTTP route table: which handler answers which path."""
from typing import Any, Dict

from tornado.web import Application

from ..dataplane import DataPlane
from . import v1, v2
from .base import LiveHandler, NotFoundHandler

_MODEL = r"([^/]+?)"
_VERSION = r"(?:/versions/([^/]+))?"


def make_app(dataplane: DataPlane, **settings: Any) -> Application:
    """A Tornado application serving KServe v1 and Open Inference Protocol v2 REST."""
    ctx: Dict[str, Any] = {"dataplane": dataplane}
    routes = [
        (r"/", LiveHandler),
        (r"/v1/models", v1.ListModelsHandler),
        (rf"/v1/models/{_MODEL}:predict", v1.PredictHandler),
        (rf"/v1/models/{_MODEL}:explain", v1.ExplainHandler),
        (rf"/v1/models/{_MODEL}", v1.ModelReadyHandler),
        (r"/v2", v2.ServerMetadataHandler),
        (r"/v2/health/live", v2.ServerLiveHandler),
        (r"/v2/health/ready", v2.ServerReadyHandler),
        (r"/v2/models", v2.ListModelsHandler),
        (rf"/v2/models/{_MODEL}{_VERSION}/infer", v2.InferHandler),
        (rf"/v2/models/{_MODEL}{_VERSION}/ready", v2.ModelReadyHandler),
        (rf"/v2/models/{_MODEL}{_VERSION}", v2.ModelMetadataHandler),
        (rf"/v2/repository/models/{_MODEL}/(load|unload)", v2.RepositoryHandler),
    ]
    return Application(
        [(path, handler, ctx) for path, handler in routes],
        default_handler_class=NotFoundHandler,
        default_handler_args=ctx,
        compress_response=False,
        **settings,
    )

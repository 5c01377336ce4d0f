"""REST APIs plug in (kserve_sdk/handlers/api.py): ``make_app`` serves the list of APIs it is given, in order, and
names none of them; a 413 is labelled and shaped by the API whose route matches; the untraced endpoints are what
the APIs declare."""
import ast
import json
import os

import pytest
from tornado import httputil

from kserve_sdk import tracing
from kserve_sdk.dataplane import DataPlane
from kserve_sdk.handlers import http as http_app
from kserve_sdk.handlers.api import Options, RestAPI, RouteTable
from kserve_sdk.handlers.base import BaseHandler, NotFoundHandler
from kserve_sdk.handlers.fast_path import FastInferenceDelegate
from kserve_sdk.handlers.responder import error_document
from kserve_sdk.model_repository import ModelRepository
from kserve_sdk.model_server import REST_APIS
from kserve_sdk.openai import api as openai_api
from kserve_sdk.triton import api as triton_api

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Connection:
    context = None

    def set_close_callback(self, callback):
        pass


def _request(path: str, method: str = "GET") -> httputil.HTTPServerRequest:
    start = httputil.RequestStartLine(method, path, "HTTP/1.1")
    return httputil.HTTPServerRequest(start_line=start, headers=httputil.HTTPHeaders({"Host": "h"}),
                                      connection=_Connection())


def _routed(app, path: str, method: str = "GET"):
    delegate = app.find_handler(_request(path, method))
    return getattr(delegate, "handler_class", type(delegate))


# --- a small API of a test's own --------------------------------------------------------------------------------
class Colours(BaseHandler):
    protocol, endpoint = "paint", "colours"


class Colour(BaseHandler):
    protocol, endpoint = "paint", "colour"


class Mix(BaseHandler):
    protocol, endpoint = "paint", "mix"

    @staticmethod
    def fast_answer(dataplane, name):
        async def answer(call, body, headers):
            raise AssertionError("not called here")

        return answer


def paint_document(status: int, message: str) -> bytes:
    return json.dumps({"paint_error": message, "code": status}).encode()


PAINT = RestAPI("paint", [(r"/paint", Colours), (r"/paint/([^/]+)/mix", Mix), (r"/paint/([^/]+)", Colour)],
                paint_document, untraced=("colours",))
BRUSH = RestAPI("brush", lambda options: [(r"/brush", Colours)] if options.enable_docs_url else [])


def test_make_app_routes_each_declared_path_to_its_handler():
    app = http_app.make_app(DataPlane(ModelRepository()), [PAINT, BRUSH])
    assert _routed(app, "/paint") is Colours and app.exact == {"/paint": Colours}
    assert _routed(app, "/paint/red") is Colour
    assert _routed(app, "/paint/red/mix") is Mix  # a GET: its RequestHandler answers it (and refuses the method)
    assert _routed(app, "/paint/red/mix", "POST") is FastInferenceDelegate  # a handler with a fast_answer
    assert _routed(app, "/brush") is NotFoundHandler  # its routes are a function of the options: none here
    assert _routed(app, "/v2/health/live") is NotFoundHandler  # only the APIs given are served
    with_option = http_app.make_app(DataPlane(ModelRepository()), [PAINT, BRUSH], enable_docs_url=True)
    assert _routed(with_option, "/brush") is Colours


def test_a_413_is_labelled_and_shaped_by_the_first_api_whose_route_matches():
    table = RouteTable([PAINT, RestAPI("other", [(r"/paint/([^/]+)", BaseHandler)])], Options(), NotFoundHandler)
    assert table.answer_for("/paint") == (("paint", "colours", None), paint_document)
    assert table.answer_for("/paint/red") == (("paint", "colour", "red"), paint_document)
    assert table.answer_for("/paint/red/mix") == (("paint", "mix", "red"), paint_document)
    assert table.answer_for("/nowhere") == (("rest_v2", "other", None), error_document)
    assert [pattern for pattern, _, _ in table.fast_routes()] == [r"/paint/([^/]+)/mix"]
    assert table.fast_routes()[0][2] is paint_document  # the fast path answers failures in the API's shape


@pytest.mark.parametrize("prefix", ["/openai", ""])
def test_the_servers_apis_label_and_shape_a_413_as_their_routes_answer(monkeypatch, prefix):
    monkeypatch.setenv("KSERVE_OPENAI_ROUTE_PREFIX", prefix)
    table = RouteTable(REST_APIS, Options(), NotFoundHandler)
    assert table.answer_for("/v1/models/m:predict") == (("rest_v1", "predict", "m"), error_document)
    assert table.answer_for("/v2/models/m/versions/2/infer") == (("rest_v2", "infer", "m"), error_document)
    assert table.answer_for("/v2/models/stats")[0] == ("rest_v2", "model_statistics", None)
    assert table.answer_for(f"{prefix}/v1/chat/completions") == (("openai", "chat_completions", None),
                                                                 openai_api.error_document)
    # /v1/models is KServe v1's under an empty prefix, OpenAI's under its own
    assert table.answer_for(f"{prefix}/v1/models")[0][0] == ("openai" if prefix else "rest_v1")


#: (path, method, handler) the server's table must keep: the order of the APIs and of their routes matters
SERVER_ROUTES = [
    ("/", "GET", "LiveHandler"), ("/metrics", "GET", "MetricsHandler"), ("/v1/models", "GET", "ListModelsHandler"),
    ("/v1/models/m", "GET", "ModelReadyHandler"), ("/v1/models/m:predict", "GET", "PredictHandler"),
    ("/v1/models/m:explain", "GET", "ExplainHandler"), ("/v2", "GET", "ServerMetadataHandler"),
    ("/v2/models/stats", "GET", "ModelStatisticsHandler"), ("/v2/models/m/stats", "GET", "ModelStatisticsHandler"),
    ("/v2/models/m/versions/1/stats", "GET", "ModelStatisticsHandler"),
    ("/v2/models/m", "GET", "ModelMetadataHandler"), ("/v2/models/m/versions/stats", "GET", "ModelMetadataHandler"),
    ("/v2/models/stats/ready", "GET", "ModelReadyHandler"), ("/v2/models/m/config", "GET", "ModelConfigHandler"),
    ("/v2/models/m/trace/setting", "GET", "TraceSettingHandler"), ("/v2/trace/setting", "GET", "TraceSettingHandler"),
    ("/v2/models/m/infer", "GET", "InferHandler"), ("/v2/models/m/infer", "POST", "FastInferenceDelegate"),
    ("/v2/models/m/infer_stream", "POST", "InferStreamHandler"), ("/v2/models/m/generate", "POST", "GenerateHandler"),
    ("/v2/models/m/generate_stream", "POST", "GenerateStreamHandler"), ("/v2/logging", "GET", "LoggingHandler"),
    ("/v2/repository/index", "GET", "RepositoryIndexHandler"),
    ("/v2/repository/models/m/load", "POST", "RepositoryHandler"),
    ("/v2/systemsharedmemory/region/r/register", "POST", "SharedMemoryRegisterHandler"),
    ("/v1/timeseries/forecast", "POST", "ForecastHandler"), ("/openai/v1/completions", "POST", "CompletionsHandler"),
    ("/openai/v1/models/m", "GET", "ModelsHandler"), ("/openai/elsewhere", "GET", "UnknownPathHandler"),
    ("/openapi.json", "GET", "OpenAPIHandler"), ("/v3/nothing", "GET", "NotFoundHandler"),
]


@pytest.mark.parametrize("path,method,handler", SERVER_ROUTES)
def test_the_servers_list_routes_each_path_where_it_always_went(monkeypatch, path, method, handler):
    monkeypatch.setenv("KSERVE_OPENAI_ROUTE_PREFIX", "/openai")
    app = http_app.make_app(DataPlane(ModelRepository()), REST_APIS)
    assert _routed(app, path, method).__name__ == handler


def test_the_triton_extensions_are_their_own_api_before_v2():
    names = [api.name for api in REST_APIS]
    assert names.index("triton") < names.index("v2") and triton_api.API in REST_APIS


def test_the_untraced_endpoints_are_what_the_apis_declare():
    http_app.make_app(DataPlane(ModelRepository()), [*REST_APIS, PAINT])
    assert {"live", "ready", "model_ready", "metrics", "other", "trace_setting", "colours"} <= tracing.untraced
    assert not {"infer", "predict", "model_metadata", "completions"} & tracing.untraced


def _imported_modules(path: str, package: str) -> set:
    """The dotted names a module's import statements name (relative ones resolved against ``package``)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            names |= {source} | {f"{source}.{alias.name}" for alias in node.names}
    return names


@pytest.mark.parametrize("module", ["http", "fast_path"])
def test_the_application_names_no_api_module(module):
    imported = _imported_modules(os.path.join(ROOT, "kserve_sdk", "handlers", f"{module}.py"), "kserve_sdk.handlers")
    api_modules = {handler.__module__ for api in REST_APIS for _, handler in api.routes(Options(True))}
    assert "kserve_sdk.handlers.v2" in api_modules and "kserve_sdk.openai.api" in api_modules
    assert "kserve_sdk.handlers.v2" in _imported_modules(os.path.join(ROOT, "kserve_sdk", "model_server.py"),
                                                         "kserve_sdk")  # the check sees a relative import
    assert imported & api_modules == set()
    assert not [name for name in imported if name.startswith(("kserve_sdk.openai", "kserve_sdk.timeseries",
                                                              "kserve_sdk.triton"))]

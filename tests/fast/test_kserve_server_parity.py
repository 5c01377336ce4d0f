"""KServe 0.21's server-side names, called in process as KServe's own source and docs call them: DataPlane's
coroutine methods (``infer``, ``explain``, ``get_model``) beside the plain ``get_model_from_registry``,
``model_ready(model_name=...)`` / ``model_metadata(model_name=...)``, the served models an unknown name's 404
lists, ``ModelServer.servers``, and what ``ModelServer.add_route`` refuses."""
import asyncio
import inspect
import json
from typing import Any

import pytest
from tornado.web import RequestHandler

from kserve_sdk.dataplane import DataPlane
from kserve_sdk.errors import ModelNotFound
from kserve_sdk.handlers.base import BaseHandler
from kserve_sdk.handlers.custom_routes import CustomRoutes, RouteRequest
from kserve_sdk.model import Model
from kserve_sdk.model_repository import ModelRepository
from kserve_sdk.protocol.dataplane import DataPlane as KServePathDataPlane
from kserve_sdk.repository.options import RepositoryOptions

UNKNOWN = "Request for unknown model: 'nope' is not found. Model with name nope does not exist."


class Scaler(Model):
    """predict doubles the instances; explain names the largest."""

    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True

    def get_input_types(self):
        return [{"name": "x", "datatype": "FP32", "shape": [-1]}]

    async def predict(self, payload, headers=None):
        return {"predictions": [2 * x for x in payload["instances"]]}

    async def explain(self, payload, headers=None):
        return {"explanations": [max(payload["instances"])]}


def plane(*names: str) -> DataPlane:
    repository = ModelRepository()
    for name in names:
        repository.update(Scaler(name))
    return DataPlane(repository, enable_latency_logging=False)


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


# --- DataPlane, as KServe's routes and servicer call it --------------------------------------------------------
def test_infer_explain_and_get_model_are_coroutine_functions_as_in_kserve():
    for name in ("infer", "explain", "get_model", "model_ready", "model_metadata"):
        assert inspect.iscoroutinefunction(getattr(DataPlane, name)), name
    assert not inspect.iscoroutinefunction(DataPlane.get_model_from_registry)
    assert KServePathDataPlane is DataPlane


def test_kserve_style_calls_of_the_data_plane():
    dataplane = plane("scaler")

    async def as_kserve_calls_it():
        model = await dataplane.get_model("scaler")
        assert model is dataplane.get_model_from_registry("scaler")
        predicted = await dataplane.infer(model_name="scaler", request={"instances": [1, 2]}, headers={})
        explained = await dataplane.explain("scaler", {"instances": [1, 5, 3]}, {})
        ready = (await dataplane.model_ready(model_name="scaler"), await dataplane.model_ready("scaler", True))
        metadata = await dataplane.model_metadata(model_name="scaler")
        return predicted, explained, ready, metadata

    predicted, explained, ready, metadata = run(as_kserve_calls_it())
    assert predicted == ({"predictions": [2, 4]}, {})
    assert explained == ({"explanations": [5]}, {})
    assert ready == (True, True)
    assert metadata == {"name": "scaler", "versions": [], "platform": "",
                        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1]}], "outputs": []}


@pytest.mark.parametrize("call", ["get_model", "model_ready", "model_metadata", "infer"])
def test_an_unknown_name_is_model_not_found_from_each(call):
    dataplane = plane("scaler")
    args = ("nope", {"instances": [1]}) if call == "infer" else ("nope",)
    with pytest.raises(ModelNotFound) as caught:
        run(getattr(dataplane, call)(*args))
    assert str(caught.value) == f"{UNKNOWN} Models served: scaler."
    with pytest.raises(ModelNotFound):
        dataplane.get_model_from_registry("nope")


def test_get_model_loads_a_lazy_repository_model_where_get_model_from_registry_does_not(tmp_path, monkeypatch):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))  # statistics counters in files, as served
    folder = tmp_path / "repo" / "lazy"
    folder.mkdir(parents=True)
    (folder / "model-settings.json").write_text(json.dumps({"name": "lazy", "implementation": "model.Lazy"}))
    (folder / "model.py").write_text("from kserve_sdk import Model\n\n\nclass Lazy(Model):\n"
                                     "    def load(self):\n        self.ready = True\n        return True\n")
    dataplane = DataPlane(ModelRepository())
    dataplane.open_repository(RepositoryOptions(str(tmp_path / "repo"), "lazy"))

    async def scenario():
        dataplane.start_repository()
        with pytest.raises(Exception) as not_loaded:
            dataplane.get_model_from_registry("lazy")
        model = await dataplane.get_model("lazy")
        return not_loaded.value, model, dataplane.get_model_from_registry("lazy")

    not_loaded, model, afterwards = run(scenario())
    assert "lazy" in str(not_loaded) and "not ready" in str(not_loaded), not_loaded
    assert type(model).__name__ == "Lazy" and model.ready and afterwards is model


# --- the 404 of an unknown model names what is served -----------------------------------------------------------
@pytest.mark.parametrize("names,listed", [
    ((), "none"),
    (("b", "a", "c"), "a, b, c"),
    (tuple(f"m{i:02}" for i in range(11, -1, -1)), "m00, m01, m02, m03, m04, m05, m06, m07, m08, m09 and 2 more"),
], ids=["none", "three", "twelve"])
def test_the_unknown_model_error_names_up_to_ten_served_models(names, listed):
    error = plane(*names).unknown_model("nope")
    assert isinstance(error, ModelNotFound) and str(error) == f"{UNKNOWN} Models served: {listed}."


# --- ModelServer.servers and add_route ---------------------------------------------------------------------------
def test_model_server_has_kserves_servers_list():
    from kserve_sdk.model_server import ModelServer

    server = ModelServer(enable_grpc=False)
    assert server.servers == [] and isinstance(server.servers, list)


class PlainTornado(RequestHandler):
    def get(self) -> None:
        self.write("x")


class Ours(BaseHandler):
    def get(self) -> None:
        self.send_json({})


def two_groups(request: RouteRequest, first: str, second: str) -> dict:
    return {}


def only_one(request: RouteRequest, first: str) -> dict:
    return {}


@pytest.mark.parametrize("path,handler,methods,error,message", [
    ("hello", two_groups, None, ValueError, "a route's path must start with '/': 'hello'"),
    ("/(unclosed", two_groups, None, ValueError, "the route path '/(unclosed' is not a valid regular expression"),
    ("/x", lambda: {}, ["FETCH"], ValueError,
     "a route's methods are among DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT; got ['FETCH']"),
    ("/x/(a)/(b)", only_one, None, TypeError, "route function only_one must take no arguments, or the request then "
                                              "one argument per group of its path '/x/(a)/(b)' (2)"),
    ("/x", PlainTornado, None, TypeError, "got a plain tornado RequestHandler"),
    ("/x", Ours, ["GET"], TypeError, "methods are for a route function"),
    ("/x", "not callable", None, TypeError, "a route's handler is a function or a BaseHandler subclass; got "
                                            "'not callable'"),
], ids=["relative", "bad-regex", "unknown-method", "arity", "plain-tornado", "class-with-methods", "not-callable"])
def test_add_route_refuses_what_it_cannot_serve(path, handler, methods, error, message):
    with pytest.raises(error) as caught:
        CustomRoutes().add(path, handler, methods)
    assert message in str(caught.value), str(caught.value)


def test_a_route_is_added_once_and_before_start():
    from kserve_sdk.model_server import ModelServer

    server = ModelServer(enable_grpc=False)

    @server.route("/x/([a-z]+)/([0-9]+)", methods=["get", "POST"])
    def two(request, word, number):
        return {}

    assert two.__name__ == "two"  # the decorator gives the function back
    server.add_route("/ours", Ours)
    with pytest.raises(ValueError, match="the route '/ours' is added twice"):
        server.add_route("/ours", Ours)
    routes = CustomRoutes()
    routes.add("/a", lambda: {})
    (api,) = routes.apis()
    (path, handler), = api.routes(None)
    assert path == "/a" and (handler.protocol, handler.endpoint) == ("custom", "<lambda>")
    with pytest.raises(RuntimeError, match=r"routes are added before ModelServer.start\(\)"):
        routes.add("/b", lambda: {})

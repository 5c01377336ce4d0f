"""The route table's plain paths, looked up in one dict (handlers/http.py, exact_routes), answer with the
handler Tornado's own router would pick for them."""
import pytest
from tornado import httputil

from kserve_sdk.dataplane import DataPlane
from kserve_sdk.handlers import http as http_routes
from kserve_sdk.model_repository import ModelRepository
from kserve_sdk.model_server import REST_APIS


class _Connection:
    context = None

    def set_close_callback(self, callback):
        pass


def _request(path: str) -> httputil.HTTPServerRequest:
    start = httputil.RequestStartLine("GET", path, "HTTP/1.1")
    return httputil.HTTPServerRequest(start_line=start, headers=httputil.HTTPHeaders({"Host": "h"}),
                                      connection=_Connection())


def test_a_plain_path_is_exact_unless_a_route_before_it_matches_it():
    A, B, C, D, E = (type(name, (), {}) for name in "ABCDE")

    table = [(r"/a/([^/]+)", A), (r"/a/b", B), (r"/c", C), (r"/c", D), (r"/d\.json", E), (r"/e/(x|y)", A)]
    assert http_routes.exact_routes(table) == {"/c": C, "/d.json": E}


@pytest.mark.parametrize("prefix", ["/openai", ""])
def test_every_exact_path_goes_where_tornados_router_sends_it(monkeypatch, prefix):
    """With the OpenAI API under its prefix and at the root (where its /v1/models follows KServe's)."""
    monkeypatch.setenv("KSERVE_OPENAI_ROUTE_PREFIX", prefix)
    app = http_routes.make_app(DataPlane(ModelRepository()), REST_APIS, enable_docs_url=True)
    assert "/v2/health/ready" in app.exact and f"{prefix}/v1/chat/completions" in app.exact
    for path, handler in app.exact.items():
        routed = app.default_router.find_handler(_request(path))
        assert routed is not None and routed.handler_class is handler, path
        assert app.find_handler(_request(path)).handler_class is handler, path

"""The clients' KServe surface that needs no server: ``USE_CLIENT_DEFAULT``, the gRPC ``infer`` signature,
httpx-style settings turned into aiohttp's, the errors that are KServe's types and ours, and the calls
refused before anything is sent (tests/test_kserve_clients.py calls a real server)."""
import asyncio
import inspect
import ssl
import sys

import aiohttp
import certifi
import grpc
import httpx
import numpy as np
import pytest
from multidict import CIMultiDict

from kserve_sdk.clients.defaults import is_client_default
from kserve_sdk.clients.forward import passed_on
from kserve_sdk.clients.grpc import _channel_options, kserve_error, request_message
from kserve_sdk.clients.http_errors import attach_exchange, kserve_type
from kserve_sdk.clients.rest import _as_httpx_gives_them
from kserve_sdk.clients.rest_config import auth_headers, client_timeout, ssl_setting
from kserve_sdk.errors import InvalidInput, UnsupportedProtocol, UpstreamError
from kserve_sdk.inference_client import (
    USE_CLIENT_DEFAULT,
    InferenceGRPCClient,
    InferenceRESTClient,
    RESTConfig,
    _UseClientDefault,
)
from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve_sdk.protocol.infer_type import InferInput, InferRequest


def parameters(function) -> list:
    return [(p.name, p.default) for p in inspect.signature(function).parameters.values()]


# --- names and signatures ---------------------------------------------------------------------------------------
def test_use_client_default_is_where_kserve_has_it():
    assert isinstance(USE_CLIENT_DEFAULT, _UseClientDefault)
    assert is_client_default(USE_CLIENT_DEFAULT) and is_client_default(httpx.USE_CLIENT_DEFAULT)
    assert not is_client_default(None) and not is_client_default(5)
    for method in ("infer", "is_server_ready", "is_server_live", "is_model_ready"):
        assert dict(parameters(getattr(InferenceGRPCClient, method)))["timeout"] is USE_CLIENT_DEFAULT, method
        assert dict(parameters(getattr(InferenceRESTClient, method)))["timeout"] is USE_CLIENT_DEFAULT, method


def test_grpc_infer_takes_kserves_parameters_and_no_model_name():
    empty = inspect.Parameter.empty
    assert parameters(InferenceGRPCClient.infer) == [("self", empty), ("infer_request", empty),
                                                     ("timeout", USE_CLIENT_DEFAULT), ("headers", None)]


def test_grpc_request_message_names_the_model_only_when_the_request_does_not():
    tensor = InferInput("x", [1], "FP32")
    tensor.set_data_from_numpy(np.array([1], dtype=np.float32))
    assert request_message(InferRequest(model_name="", infer_inputs=[tensor]), "fallback").model_name == "fallback"
    assert request_message(InferRequest(model_name="own", infer_inputs=[tensor]), "fallback").model_name == "own"
    message = pb.ModelInferRequest(model_name="")
    assert request_message(message, "fallback") is message and message.model_name == "fallback"
    with pytest.raises(InvalidInput, match="^Invalid input format$"):
        request_message({"inputs": []})  # type: ignore[arg-type]


# --- httpx-style settings -------------------------------------------------------------------------------------
@pytest.mark.parametrize("given, expected", [
    (60, aiohttp.ClientTimeout(total=60)),
    (None, aiohttp.ClientTimeout(total=None)),
    (httpx.Timeout(5), aiohttp.ClientTimeout(total=None, connect=5, sock_connect=5, sock_read=5)),
    (httpx.Timeout(5, connect=1, pool=None), aiohttp.ClientTimeout(total=None, connect=None, sock_connect=1,
                                                                   sock_read=5)),
    ((1, 2, 3, 4), aiohttp.ClientTimeout(total=None, connect=4, sock_connect=1, sock_read=2)),
], ids=["seconds", "none", "httpx.Timeout", "httpx.Timeout-phases", "httpx-tuple"])
def test_timeouts_as_aiohttp_takes_them(given, expected):
    assert client_timeout(given) == expected
    assert RESTConfig(timeout=given).timeout is given


@pytest.mark.parametrize("kwargs, message", [
    ({"transport": object()}, "RESTConfig(transport=...) takes an httpx transport, which this client (built on "
                              "aiohttp) cannot use; leave it out"),
    ({"timeout": "soon"}, "timeout must be seconds, None, an httpx.Timeout or a (connect, read, write, pool) "
                          "tuple, not 'soon'"),
    ({"auth": object()}, "auth must be (user, password) or an httpx.BasicAuth, not object"),
])
def test_rest_config_refuses_what_it_cannot_use(kwargs, message):
    with pytest.raises(TypeError) as refused:
        RESTConfig(**kwargs)
    assert str(refused.value) == message


@pytest.mark.parametrize("auth", [("user", "pass"), (b"user", b"pass"), httpx.BasicAuth("user", "pass")],
                         ids=["tuple", "bytes", "httpx"])
def test_auth_becomes_the_authorization_header(auth):
    assert auth_headers(auth) == {"Authorization": "Basic dXNlcjpwYXNz"}  # base64 of user:pass
    signed = next(httpx.BasicAuth("usér", "p").sync_auth_flow(httpx.Request("GET", "http://h/")))
    assert auth_headers(("usér", "p")) == {"Authorization": signed.headers["Authorization"]}  # UTF-8, as httpx


def test_verify_as_kserve_takes_it():
    context = ssl.create_default_context()
    assert ssl_setting(True, None) is True and ssl_setting(False, None) is False
    assert ssl_setting(context, None) is context
    bundle = ssl_setting(certifi.where(), None)  # a CA bundle file, as KServe's docs pass it
    assert isinstance(bundle, ssl.SSLContext) and bundle.verify_mode == ssl.CERT_REQUIRED
    assert bundle.cert_store_stats()["x509_ca"] > 0


# --- the calls refused before anything is sent ---------------------------------------------------------------
@pytest.mark.parametrize("protocol, call, error, message", [
    ("v1", lambda c: c.infer("http://127.0.0.1:1", {}), ValueError, "model_name should not be 'None'"),
    ("v3", lambda c: c.infer("http://127.0.0.1:1", {}, model_name="m"), UnsupportedProtocol,
     "Unsupported protocol v3."),
    ("v2", lambda c: c.explain("http://127.0.0.1:1", "m", {}), UnsupportedProtocol, "Unsupported protocol v2."),
    ("v1", lambda c: c.is_server_ready("http://127.0.0.1:1"), UnsupportedProtocol, "Unsupported protocol v1."),
], ids=["no-model-name", "unknown-protocol", "v2-explain", "v1-server-ready"])
def test_calls_kserve_refuses_are_refused(protocol, call, error, message):
    async def attempt():
        client = InferenceRESTClient(RESTConfig(protocol=protocol))
        try:
            await call(client)
        finally:
            await client.close()

    with pytest.raises(error) as refused:
        asyncio.run(attempt())
    assert str(refused.value) == message


# --- errors: KServe's types and ours ------------------------------------------------------------------------------
def test_grpc_error_is_an_aio_rpc_error_and_an_upstream_error():
    answered = grpc.aio.AioRpcError(grpc.StatusCode.NOT_FOUND, grpc.aio.Metadata(),
                                    grpc.aio.Metadata(("x-request-id", "r1")),
                                    details="Model with name nope does not exist.", debug_error_string="debug")
    error = kserve_error(UpstreamError, (404, "[NOT_FOUND] Model with name nope does not exist."), answered)
    assert isinstance(error, grpc.aio.AioRpcError) and isinstance(error, grpc.RpcError)
    assert isinstance(error, UpstreamError) and type(error).__name__ == "AioRpcError"
    assert error.code() is grpc.StatusCode.NOT_FOUND and error.details() == "Model with name nope does not exist."
    assert error.trailing_metadata() == grpc.aio.Metadata(("x-request-id", "r1"))
    assert error.debug_error_string() == "debug"
    assert (error.http_status, error.grpc_code) == (404, "NOT_FOUND")
    assert str(error) == "[NOT_FOUND] Model with name nope does not exist."


def test_rest_error_is_an_httpx_status_error_and_an_upstream_error():
    error = kserve_type(UpstreamError, "HTTPStatusError")(404, "http://h:1/v1/models/m:predict answered 404: gone")
    answer = (404, CIMultiDict([("Content-Type", "application/json"), ("Content-Encoding", "gzip")]),
              b'{"error": "gone"}')
    attach_exchange(error, "POST", "http://h:1/v1/models/m:predict", b"{}", {"x-a": "1"}, answer)
    assert isinstance(error, httpx.HTTPStatusError) and isinstance(error, UpstreamError)
    assert type(error).__name__ == "HTTPStatusError" and error.http_status == 404
    assert (error.request.method, str(error.request.url), error.request.content) == \
        ("POST", "http://h:1/v1/models/m:predict", b"{}")
    assert error.request.headers["x-a"] == "1"
    assert error.response.status_code == 404 and error.response.json() == {"error": "gone"}
    assert error.response.request is error.request
    assert "content-encoding" not in error.response.headers  # aiohttp already undid it
    with pytest.raises(httpx.HTTPStatusError):
        error.response.raise_for_status()  # a real httpx.Response
    assert str(error) == error.args[0] == "http://h:1/v1/models/m:predict answered 404: gone"


def test_without_httpx_the_errors_are_ours_alone(monkeypatch):
    monkeypatch.setitem(sys.modules, "httpx", None)  # import httpx now raises ImportError
    assert kserve_type.__wrapped__(UpstreamError, "HTTPStatusError") is UpstreamError
    error = UpstreamError(404, "gone")
    assert attach_exchange(error, "GET", "http://h:1/") is error and not hasattr(error, "request")


# --- headers ----------------------------------------------------------------------------------------------------
def test_response_headers_are_filled_as_httpx_fills_them():
    answered = [("X-Doubled", "yes"), ("x-doubled", "again"), ("Content-Type", "application/json")]
    expected: dict = {}
    expected.update(httpx.Headers(answered))
    assert _as_httpx_gives_them(CIMultiDict(answered)) == expected == \
        {"x-doubled": "yes, again", "content-type": "application/json"}


def test_a_transformer_passes_on_no_header_that_describes_the_predictors_bytes():
    predictor = {"x-doubled": "yes", "content-length": "12", "content-type": "application/json", "date": "d",
                 "server": "s", "inference-header-content-length": "40", "transfer-encoding": "chunked",
                 "x-request-id": "r", "content-encoding": "gzip"}
    assert passed_on(predictor) == {"x-doubled": "yes"}


# --- the gRPC channel -----------------------------------------------------------------------------------------
def test_grpc_channel_options_as_kserve_sets_them():
    default = dict(_channel_options(None, 3))
    assert default["grpc.enable_retries"] == 1 and "retryPolicy" in default["grpc.service_config"]
    assert default["grpc.max_receive_message_length"] == -1
    assert "grpc.service_config" not in dict(_channel_options([("grpc.enable_retries", 0)], 3))
    own = _channel_options([("grpc.service_config", "{}"), ("grpc.max_receive_message_length", 10)], 3)
    assert [v for k, v in own if k == "grpc.service_config"] == ["{}"]
    assert dict(own)["grpc.max_receive_message_length"] == 10
    assert "grpc.service_config" not in dict(_channel_options(None, 0))


def test_grpc_url_without_a_port_gets_kserves():
    async def urls():
        clients = [InferenceGRPCClient("example.com"), InferenceGRPCClient("example.com", use_ssl=True),
                   InferenceGRPCClient("example.com:9000")]
        found = [client._url for client in clients]
        for client in clients:
            await client.close()
        return found

    assert asyncio.run(urls()) == ["example.com:80", "example.com:443", "example.com:9000"]

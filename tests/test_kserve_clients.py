"""Our InferenceRESTClient / InferenceGRPCClient called as KServe's docs and source call KServe's, against a
real server: KServe's client program (hack/kserve_parity/clients_check.py, run with ``python -m kserve_sdk``)
answers as it did against a real KServe 0.21 server (its record, hack/kserve_parity/kserve-0.21.0.json);
``response_headers`` is filled; errors are ``httpx.HTTPStatusError`` / ``grpc.aio.AioRpcError`` and our
UpstreamError at once (ours alone without httpx); ``httpx.URL``, ``httpx.Timeout`` and ``USE_CLIENT_DEFAULT``
are taken; a transformer passes its predictor's headers on."""
import asyncio
import json
import os

import grpc
import httpx
import numpy as np
import pytest

from helpers import ROOT, eventually, free_port, post_json_raw, request, run_python
from kserve_sdk.clients.mismatch import ProtocolMismatch
from kserve_sdk.errors import UpstreamError
from kserve_sdk.inference_client import USE_CLIENT_DEFAULT, InferenceGRPCClient, InferenceRESTClient, RESTConfig
from kserve_sdk.protocol.infer_type import InferInput, InferRequest

PARITY = os.path.join(ROOT, "hack", "kserve_parity")
UNKNOWN = "Model with name nope does not exist."
REFUSED = "negative numbers are not doubled"

#: a model that sleeps the seconds its first number says, then answers it
SLOW_MODEL = '''
import asyncio
import argparse
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer, model_server


class Sleeper(Model):
    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload, headers=None):
        if isinstance(payload, InferRequest):
            values = payload.inputs[0].as_numpy()
            await asyncio.sleep(float(values.flat[0]))
            out = InferOutput("slept", list(values.shape), "FP32")
            out.set_data_from_numpy(values)
            return InferResponse(model_name=self.name, infer_outputs=[out], response_id=payload.id)
        await asyncio.sleep(payload["instances"][0])
        return {"predictions": payload["instances"]}


args, _ = argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
ModelServer().start([Sleeper(args.model_name)])
'''

#: a transformer that returns response headers and forwards to --predictor_host (KServe's default predict)
TRANSFORMER = '''
import argparse
from kserve import Model, ModelServer, model_server

args, _ = argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
model = Model(args.model_name, return_response_headers=True)
model.ready = True
ModelServer().start([model])
'''


@pytest.fixture(scope="module")
def doubler(start_server):
    """hack/kserve_parity/model.py served as KServe would serve it: model ``doubler``."""
    return start_server(os.path.join(PARITY, "model.py"), "--model_name", "doubler",
                        python_args=("-m", "kserve_sdk"))


@pytest.fixture(scope="module")
def sleeper(start_server, tmp_path_factory):
    """Model ``sleeper`` (SLOW_MODEL): answers after sleeping the seconds its first number says."""
    script = tmp_path_factory.mktemp("sleeper") / "model.py"
    script.write_text(SLOW_MODEL)
    return start_server(str(script), "--model_name", "sleeper", python_args=("-m", "kserve_sdk"))


def v2_request(model: str, values) -> InferRequest:
    tensor = InferInput(name="input-0", shape=list(np.shape(values)), datatype="FP32")
    tensor.set_data_from_numpy(np.asarray(values, dtype=np.float32))
    return InferRequest(model_name=model, infer_inputs=[tensor])


def call(coroutine_function, *args, **kwargs):
    """Run ``coroutine_function(*args, **kwargs)`` to its end; its result or its exception."""
    async def run():
        try:
            return await coroutine_function(*args, **kwargs)
        except Exception as e:  # the caller looks at it
            return e
    return asyncio.run(run())


# --- KServe's own client program, against our server --------------------------------------------------------
def test_kserves_client_program_answers_as_against_kserve(doubler, tmp_path):
    done = run_python("", "-m", "kserve_sdk", os.path.join(PARITY, "clients_check.py"),
                      "--rest_url", doubler.url, "--grpc_url", doubler.grpc_url)
    assert done.returncode == 0, done.stderr
    ours = tmp_path / "ours.json"
    ours.write_text(done.stdout)
    record = json.loads(done.stdout)
    assert record["rest_v1"]["infer_unknown_model"]["raised"]["is"] == ["httpx.HTTPStatusError", "httpx.HTTPError"]
    assert record["grpc"]["infer_bad_input"]["raised"]["is"] == ["grpc.aio.AioRpcError", "grpc.RpcError"]
    compared = run_python("", os.path.join(PARITY, "compare.py"), os.path.join(PARITY, "kserve-0.21.0.json"),
                          str(ours))
    assert (compared.returncode, compared.stdout) == (0, ""), compared.stdout + compared.stderr


def test_the_comparison_finds_a_difference(tmp_path):
    """compare.py fails on another exception type, another answer or a message without KServe's."""
    with open(os.path.join(PARITY, "kserve-0.21.0.json")) as f:
        record = json.load(f)
    record["rest_v1"]["infer_bad_input"]["raised"]["is"] = ["UpstreamError"]
    record["rest_v2"]["infer"]["outputs"][0]["data"][0][0] = 3.0
    record["grpc"]["infer_unknown_model"]["raised"]["details"] = "no such model"
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(record))
    compared = run_python("", os.path.join(PARITY, "compare.py"), os.path.join(PARITY, "kserve-0.21.0.json"),
                          str(changed))
    assert compared.returncode == 1
    assert compared.stdout.splitlines() == [
        "/grpc/infer_unknown_model/raised/details: KServe's message 'Model with name nope does not exist.' is not in "
        "ours 'no such model'",
        '/rest_v1/infer_bad_input/raised/is: KServe ["httpx.HTTPStatusError", "httpx.HTTPError"], ours '
        '["UpstreamError"]',
        "/rest_v2/infer/outputs/0/data/0/0: KServe 2.0, ours 3.0",
    ]


# --- response_headers, httpx.URL, httpx.Timeout ----------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["v1", "v2"])
def test_infer_fills_response_headers_as_kserve_does(doubler, protocol):
    async def infer():
        answered: dict = {}
        async with InferenceRESTClient(RESTConfig(protocol=protocol)) as client:
            data = {"instances": [[1, 2]]} if protocol == "v1" else v2_request("doubler", [[1, 2]])
            await client.infer(doubler.url, data, model_name="doubler", response_headers=answered)
        return answered

    answered = call(infer)
    assert answered["x-doubled"] == "yes" and answered["content-type"].startswith("application/json")
    assert int(answered["content-length"]) > 0 and all(name == name.lower() for name in answered)


def test_base_url_as_httpx_url_and_timeout_as_httpx_timeout(doubler):
    async def infer(base_url):
        async with InferenceRESTClient(RESTConfig(protocol="v2", timeout=httpx.Timeout(5))) as client:
            response = await client.infer(base_url, v2_request("doubler", [[1.5, 3]]), model_name="doubler",
                                          timeout=httpx.Timeout(10, connect=2))
        return response.outputs[0].as_numpy().tolist()

    for base_url in (httpx.URL(doubler.url), httpx.URL(doubler.url + "/"), doubler.url):
        assert call(infer, base_url) == [[3.0, 6.0]], base_url


# --- errors -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol, model, data, status, message, path", [
    ("v1", "nope", {"instances": [[1]]}, 404, UNKNOWN, "/v1/models/nope:predict"),
    ("v1", "doubler", {"instances": [[1, -2]]}, 400, REFUSED, "/v1/models/doubler:predict"),
    ("v2", "nope", [[1]], 404, UNKNOWN, "/v2/models/nope/infer"),
    ("v2", "doubler", [[-1]], 400, REFUSED, "/v2/models/doubler/infer"),
], ids=["v1-404", "v1-400", "v2-404", "v2-400"])
def test_rest_error_answers_are_httpx_status_errors_and_ours(doubler, protocol, model, data, status, message, path):
    async def infer():
        async with InferenceRESTClient(RESTConfig(protocol=protocol, retries=0)) as client:
            payload = data if protocol == "v1" else v2_request(model, data)
            await client.infer(doubler.url, payload, model_name=model)

    error = call(infer)
    assert isinstance(error, httpx.HTTPStatusError) and isinstance(error, UpstreamError), repr(error)
    assert error.response.status_code == error.http_status == status
    assert message in error.response.json()["error"]
    assert (error.request.method, str(error.request.url)) == ("POST", doubler.url + path)
    assert error.response.request is error.request and error.response.url == error.request.url
    assert str(error).startswith(f"{doubler.url}{path} answered {status}: ") and message in str(error)
    with pytest.raises(httpx.HTTPStatusError):
        error.response.raise_for_status()


def test_rest_model_ready_of_an_unknown_model_as_kserve_answers_it(doubler):
    async def ready(protocol):
        async with InferenceRESTClient(RESTConfig(protocol=protocol)) as client:
            return await client.is_model_ready(doubler.url, "nope")

    assert call(ready, "v2") is False
    error = call(ready, "v1")  # KServe's v1 raises for any error answer but 503
    assert isinstance(error, httpx.HTTPStatusError) and error.response.status_code == 404
    assert (error.request.method, error.request.url.path) == ("GET", "/v1/models/nope")


@pytest.mark.parametrize("model, values, code, status, message", [
    ("nope", [[1]], grpc.StatusCode.NOT_FOUND, 404, UNKNOWN),
    ("doubler", [[-1]], grpc.StatusCode.INVALID_ARGUMENT, 400, REFUSED),
], ids=["404", "400"])
def test_grpc_errors_are_aio_rpc_errors_and_ours(doubler, model, values, code, status, message):
    async def infer():
        async with InferenceGRPCClient(doubler.grpc_url, retries=0) as client:
            await client.infer(v2_request(model, values))

    error = call(infer)
    assert isinstance(error, grpc.aio.AioRpcError) and isinstance(error, UpstreamError), repr(error)
    assert error.code() is code and message in error.details()
    assert error.http_status == status and str(error) == f"[{code.name}] {error.details()}"
    assert isinstance(error.trailing_metadata(), grpc.aio.Metadata)


def test_a_server_not_there_is_an_httpx_connect_error_and_ours():
    url = f"http://127.0.0.1:{free_port()}"

    async def infer():
        async with InferenceRESTClient(RESTConfig(retries=1)) as client:
            await client.infer(url, {"instances": [[1]]}, model_name="doubler")

    error = call(infer)
    assert isinstance(error, httpx.ConnectError) and isinstance(error, UpstreamError), repr(error)
    assert error.http_status == 503 and str(error).startswith(f"cannot reach {url}/v1/models/doubler:predict: ")
    assert (error.request.method, str(error.request.url)) == ("POST", f"{url}/v1/models/doubler:predict")


def test_a_server_of_the_other_protocol_is_told_in_kserves_types_too(start_server, doubler):
    """Beyond KServe: the REST client names the protocol a server speaks when the model answers 404 on the
    client's and 200 on the other's; the gRPC client names a REST port. The errors are KServe's types still."""
    v2_only = start_server("tests/models/one_protocol.py", "--model_name", "iris", grpc=False,
                           env={"ONLY_PROTOCOL": "v2"})
    eventually(lambda: request(v2_only.http_port, "GET", "/v2/models/iris/ready", timeout=2)[0] == 200, 30,
               message=v2_only.log)

    async def infer_v1():
        async with InferenceRESTClient(RESTConfig(protocol="v1", retries=0)) as client:
            await client.infer(v2_only.url, {"instances": [[1]]}, model_name="iris")

    async def infer_grpc_at_rest_port():
        async with InferenceGRPCClient(f"127.0.0.1:{doubler.http_port}", retries=0) as client:
            await client.infer(v2_request("doubler", [[1]]))

    error = call(infer_v1)
    assert isinstance(error, ProtocolMismatch) and isinstance(error, httpx.HTTPStatusError), repr(error)
    assert error.response.status_code == 404 and error.spoken == "v2"
    assert str(error).startswith(f"{v2_only.url} speaks Open Inference Protocol v2 REST, not v1 REST: ")
    error = call(infer_grpc_at_rest_port)
    assert isinstance(error, ProtocolMismatch) and isinstance(error, grpc.aio.AioRpcError), repr(error)
    assert error.code() is grpc.StatusCode.UNAVAILABLE and error.spoken == "rest"


def test_without_httpx_the_rest_errors_are_upstream_errors(doubler, tmp_path):
    """httpx is not a dependency: without it the client works and its errors are UpstreamError alone."""
    (tmp_path / "httpx").mkdir()
    (tmp_path / "httpx" / "__init__.py").write_text("raise ImportError('httpx is not installed here')\n")
    done = run_python('''
        import asyncio, sys
        from kserve_sdk import InferenceRESTClient, RESTConfig
        from kserve_sdk.errors import UpstreamError

        async def main():
            async with InferenceRESTClient(RESTConfig(protocol="v1", timeout=(2, 10, 10, 2))) as client:
                answer = await client.infer(sys.argv[1], {"instances": [[2]]}, model_name="doubler")
                try:
                    await client.infer(sys.argv[1], {"instances": [[1]]}, model_name="nope")
                except UpstreamError as e:
                    print(answer["predictions"], type(e).__name__, type(e).__mro__[1].__name__, e.http_status)
        asyncio.run(main())
    ''', doubler.url, pythonpath=f"{tmp_path}{os.pathsep}{ROOT}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[[4.0]]", "UpstreamError", "InferenceError", "404"]


def test_httpx_is_imported_at_the_first_error_only(doubler):
    done = run_python('''
        import asyncio, sys
        from kserve_sdk import InferenceRESTClient

        async def main():
            async with InferenceRESTClient() as client:
                await client.infer(sys.argv[1], {"instances": [[2]]}, model_name="doubler")
                print("httpx" in sys.modules)
                try:
                    await client.infer(sys.argv[1], {"instances": [[2]]}, model_name="nope")
                except Exception as e:
                    print("httpx" in sys.modules, type(e).__name__)
        asyncio.run(main())
    ''', doubler.url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "HTTPStatusError"]


# --- timeouts: httpx.Timeout, None, USE_CLIENT_DEFAULT ----------------------------------------------------------
def test_rest_timeouts_as_kserve_takes_them(sleeper):
    async def infer(config_timeout, **kwargs):
        async with InferenceRESTClient(RESTConfig(timeout=config_timeout, retries=0)) as client:
            return await client.infer(sleeper.url, {"instances": [2]}, model_name="sleeper", **kwargs)

    for config_timeout, kwargs in ((httpx.Timeout(0.5), {}), (0.5, {}), (60, {"timeout": httpx.Timeout(0.5)}),
                                   (0.5, {"timeout": httpx.USE_CLIENT_DEFAULT}),
                                   (0.5, {"timeout": USE_CLIENT_DEFAULT})):
        error = call(infer, config_timeout, **kwargs)
        assert isinstance(error, httpx.ReadTimeout) and isinstance(error, UpstreamError), (config_timeout, kwargs)
        assert error.http_status == 504 and str(error) == f"{sleeper.url}/v1/models/sleeper:predict did not " \
                                                          f"answer within the timeout"
    assert call(infer, httpx.Timeout(0.5), timeout=None) == {"predictions": [2]}  # None: no limit


def test_grpc_timeouts_as_kserve_takes_them(sleeper):
    async def infer(*args, **kwargs):
        async with InferenceGRPCClient(sleeper.grpc_url, timeout=0.5, retries=0) as client:
            return await client.infer(v2_request("sleeper", [2]), *args, **kwargs)

    for args, kwargs in (((), {}), ((USE_CLIENT_DEFAULT,), {}), ((), {"timeout": 0.5})):
        error = call(infer, *args, **kwargs)
        assert isinstance(error, grpc.aio.AioRpcError) and isinstance(error, UpstreamError), (args, kwargs)
        assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED and error.http_status == 504
    answered = call(infer, None, [("x-any", "metadata")])  # KServe's order: infer_request, timeout, headers
    assert answered.outputs[0].as_numpy().tolist() == [2.0]


# --- a transformer passes its predictor's headers on -------------------------------------------------------------
def test_transformer_returns_its_predictors_response_headers(start_server, doubler, tmp_path):
    script = tmp_path / "transformer.py"
    script.write_text(TRANSFORMER)
    transformer = start_server(str(script), "--model_name", "doubler", "--predictor_host",
                               f"127.0.0.1:{doubler.http_port}", grpc=False, python_args=("-m", "kserve_sdk"))
    status, headers, body = post_json_raw(transformer.http_port, "/v1/models/doubler:predict",
                                          {"instances": [[1, 2]]})
    assert (status, json.loads(body)["predictions"]) == (200, [[2.0, 4.0]])
    assert headers["x-doubled"] == "yes" and headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(body)  # the transformer's own, not the predictor's
    assert "inference-header-content-length" not in headers and "transfer-encoding" not in headers

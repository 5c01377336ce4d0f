"""A transformer (samples/transformer) forwarding to a predictor (samples/custom_model) over REST."""

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import eventually, free_port, post_json, request

SETOSA_MM = {"sepal_length_mm": 51, "sepal_width_mm": 35, "petal_length_mm": 14, "petal_width_mm": 2}
VIRGINICA_MM = {"sepal_length_mm": 67, "sepal_width_mm": 30, "petal_length_mm": 58, "petal_width_mm": 22}


@pytest.fixture(scope="module")
def predictor(start_server):
    return start_server("samples/custom_model/model.py", "--model_name", "iris", grpc=False)


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("protocol", ["v1", "v2"])
def test_transformer_forwards(start_server, predictor, protocol, workers):
    transformer = start_server("samples/transformer/model.py", "--model_name", "iris", "--workers", workers,
                               "--predictor_host", f"127.0.0.1:{predictor.http_port}",
                               "--predictor_protocol", protocol, grpc=False)
    if protocol == "v1":
        status, _, body = post_json(transformer.http_port, "/v1/models/iris:predict",
                                    {"instances": [SETOSA_MM, VIRGINICA_MM]}, {"x-request-id": "trace-me"})
        assert status == 200, body
        assert body == {"predictions": ["setosa", "virginica"]}
    else:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{transformer.http_port}")
        rows = np.array([[SETOSA_MM[k] for k in SETOSA_MM], [VIRGINICA_MM[k] for k in VIRGINICA_MM]],
                        dtype=np.float32)
        tensor = httpclient.InferInput("measurements_mm", list(rows.shape), "FP32")
        tensor.set_data_from_numpy(rows)
        result = client.infer("iris", [tensor], headers={"x-request-id": "trace-me"})
        np.testing.assert_array_equal(result.as_numpy("output-0"), [0, 2])
        assert [x.decode() for x in result.as_numpy("class_name")] == ["setosa", "virginica"]
        client.close()
    # The request id travelled to the predictor, whose latency line names it.
    predictor.log_with("requestId: trace-me")


def test_transformer_passes_on_predictor_errors(start_server, predictor):
    transformer = start_server("samples/transformer/model.py", "--model_name", "other",
                               "--predictor_host", f"127.0.0.1:{predictor.http_port}", grpc=False)
    status, _, body = post_json(transformer.http_port, "/v1/models/other:predict", {"instances": [SETOSA_MM]})
    assert status == 404
    assert "Model with name other does not exist." in body["error"]


def test_transformer_without_reachable_predictor(start_server):
    transformer = start_server("samples/transformer/model.py", "--model_name", "iris",
                               "--predictor_host", f"127.0.0.1:{free_port()}", grpc=False)
    status, _, body = post_json(transformer.http_port, "/v1/models/iris:predict", {"instances": [SETOSA_MM]})
    assert status == 503
    assert "cannot reach" in body["error"]


def test_transformer_refuses_instances_that_are_not_a_list(start_server):
    """The body is checked before preprocess runs: the sample's preprocess would fail on it with a 500
    (and one that accepted it would answer 200)."""
    transformer = start_server("samples/transformer/model.py", "--model_name", "iris",
                               "--predictor_host", f"127.0.0.1:{free_port()}", grpc=False)
    for body, field in (({"instances": 5}, "instances"), ({"inputs": 5}, "inputs"),
                        ({"instances": {"sepal_length_mm": 51}}, "instances")):
        status, _, answer = post_json(transformer.http_port, "/v1/models/iris:predict", body)
        assert (status, answer) == (400, {"error": f'Expected "{field}" to be a list'}), body


@pytest.fixture(scope="module")
def refusing_predictor(start_server):
    """A predictor (REST and gRPC) whose model ``iris`` raises a 403 / PERMISSION_DENIED error."""
    return start_server("tests/models/forbidding.py", "--model_name", "iris")


@pytest.mark.parametrize("protocol", ["v1", "v2", "grpc-v2"])
def test_transformer_passes_on_a_predictors_403(start_server, refusing_predictor, protocol):
    """403 / PERMISSION_DENIED from the predictor, over each forwarding protocol, reaches the transformer's
    REST and gRPC callers as 403 / PERMISSION_DENIED."""
    host = refusing_predictor.grpc_url if protocol == "grpc-v2" else f"127.0.0.1:{refusing_predictor.http_port}"
    script = "tests/models/grpc_transformer.py" if protocol == "grpc-v2" else "samples/transformer/model.py"
    transformer = start_server(script, "--model_name", "iris", "--predictor_host", host,
                               "--predictor_protocol", protocol, grpc=protocol != "v1")
    if protocol == "v1":
        status, _, body = post_json(transformer.http_port, "/v1/models/iris:predict", {"instances": [SETOSA_MM]})
        assert status == 403, body
        assert "caller may not use model iris" in body["error"]
        return
    rows = np.array([[SETOSA_MM[k] for k in SETOSA_MM]], dtype=np.float32)
    tensor = httpclient.InferInput("measurements_mm", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    client = httpclient.InferenceServerClient(f"127.0.0.1:{transformer.http_port}")
    with pytest.raises(InferenceServerException) as rest_error:
        client.infer("iris", [tensor])
    client.close()
    assert rest_error.value.status() == "403" and "caller may not use model iris" in rest_error.value.message()
    grpc_client = grpcclient.InferenceServerClient(transformer.grpc_url)
    grpc_tensor = grpcclient.InferInput("measurements_mm", list(rows.shape), "FP32")
    grpc_tensor.set_data_from_numpy(rows)
    with pytest.raises(InferenceServerException) as grpc_error:
        grpc_client.infer("iris", [grpc_tensor])
    grpc_client.close()
    assert grpc_error.value.status() == "StatusCode.PERMISSION_DENIED", grpc_error.value
    assert "caller may not use model iris" in grpc_error.value.message()


# --- a predictor that speaks another protocol than --predictor_protocol says ----------------------------------
def one_protocol_predictor(start_server, protocol):
    """tests/models/one_protocol.py serving REST ``protocol`` only, its model "iris" ready."""
    server = start_server("tests/models/one_protocol.py", "--model_name", "iris", grpc=False, wait=False,
                          env={"ONLY_PROTOCOL": protocol})

    def iris_ready():
        try:
            path = "/v1/models/iris" if protocol == "v1" else "/v2/models/iris/ready"
            return request(server.http_port, "GET", path, timeout=2)[0] == 200
        except OSError:  # not listening yet
            return False

    eventually(iris_ready, 30, message=server.log)
    return server


@pytest.mark.parametrize("configured,spoken,path,probe,what", [
    ("v2", "v1", "/v2/models/iris/infer", "/v1/models/iris", "KServe v1 REST"),
    ("v1", "v2", "/v1/models/iris:predict", "/v2/models/iris/ready", "Open Inference Protocol v2 REST"),
])
def test_transformer_says_the_predictor_speaks_the_other_rest_protocol(start_server, configured, spoken, path,
                                                                        probe, what):
    predictor = one_protocol_predictor(start_server, spoken)
    transformer = start_server("samples/transformer/model.py", "--model_name", "iris", "--predictor_host",
                               f"127.0.0.1:{predictor.http_port}", "--predictor_protocol", configured, grpc=False)
    status, _, body = post_json(transformer.http_port, "/v1/models/iris:predict", {"instances": [SETOSA_MM]})
    address = f"http://127.0.0.1:{predictor.http_port}"
    assert status == 502, body
    assert body["error"].startswith(f"the predictor at {address} speaks {what}, but --predictor_protocol is "
                                    f"{configured}: POST {path} answered 404 ("), body
    assert body["error"].endswith(f") while GET {probe} answers 200; set --predictor_protocol {spoken}"), body


def test_transformer_says_a_grpc_predictor_host_is_a_rest_port(start_server, predictor):
    transformer = start_server("tests/models/grpc_transformer.py", "--model_name", "iris", "--predictor_host",
                               f"127.0.0.1:{predictor.http_port}", "--predictor_protocol", "grpc-v2", grpc=False)
    client = httpclient.InferenceServerClient(f"127.0.0.1:{transformer.http_port}")
    tensor = httpclient.InferInput("measurements_mm", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.array([list(SETOSA_MM.values())], dtype=np.float32))
    with pytest.raises(InferenceServerException) as error:
        client.infer("iris", [tensor])
    client.close()
    message = error.value.message()
    assert error.value.status() == "502", message
    assert message.startswith(f"the predictor at 127.0.0.1:{predictor.http_port} speaks REST over HTTP/1.1, not "
                              "gRPC, but --predictor_protocol is grpc-v2: [UNAVAILABLE] "), message
    assert "Trying to connect an http1.x server" in message, message
    assert message.endswith("; set --predictor_protocol v1 or v2, or point --predictor_host at the predictor's "
                            "gRPC port"), message


@pytest.mark.parametrize("configured,path", [("v1", "/v1/models/iris:predict"), ("v2", "/v2/models/iris/infer")])
def test_transformer_says_a_rest_predictor_host_is_a_grpc_port(start_server, refusing_predictor, configured, path):
    transformer = start_server("samples/transformer/model.py", "--model_name", "iris", "--predictor_host",
                               refusing_predictor.grpc_url, "--predictor_protocol", configured, grpc=False)
    status, _, body = post_json(transformer.http_port, "/v1/models/iris:predict", {"instances": [SETOSA_MM]})
    assert (status, body) == (502, {"error": (
        f"the predictor at http://{refusing_predictor.grpc_url} speaks gRPC over HTTP/2, not REST, but "
        f"--predictor_protocol is {configured}: POST {path} was answered with an HTTP/2 SETTINGS frame; set "
        "--predictor_protocol grpc-v2, or point --predictor_host at the predictor's HTTP port")}), body

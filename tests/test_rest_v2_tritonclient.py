"""Open Inference Protocol v2 REST, driven by the real tritonclient.http client."""
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


@pytest.fixture(scope="module")
def client(zoo):
    c = httpclient.InferenceServerClient(url=f"127.0.0.1:{zoo.http_port}")
    yield c
    c.close()


def test_health_and_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("echo")
    assert not client.is_model_ready("no-such-model")
    meta = client.get_server_metadata()
    assert meta["name"] == "kserve-sdk" and "binary_tensor_data" in meta["extensions"]
    model = client.get_model_metadata("echo")
    assert model["name"] == "echo"
    assert model["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}]
    assert model["outputs"] == [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 4]}]


def _sample(datatype):
    rng = np.random.default_rng(7)
    if datatype == "FP32":
        return rng.standard_normal((3, 4)).astype(np.float32)
    if datatype == "FP16":
        return rng.standard_normal((2, 5)).astype(np.float16)
    if datatype == "INT64":
        return rng.integers(-2**62, 2**62, size=(4, 2), dtype=np.int64)
    if datatype == "BOOL":
        return rng.integers(0, 2, size=(3, 3)).astype(bool)
    if datatype == "BYTES":
        return np.array([["alpha", "béta"], ["", "gamma delta"]], dtype=np.object_)
    raise AssertionError(datatype)


@pytest.mark.parametrize("binary_in", [True, False], ids=["binary-in", "json-in"])
@pytest.mark.parametrize("binary_out", [True, False], ids=["binary-out", "json-out"])
@pytest.mark.parametrize("datatype", ["FP32", "FP16", "INT64", "BOOL", "BYTES"])
def test_infer_round_trip(client, datatype, binary_in, binary_out):
    data = _sample(datatype)
    tensor = httpclient.InferInput("INPUT0", list(data.shape), datatype)
    tensor.set_data_from_numpy(data, binary_data=binary_in)
    wanted = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out)]
    result = client.infer("echo", [tensor], outputs=wanted, request_id="req-1")
    got = result.as_numpy("OUTPUT0")
    if datatype == "BYTES":
        assert [x.decode() if isinstance(x, bytes) else x for x in got.ravel()] == list(data.ravel())
    else:
        assert got.dtype == data.dtype
        np.testing.assert_array_equal(got, data)
    assert got.shape == data.shape
    response = result.get_response()
    assert response["id"] == "req-1"
    assert response["outputs"][0]["datatype"] == datatype
    assert ("binary_data_size" in response["outputs"][0].get("parameters", {})) == binary_out


def test_no_requested_outputs_defaults_to_binary_and_all_outputs(client):
    a, b = _sample("FP32"), _sample("INT64")
    inputs = [httpclient.InferInput("INPUT0", list(a.shape), "FP32"),
              httpclient.InferInput("INPUT1", list(b.shape), "INT64")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b, binary_data=False)
    result = client.infer("echo", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), b)


def test_requested_outputs_filter_and_mix_binary_and_json(client):
    a, b, c = _sample("FP32"), _sample("INT64"), _sample("BOOL")
    inputs = []
    for name, arr, dt in [("INPUT0", a, "FP32"), ("INPUT1", b, "INT64"), ("INPUT2", c, "BOOL")]:
        t = httpclient.InferInput(name, list(arr.shape), dt)
        t.set_data_from_numpy(arr)
        inputs.append(t)
    outputs = [httpclient.InferRequestedOutput("OUTPUT2", binary_data=False),
               httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
    result = client.infer("echo", inputs, outputs=outputs)
    names = [o["name"] for o in result.get_response()["outputs"]]
    assert names == ["OUTPUT2", "OUTPUT0"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT2"), c)
    assert result.as_numpy("OUTPUT1") is None
    json_out = result.get_response()["outputs"][0]
    assert json_out["data"] == c.ravel().tolist()


def test_unknown_requested_output_is_400(client):
    a = _sample("FP32")
    t = httpclient.InferInput("INPUT0", list(a.shape), "FP32")
    t.set_data_from_numpy(a)
    with pytest.raises(InferenceServerException) as err:
        client.infer("echo", [t], outputs=[httpclient.InferRequestedOutput("NOPE")])
    assert err.value.status() == "400"
    assert "Unexpected inference output 'NOPE' for model 'echo'" in err.value.message()


def test_request_parameters_reach_the_model(client):
    a = _sample("FP32")
    t = httpclient.InferInput("INPUT0", list(a.shape), "FP32")
    t.set_data_from_numpy(a)
    params = {"flag": True, "count": 3, "label": "x", "ratio": 0.5}
    result = client.infer("echo", [t], parameters=params)
    assert result.get_response()["parameters"]["label"] == "x"
    assert result.get_response()["parameters"]["count"] == 3


def test_versions_route_and_model_returning_arrays(client, zoo):
    a = _sample("FP32")
    t = httpclient.InferInput("INPUT0", list(a.shape), "FP32")
    t.set_data_from_numpy(a)
    result = client.infer("raw", [t], model_version="1")  # a model without a version serves version 1
    np.testing.assert_array_equal(result.as_numpy("output-0"), a * 2)
    assert client.get_model_metadata("echo", model_version="1")["versions"] == []
    assert client.is_model_ready("echo", model_version="1")
    assert not client.is_model_ready("echo", model_version="3")


@pytest.mark.parametrize("binary", [True, False])
def test_empty_tensor(client, binary):
    tensor = httpclient.InferInput("INPUT0", [0, 4], "FP32")
    tensor.set_data_from_numpy(np.zeros((0, 4), np.float32), binary_data=binary)
    result = client.infer("echo", [tensor], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)])
    out = result.as_numpy("OUTPUT0")
    assert out.shape == (0, 4) and out.dtype == np.float32


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests_and_responses(client, algorithm):
    data = _sample("FP32")
    tensor = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data, binary_data=False)
    result = client.infer("echo", [tensor], request_compression_algorithm=algorithm,
                          response_compression_algorithm=algorithm)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_deflate_bomb_and_garbage_are_refused(zoo):
    import zlib

    from helpers import request

    bomb = zlib.compress(b"0" * (101 * 1024 * 1024))
    status, _, body = request(zoo.http_port, "POST", "/v2/models/echo/infer", bomb, {"Content-Encoding": "deflate"})
    assert status == 413 and b"inflates to more than" in body
    status, _, body = request(zoo.http_port, "POST", "/v2/models/echo/infer", b"not deflate",
                              {"Content-Encoding": "deflate"})
    assert status == 400 and b"not valid deflate data" in body

"""KServe v1 REST with curl-equivalent raw HTTP: routes, pipeline order, response headers, explain."""
import json

from helpers import post_json, request


def test_root_and_listing(zoo):
    assert request(zoo.http_port, "GET", "/")[2] == b'{"status":"alive"}'
    status, _, body = request(zoo.http_port, "GET", "/v1/models")
    assert status == 200
    assert set(json.loads(body)["models"]) == {"echo", "pipeline", "headers", "failing", "slow", "explained", "raw"}
    assert json.loads(request(zoo.http_port, "GET", "/v1/models/echo")[2]) == {"name": "echo", "ready": True}
    assert json.loads(request(zoo.http_port, "GET", "/v2/models")[2])["models"] == json.loads(body)["models"]
    assert request(zoo.http_port, "GET", "/v2/health/live")[2] == b'{"live":true}'


def test_pipeline_order_load_preprocess_predict_postprocess(zoo):
    status, _, body = post_json(zoo.http_port, "/v1/models/pipeline:predict", {"instances": [1, 2, 3]})
    assert status == 200
    assert body == {"predictions": [2, 4, 6], "trace": ["load", "preprocess", "predict", "postprocess"],
                    "seen": "preprocess"}


def test_response_headers_from_predict_and_postprocess(zoo):
    status, headers, body = post_json(zoo.http_port, "/v1/models/headers:predict", {"instances": [1]},
                                      {"X-Request-Id": "rid-42"})
    assert status == 200
    assert headers["x-predicted-by"] == "headers"
    assert headers["x-postprocessed"] == "yes"
    assert body == {"predictions": ["rid-42"]}


def test_explain(zoo):
    status, _, body = post_json(zoo.http_port, "/v1/models/explained:explain", {"instances": [[1, 2, 3, 4]]})
    assert status == 200
    assert body == {"explanations": [[0.25, 0.25, 0.25, 0.25]]}
    status, _, body = post_json(zoo.http_port, "/v1/models/explained:predict", {"instances": [[1, 2, 3, 4]]})
    assert body == {"predictions": [10]}


def test_numpy_and_bytes_responses(zoo):
    status, headers, body = post_json(zoo.http_port, "/v1/models/raw:predict", {"instances": [1]})
    assert status == 200 and body == {"predictions": [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]}
    status, headers, body = request(zoo.http_port, "POST", "/v1/models/raw:predict", b'{"instances": ["bytes"]}')
    assert status == 200 and body == b"\x00raw-bytes\xff"
    assert headers["content-type"] == "application/octet-stream"


def test_json_without_content_type(zoo):
    status, _, body = request(zoo.http_port, "POST", "/v1/models/echo:predict", b'{"instances": [[1, 2]]}', {})
    assert status == 200 and json.loads(body) == {"predictions": [[1, 2]]}


def test_v2_json_infer_with_curl_shape(zoo):
    doc = {"id": "abc", "inputs": [{"name": "INPUT0", "shape": [2, 2], "datatype": "INT32", "data": [[1, 2], [3, 4]]}]}
    status, headers, body = post_json(zoo.http_port, "/v2/models/echo/infer", doc)
    assert status == 200 and headers["content-type"] == "application/json"
    assert body == {"id": "abc", "model_name": "echo", "model_version": None,
                    "outputs": [{"name": "OUTPUT0", "datatype": "INT32", "shape": [2, 2], "data": [1, 2, 3, 4]}]}

"""A REST API of a script's own, added to ``model_server.REST_APIS`` in one line (tests/models/extra_api.py), is
served like the built-in ones: its call's request id, its metric labels, its error shape (the body limit's 413
included), and the built-in routes still answer beside it."""
import json

import pytest

from helpers import eventually, http_get, post_json_raw, request, scrape, value

LIMIT = 4096  # --max_body_size
PATH = "/v2/echo_headers/echo"
LABELS = dict(model_name="echo", protocol="echo_api", endpoint="echo_headers")


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("tests/models/extra_api.py", "--max_body_size", str(LIMIT), grpc=False)


def counted(server, status: str) -> float:
    return value(scrape(server), "kserve_requests_total", status=status, **LABELS)


def problem(got, status: int, detail: str) -> None:
    """An answer in the test API's own error shape, naming its call."""
    code, headers, body = got
    assert code == status, body
    assert json.loads(body) == {"problem": {"status": status, "detail": detail}}
    assert headers["x-request-id"]


def test_the_added_route_answers_through_the_data_plane_with_its_request_id(server):
    before = counted(server, "200")
    status, headers, body = post_json_raw(server.http_port, PATH, {"instances": [1, 2]},
                                          {"x-request-id": "plug-1", "x-colour": "teal"})
    assert status == 200, body
    assert json.loads(body) == {"model": "echo", "predictions": [1, 2],
                                "headers": {"x-request-id": "plug-1", "x-colour": "teal"}}
    assert headers["x-request-id"] == "plug-1"
    eventually(lambda: counted(server, "200") == before + 1, message="the call is counted with its API's labels")


def test_a_body_over_the_limit_is_413_in_the_apis_own_shape_and_labels(server):
    before = counted(server, "413")
    body = json.dumps({"instances": ["x" * (LIMIT + 100)]}).encode()
    got = request(server.http_port, "POST", PATH, body, {"Content-Type": "application/json", "x-request-id": "big-1"})
    problem(got, 413, f"the request body of {len(body)} bytes is larger than the {LIMIT} bytes this server accepts "
                      "(--max_body_size)")
    assert got[1]["x-request-id"] == "big-1"
    eventually(lambda: counted(server, "413") == before + 1, message="the 413 is counted with its API's labels")


@pytest.mark.parametrize("method,path,body,status,detail", [
    ("POST", "/v2/echo_headers/nope", b'{"instances": [1]}', 404,
     "Request for unknown model: 'nope' is not found. Model with name nope does not exist. Models served: echo."),
    ("POST", PATH, b'{"instances": 5}', 400, 'the body must be a JSON object {"instances": [...]}'),
    ("GET", PATH, None, 405, "Method Not Allowed"),
], ids=["unknown-model", "bad-body", "wrong-method"])
def test_its_errors_are_in_its_own_shape(server, method, path, body, status, detail):
    problem(request(server.http_port, method, path, body), status, detail)


def test_the_built_in_apis_still_answer_beside_it(server):
    assert http_get(server.url + "/v2/models/echo/ready")[0] == 200
    status, _, body = post_json_raw(server.http_port, "/v1/models/echo:predict", {"instances": [3]})
    assert status == 200 and json.loads(body)["predictions"] == [3]
    status, _, body = request(server.http_port, "POST", "/v1/models/echo:predict", b"x" * (LIMIT + 1))
    assert status == 413 and set(json.loads(body)) == {"error"}  # v1 keeps its own shape

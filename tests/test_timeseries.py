"""Time-series forecasting: ``POST /v1/timeseries/forecast`` and ``GET /v1/timeseries/models``
against a real server (tests/models/forecasting.py) with raw HTTP, and pydantic kept off the v1/v2 paths."""
import json
from datetime import datetime

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from helpers import assert_error_answer, check_request, check_response, post_json, post_json_raw, request
from kserve_sdk.handlers.docs import openapi_document

FORECAST = "/v1/timeseries/forecast"
TIMESERIES_MODELS = "/v1/timeseries/models"


def series(name="sales", values=(1.0, 2.0, 3.0, 4.0, 5.0), frequency="D", start="2024-01-30T00:00:00Z", **extra):
    entry = {"type": "univariate_time_series", "name": name, "series": list(values), "frequency": frequency,
             "start_timestamp": start, **extra}
    return {k: v for k, v in entry.items() if v is not None}


def forecast_body(model="naive", inputs=None, **options):
    return {"model": model, "inputs": inputs if inputs is not None else [series()],
            "options": {"horizon": 3, **options}}


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("tests/models/forecasting.py", grpc=False)


def assert_error_response(got, status, error):
    """The model's ErrorResponse, as KServe sends it: ``{"error": {code, message, param, type}}``."""
    code, headers, body = got
    assert code == status, body
    assert headers["content-type"].startswith("application/json")
    assert json.loads(body) == {"error": error}


def forecast(server, doc, headers=None):
    """(status, headers, body bytes) of a forecast."""
    return post_json_raw(server.http_port, FORECAST, doc, headers)


# --- the forecast, in KServe's response shape --------------------------------------------------------------
def test_forecast_answers_kserve_response_shape(server):
    monthly = {"type": "multivariate_time_series", "name": "rooms", "series": [[1, 10], [2, 20], [3, 30]],
               "frequency": "month", "start_timestamp": "2024-01-31T00:00:00Z"}
    doc = forecast_body(inputs=[series(), monthly], horizon=4, quantiles=[0.5], season_length=2)
    doc["metadata"] = {"caller": "test"}
    status, headers, body = post_json(server.http_port, FORECAST, doc, {"X-Request-Id": "ts-1"})
    assert status == 200, body
    assert headers["content-type"] == "application/json" and headers["x-request-id"] == "ts-1"
    assert set(body) == {"id", "created_at", "status", "error", "model", "outputs", "usage"}
    assert body["status"] == "completed" and body["error"] is None and body["model"] == "naive"
    assert abs(body["created_at"] - datetime.now().timestamp()) < 600
    assert body["usage"] == {"prompt_tokens": 8, "completion_tokens": 8, "total_tokens": 16}
    assert len(body["outputs"]) == 2 and body["outputs"][0]["id"] != body["outputs"][1]["id"]
    for output in body["outputs"]:
        assert set(output) == {"type", "id", "status", "content", "error"}
        assert output["type"] == "time_series_forecast" and output["status"] == "completed"
        assert output["error"] is None and len(output["content"]) == 1
    daily, rooms = (output["content"][0] for output in body["outputs"])
    assert set(daily) == {"type", "name", "mean_forecast", "frequency", "start_timestamp", "quantiles"}
    # seasonal naive, season 2: the last two points again and again; differences are all 2, so q=0.5 adds 2
    assert daily == {"type": "univariate_time_series", "name": "sales", "mean_forecast": [4.0, 5.0, 4.0, 5.0],
                     "frequency": "D", "start_timestamp": "2024-02-04T00:00:00Z",
                     "quantiles": {"0.5": [6.0, 7.0, 6.0, 7.0]}}
    # five days after 30 January; three calendar months after 31 January is 30 April
    assert rooms["type"] == "multivariate_time_series" and rooms["frequency"] == "month"
    assert rooms["mean_forecast"] == [[2.0, 20.0], [3.0, 30.0], [2.0, 20.0], [3.0, 30.0]]
    assert rooms["start_timestamp"] == "2024-04-30T00:00:00Z"
    assert rooms["quantiles"] == {"0.5": [[4.0, 40.0], [5.0, 50.0], [4.0, 40.0], [5.0, 50.0]]}


def test_forecast_without_quantiles_sends_null_quantiles_and_made_up_request_id(server):
    status, headers, body = post_json(server.http_port, FORECAST, forecast_body(horizon=2))
    assert status == 200, body
    assert body["outputs"][0]["content"][0]["mean_forecast"] == [5.0, 5.0]
    assert body["outputs"][0]["content"][0]["quantiles"] is None
    assert len(headers["x-request-id"]) >= 16


def test_a_dict_answer_is_validated_and_sent_with_its_extra_fields(server):
    status, _, body = post_json(server.http_port, FORECAST, forecast_body("dict", horizon=1),
                                {"X-Forecast-Tag": "from-header"})
    assert status == 200, body
    assert body == {"id": "dict-1", "created_at": 0, "status": "completed", "error": None, "model": "dict",
                    "outputs": [], "usage": None, "echo_header": "from-header"}


# --- bad bodies: 400, naming the field ---------------------------------------------------------------------
_DROP = object()


def _changed(path, value=_DROP):
    """forecast_body() as JSON bytes with the field at ``path`` set to ``value``, or left out."""
    doc = forecast_body()
    target = doc
    for part in path[:-1]:
        target = target[part]
    if value is _DROP:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return json.dumps(doc).encode()


BAD_BODIES = [
    ("not-json", b'{"model": "naive", "inputs": [', "Unrecognized request format"),
    ("empty", b"", "the request body is empty"),
    ("not-an-object", b'[{"model": "naive"}]', "a forecast request must be a JSON object, got list"),
    ("missing-options", _changed(["options"]), "invalid forecast request: options is required"),
    ("missing-model", _changed(["model"]), "invalid forecast request: model is required"),
    ("missing-series", _changed(["inputs", 0, "series"]), "invalid forecast request: inputs[0].series is required"),
    ("missing-horizon", _changed(["options", "horizon"]), "options.horizon is required"),
    ("horizon-not-int", _changed(["options", "horizon"], "three"),
     "invalid forecast request: options.horizon: Input should be a valid integer, unable to parse string as an "
     "integer (got 'three')"),
    ("series-not-numbers", _changed(["inputs", 0, "series"], [1.0, "x"]),
     "inputs[0].series[1]: Input should be a valid number, unable to parse string as a number (got 'x')"),
    ("series-not-list", _changed(["inputs", 0, "series"], 7), "inputs[0].series: Input should be a valid list (got 7)"),
    ("inputs-not-list", _changed(["inputs"], {"name": "x"}), "inputs: Input should be a valid list"),
    ("unknown-frequency", _changed(["inputs", 0, "frequency"], "fortnight"),
     "inputs[0].frequency: Input should be 'second', 'S', 'minute', 'T', 'hour', 'H', 'day', 'D', 'week', 'W', "
     "'month', 'M', 'quarter', 'Q', 'year' or 'Y' (got 'fortnight')"),
    ("unknown-series-type", _changed(["inputs", 0, "type"], "scalar"),
     "inputs[0].type: Input should be 'univariate_time_series' or 'multivariate_time_series' (got 'scalar')"),
    ("model-not-string", _changed(["model"], 5), "model: Input should be a valid string (got 5)"),
    ("quantiles-not-list", _changed(["options", "quantiles"], "median"),
     "options.quantiles: Input should be a valid list"),
]


@pytest.mark.parametrize("body,message", [case[1:] for case in BAD_BODIES], ids=[case[0] for case in BAD_BODIES])
def test_bad_body_is_400_naming_the_field(server, body, message):
    got = request(server.http_port, "POST", FORECAST, body, {"Content-Type": "application/json"})
    assert_error_answer(server.http_port, got, 400, message)


def test_several_problems_are_counted_after_the_first(server):
    doc = {"model": "naive", "inputs": [{"type": "univariate_time_series", "name": "a"}]}
    assert_error_answer(server.http_port, forecast(server, doc), 400,
                        "invalid forecast request: inputs[0].series is required; and 2 more problems")


# --- which model -------------------------------------------------------------------------------------------
def test_unknown_model_is_404(server):
    assert_error_answer(server.http_port, forecast(server, forecast_body("nope")), 404,
                        "Model with name nope does not exist.")


def test_a_model_that_does_not_forecast_is_404(server):
    assert_error_answer(server.http_port, forecast(server, forecast_body("echo")), 404,
                        "Model with name echo is not a forecasting model")


def test_a_model_that_is_not_ready_is_503(server):
    assert_error_answer(server.http_port, forecast(server, forecast_body("unready")), 503,
                        "Model with name unready is not ready.")


def test_models_list_names_the_forecasting_models_only(server):
    status, headers, body = request(server.http_port, "GET", TIMESERIES_MODELS)
    assert status == 200 and headers["content-type"] == "application/json"
    assert sorted(json.loads(body)) == ["broken", "dict", "naive", "unready"]


def test_a_forecaster_loaded_later_is_listed_and_forecasts(server):
    assert_error_answer(server.http_port, forecast(server, forecast_body("late-one")), 404,
                        "Model with name late-one does not exist.")
    status, _, body = request(server.http_port, "POST", "/v2/repository/models/late-one/load", b"")
    assert status == 200, body
    assert "late-one" in json.loads(request(server.http_port, "GET", TIMESERIES_MODELS)[2])
    status, _, body = post_json(server.http_port, FORECAST, forecast_body("late-one", horizon=1))
    assert status == 200 and body["model"] == "late-one", body
    assert body["outputs"][0]["content"][0]["mean_forecast"] == [5.0]


def test_models_list_is_empty_on_a_server_without_forecasters(zoo):
    status, _, body = request(zoo.http_port, "GET", TIMESERIES_MODELS)
    assert status == 200 and json.loads(body) == []
    assert_error_answer(zoo.http_port, forecast(zoo, forecast_body("echo")), 404,
                        "Model with name echo is not a forecasting model")


# --- what the model answers --------------------------------------------------------------------------------
def test_a_returned_error_response_is_sent_with_its_code(server):
    assert_error_response(forecast(server, forecast_body(horizon=0)), 400, {
        "code": "400", "message": "the horizon must be at least 1, got 0", "param": "options.horizon",
        "type": "invalid_horizon"})


def test_an_error_response_without_code_is_400_and_says_so(server):
    assert_error_response(forecast(server, forecast_body(horizon=5000)), 400, {
        "code": "400", "message": "at most 1000 steps are forecast", "param": None, "type": "invalid_horizon"})


def test_a_raised_time_series_error_is_sent_with_its_code(server):
    assert_error_response(forecast(server, forecast_body(quantiles=[0.5, 1.5])), 422, {
        "code": "422", "message": "quantiles must lie between 0 and 1", "param": "options.quantiles",
        "type": "invalid_quantile"})
    assert_error_response(forecast(server, forecast_body(inputs=[series(start=None)])), 400, {
        "code": "400", "message": "series sales has no start_timestamp", "param": "inputs.start_timestamp",
        "type": "missing_start"})


def test_a_time_series_error_with_a_message_is_400(server):
    assert_error_response(forecast(server, forecast_body(season_length=9)), 400, {
        "code": "400", "message": "series sales has 5 points, fewer than a season (9)", "param": "",
        "type": "TimeSeriesError"})


def test_model_faults_are_500_and_typed_errors_keep_their_status(server):
    assert_error_answer(server.http_port, forecast(server, forecast_body("broken", horizon=1)), 500,
                        "model 'broken' returned str, not a ForecastResponse or an ErrorResponse")
    assert_error_answer(server.http_port, forecast(server, forecast_body("broken", horizon=2)), 500,
                        "ZeroDivisionError")
    assert_error_answer(server.http_port, forecast(server, forecast_body("broken", horizon=3)), 400,
                        "horizon must be 1 or 2")
    assert_error_answer(server.http_port, forecast(server, forecast_body("dict", horizon=2)), 500,
                        "model 'dict' returned a dict that is not a ForecastResponse: outputs is required")


def test_wrong_method_is_answered_with_a_json_error(server):
    status, _, body = request(server.http_port, "GET", FORECAST)
    assert status == 405 and "error" in json.loads(body)


# --- pydantic stays off the v1/v2 paths --------------------------------------------------------------------
def _loaded_v1(plain, names):
    status, _, body = post_json(plain.http_port, "/v1/models/modules:predict", {"instances": names})
    assert status == 200, body
    return dict(zip(names, body["predictions"], strict=True))


def test_a_plain_v1_v2_server_never_imports_pydantic(start_server):
    plain = start_server("tests/models/modules.py")
    names = ["pydantic", "kserve_sdk.timeseries.model", "kserve_sdk.timeseries.dataplane"]
    v2 = {"inputs": [{"name": "NAMES", "shape": [1], "datatype": "BYTES", "data": ["pydantic"]}]}
    status, _, body = post_json(plain.http_port, "/v2/models/modules/infer", v2)
    assert status == 200 and body["outputs"][0]["data"] == [False], body
    client = grpcclient.InferenceServerClient(plain.grpc_url)
    try:
        tensor = grpcclient.InferInput("NAMES", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([b"pydantic"], dtype=object))
        assert client.infer("modules", [tensor]).as_numpy("LOADED").tolist() == [False]
    finally:
        client.close()
    assert request(plain.http_port, "GET", TIMESERIES_MODELS)[2] == b"[]"  # listing needs no pydantic either
    assert _loaded_v1(plain, names) == {"pydantic": False, "kserve_sdk.timeseries.model": True,
                                        "kserve_sdk.timeseries.dataplane": False}
    # the first forecast request loads the types (and is answered: no such model)
    assert forecast(plain, forecast_body("modules"))[0] == 404
    assert _loaded_v1(plain, names)["pydantic"] is True


# --- the answers fit protocol/rest_v1.yaml -----------------------------------------------------------------
DOCUMENTED = [
    ("ok", forecast_body(quantiles=[0.1]), 200),
    ("bad-body", forecast_body(horizon="x"), 400),
    ("model-error-response", forecast_body(horizon=0), 400),
    ("model-error-response-422", forecast_body(quantiles=[2.0]), 422),
    ("unknown-model", forecast_body("nope"), 404),
    ("not-ready", forecast_body("unready"), 503),
    ("model-fault", forecast_body("broken", horizon=2), 500),
]


@pytest.mark.parametrize("doc,status", [case[1:] for case in DOCUMENTED], ids=[case[0] for case in DOCUMENTED])
def test_forecast_answers_fit_the_openapi_document(server, doc, status):
    document = openapi_document()
    responses = document["paths"][FORECAST]["post"]["responses"]
    responses.setdefault(str(status), responses["default"])  # check_response reads the status' own entry
    body = json.dumps(doc).encode()
    if status != 400:
        check_request(document, FORECAST, "post", body, "application/json")
    got, headers, answer = forecast(server, doc)
    assert got == status, answer
    check_response(document, FORECAST, "post", got, headers, answer)
    status, headers, answer = request(server.http_port, "GET", TIMESERIES_MODELS)
    check_response(document, TIMESERIES_MODELS, "get", status, headers, answer)

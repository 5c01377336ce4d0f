"""protocol/rest/timeseries/codec.py: forecast requests decoded (every bad body a 400 naming its field) and
forecast answers encoded with their status."""
import orjson
import pytest

from kserve_sdk.errors import InvalidInput
from kserve_sdk.protocol.rest.timeseries import ErrorResponse, ForecastRequest, ForecastResponse, create_error_response
from kserve_sdk.protocol.rest.timeseries.codec import decode_forecast_request, encode_forecast_result

GOOD = {"model": "m", "inputs": [{"type": "univariate_time_series", "name": "a", "series": [1, 2, 3],
                                  "frequency": "D", "start_timestamp": "2024-01-01T00:00:00Z"}],
        "options": {"horizon": 2, "quantiles": [0.1, 0.9]}}


def with_(path, value):
    doc = orjson.loads(orjson.dumps(GOOD))
    *parents, last = path
    target = doc
    for key in parents:
        target = target[key]
    if value is ...:
        del target[last]
    else:
        target[last] = value
    return orjson.dumps(doc)


def test_a_good_request_decodes():
    request = decode_forecast_request(orjson.dumps(GOOD))
    assert isinstance(request, ForecastRequest) and request.inputs[0].series == [1.0, 2.0, 3.0]
    assert request.options.horizon == 2 and request.options.quantiles == [0.1, 0.9]


@pytest.mark.parametrize("body,message", [
    (b"", "the request body is empty"),
    (b"{]", "Unrecognized request format"),
    (b"[]", "a forecast request must be a JSON object, got list"),
    (b"3", "a forecast request must be a JSON object, got int"),
    (with_(["model"], ...), "invalid forecast request: model is required"),
    (with_(["inputs", 0, "frequency"], "fortnight"), r"inputs\[0\].frequency: Input should be .*\(got 'fortnight'\)"),
    (with_(["inputs", 0, "series", 1], "x"), r"inputs\[0\].series\[1\]: "),
    (with_(["options", "horizon"], "soon"), r"options.horizon: Input should be a valid integer"),
    (with_(["inputs"], "a"), r"inputs: Input should be a valid list \(got 'a'\)"),
    (with_(["options"], ...), "options is required"),
])
def test_a_bad_request_is_named(body, message):
    with pytest.raises(InvalidInput, match=message):
        decode_forecast_request(body)


def test_a_long_wrong_value_is_shortened_in_the_message():
    with pytest.raises(InvalidInput) as info:
        decode_forecast_request(with_(["inputs", 0, "frequency"], "z" * 500))
    assert "z" * 56 + "..." in str(info.value) and "z" * 61 not in str(info.value)


def test_a_forecast_answer_is_200():
    response = ForecastResponse(id="r", created_at=1, status="completed", model="m", outputs=[])
    status, body = encode_forecast_result(response)
    assert status == 200 and orjson.loads(body)["id"] == "r"


@pytest.mark.parametrize("code,status", [("404", 404), ("429", 429), ("200", 500), ("teapot", 500), ("600", 500)])
def test_an_error_answer_takes_its_code_as_the_status(code, status):
    answer = create_error_response("no", status_code=404)
    answer.error.code = code
    got, body = encode_forecast_result(answer)
    assert got == status and orjson.loads(body)["error"]["code"] == code


def test_an_error_answer_without_a_code_is_a_400_that_says_so():
    status, body = encode_forecast_result(ErrorResponse(error={"message": "m", "type": "t"}))
    assert status == 400 and orjson.loads(body)["error"]["code"] == "400"

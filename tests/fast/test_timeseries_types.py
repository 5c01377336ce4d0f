"""KServe's time-series types, in process: names, defaults, enums, nested dicts validated into models,
FREQUENCY_MAP's calendar steps, and the TimeSeriesModel base class."""
import inspect
from datetime import datetime

import pytest
from pydantic import ValidationError

import kserve_sdk
from kserve_sdk.protocol.rest import timeseries
from kserve_sdk.protocol.rest.timeseries import (
    FREQUENCY_MAP,
    Error,
    ErrorResponse,
    ForecastOptions,
    ForecastOutput,
    ForecastRequest,
    ForecastResponse,
    Frequency,
    Metadata,
    Status,
    TimeSeriesError,
    TimeSeriesForecast,
    TimeSeriesInput,
    TimeSeriesType,
    Usage,
    create_error_response,
)
from kserve_sdk.protocol.rest.timeseries.codec import field_path

# the names KServe's kserve.protocol.rest.timeseries.types defines
KSERVE_TYPES = ["TimeSeries", "Error", "ErrorResponse", "Frequency", "FREQUENCY_MAP", "Status", "TimeSeriesType",
                "TimeSeriesInput", "ForecastOptions", "Metadata", "ForecastRequest", "TimeSeriesForecast",
                "ForecastOutput", "Usage", "ForecastResponse"]


@pytest.mark.parametrize("name", KSERVE_TYPES)
def test_every_name_of_kserves_types_module_is_there(name):
    from kserve_sdk.protocol.rest.timeseries import types

    assert hasattr(types, name) and hasattr(timeseries, name)


def test_enum_values_are_kserves():
    assert [f.value for f in Frequency] == ["second", "S", "minute", "T", "hour", "H", "day", "D", "week", "W",
                                            "month", "M", "quarter", "Q", "year", "Y"]
    assert [s.value for s in Status] == ["completed", "error", "pending", "partial"]
    assert [t.value for t in TimeSeriesType] == ["univariate_time_series", "multivariate_time_series"]
    assert Frequency("D") is Frequency.DAY_SHORT and Frequency.DAY == "day"


def test_nested_dicts_validate_into_the_models_with_kserves_defaults():
    request = ForecastRequest(model="m", inputs=[{"type": "univariate_time_series", "name": "a", "series": [1, 2],
                                                  "frequency": "H"}],
                              options={"horizon": "4", "season_length": 7})
    entry = request.inputs[0]
    assert isinstance(entry, TimeSeriesInput) and isinstance(request.options, ForecastOptions)
    assert entry.type is TimeSeriesType.UNIVARIATE and entry.frequency is Frequency.HOUR_SHORT
    assert entry.series == [1.0, 2.0] and entry.start_timestamp is None
    assert request.options.horizon == 4 and request.options.quantiles is None
    assert request.options.season_length == 7  # extra fields are kept, as KServe's model_config allows
    assert request.metadata is None
    assert isinstance(ForecastRequest(model="m", inputs=[], options={"horizon": 1}, metadata={"k": 1}).metadata,
                      Metadata)


def test_multivariate_series_and_a_full_response():
    response = ForecastResponse(
        id="r", created_at=1, status="completed", model="m",
        outputs=[{"type": "time_series_forecast", "id": "o", "status": "partial",
                  "content": [{"type": "multivariate_time_series", "name": "a", "mean_forecast": [[1, 2], [3, 4]],
                               "frequency": "month", "start_timestamp": "2024-01-01T00:00:00Z",
                               "quantiles": {"0.9": [[2, 3], [4, 5]]}}]}],
        usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})
    output = response.outputs[0]
    assert isinstance(output, ForecastOutput) and output.status is Status.PARTIAL and output.error is None
    assert isinstance(output.content[0], TimeSeriesForecast) and output.content[0].mean_forecast == [[1, 2], [3, 4]]
    assert isinstance(response.usage, Usage) and response.error is None
    assert response.model_dump(mode="json")["outputs"][0]["content"][0]["frequency"] == "month"


def test_required_fields_are_kserves():
    with pytest.raises(ValidationError) as info:
        ForecastResponse()
    assert {e["loc"][0] for e in info.value.errors()} == {"id", "created_at", "status", "model", "outputs"}
    with pytest.raises(ValidationError) as info:
        TimeSeriesForecast()
    assert {e["loc"][0] for e in info.value.errors()} == {"type", "name", "mean_forecast", "frequency",
                                                          "start_timestamp"}
    with pytest.raises(ValidationError):
        Error(message="no type")
    # error objects drop extra fields, as KServe's do
    assert Error(message="m", type="t", extra=1).model_dump() == {"code": None, "message": "m", "param": None,
                                                                  "type": "t"}


@pytest.mark.parametrize("frequency,steps,expected", [
    ("S", 90, "2024-01-31T00:01:30"), ("minute", 5, "2024-01-31T00:05:00"), ("H", 25, "2024-02-01T01:00:00"),
    ("D", 1, "2024-02-01T00:00:00"), ("week", 2, "2024-02-14T00:00:00"), ("M", 1, "2024-02-29T00:00:00"),
    ("month", 13, "2025-02-28T00:00:00"), ("Q", 1, "2024-04-30T00:00:00"), ("year", 1, "2025-01-31T00:00:00"),
])
def test_frequency_map_steps_in_calendar_units(frequency, steps, expected):
    assert (datetime(2024, 1, 31) + FREQUENCY_MAP[frequency](steps)).isoformat() == expected


def test_frequency_map_has_every_frequency_and_takes_members():
    assert set(FREQUENCY_MAP) == {f.value for f in Frequency}
    assert FREQUENCY_MAP[Frequency.QUARTER] is FREQUENCY_MAP["quarter"]


def test_create_error_response_and_time_series_error():
    response = create_error_response("bad", param="options.horizon")
    assert response.model_dump() == {"error": {"code": "400", "message": "bad", "param": "options.horizon",
                                               "type": "BadRequestError"}}
    assert create_error_response("gone", "not_found", status_code=404).error.code == "404"
    assert str(TimeSeriesError(response)) == "bad" and str(TimeSeriesError("plain")) == "plain"
    assert isinstance(ErrorResponse(error={"message": "m", "type": "t"}).error, Error)


def test_field_path_reads_like_a_path():
    assert field_path(("inputs", 0, "series", "list[float]", 3)) == "inputs[0].series[3]"
    assert field_path(("options", "horizon")) == "options.horizon"
    assert field_path(()) == ""


def test_time_series_model_is_top_level_abstract_and_ready():
    class Constant(kserve_sdk.TimeSeriesModel):
        async def forecast(self, request, context=None):
            return None

    with pytest.raises(TypeError):
        kserve_sdk.TimeSeriesModel("no-forecast")
    model = Constant("c")
    assert model.name == "c" and model.ready is True and isinstance(model, kserve_sdk.BaseKServeModel)


def test_signatures_are_kserves():
    def params(fn):
        return list(inspect.signature(fn).parameters)

    assert params(kserve_sdk.TimeSeriesModel.__init__) == ["self", "name"]
    assert params(kserve_sdk.TimeSeriesModel.forecast) == ["self", "request", "context"]
    assert inspect.iscoroutinefunction(kserve_sdk.TimeSeriesModel.forecast)
    assert params(create_error_response) == ["message", "err_type", "param", "status_code"]
    assert params(TimeSeriesError.__init__) == ["self", "response"]

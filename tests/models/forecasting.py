"""Forecasting models, written as a KServe user would: a seasonal-naive forecaster on numpy, and models
that answer errors in each of the ways a forecasting model can.

Served beside a v1 model ("echo", which does not forecast) and a repository that loads "late-<name>"
forecasters on demand through ``/v2/repository/models/<m>/load``.
"""
import time
import uuid
from datetime import datetime

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import ModelRepository
from kserve_sdk.protocol.rest.timeseries import (
    FREQUENCY_MAP,
    Error,
    ErrorResponse,
    ForecastOutput,
    ForecastRequest,
    ForecastResponse,
    Status,
    TimeSeriesError,
    TimeSeriesForecast,
    Usage,
    create_error_response,
)

TIMESTAMP = "%Y-%m-%dT%H:%M:%SZ"


class SeasonalNaive(kserve.TimeSeriesModel):
    """Each step repeats the value one season earlier (``options.season_length``, default 1: the last
    value); a quantile q adds the q-quantile of the in-sample seasonal differences."""

    async def forecast(self, request: ForecastRequest, context=None):
        horizon, season = request.options.horizon, getattr(request.options, "season_length", 1)
        if horizon < 1:
            return ErrorResponse(error=Error(code="400", type="invalid_horizon", param="options.horizon",
                                             message=f"the horizon must be at least 1, got {horizon}"))
        if horizon > 1000:  # no code: answered 400
            return ErrorResponse(error=Error(type="invalid_horizon", message="at most 1000 steps are forecast"))
        quantiles = request.options.quantiles or []
        if any(not 0 < q < 1 for q in quantiles):
            raise TimeSeriesError(create_error_response("quantiles must lie between 0 and 1", "invalid_quantile",
                                                        "options.quantiles", 422))
        outputs = [self._forecast_one(series, horizon, season, quantiles) for series in request.inputs]
        return ForecastResponse(
            id=str(uuid.uuid4()), created_at=int(time.time()), status=Status.COMPLETED, model=request.model,
            outputs=outputs, usage=Usage(prompt_tokens=sum(len(s.series) for s in request.inputs),
                                         completion_tokens=horizon * len(request.inputs),
                                         total_tokens=sum(len(s.series) for s in request.inputs)
                                         + horizon * len(request.inputs)))

    @staticmethod
    def _forecast_one(series, horizon, season, quantiles):
        values = np.asarray(series.series, dtype=np.float64)
        if len(values) < season:
            raise TimeSeriesError(f"series {series.name} has {len(values)} points, fewer than a season ({season})")
        if series.start_timestamp is None:
            raise TimeSeriesError(create_error_response(f"series {series.name} has no start_timestamp",
                                                        "missing_start", "inputs.start_timestamp"))
        last_season = values[-season:]
        mean = last_season[np.arange(horizon) % season]
        residuals = values[season:] - values[:-season] if len(values) > season else np.zeros((1,) + values.shape[1:])
        start = datetime.strptime(series.start_timestamp, TIMESTAMP) + FREQUENCY_MAP[series.frequency](len(values))
        forecast = TimeSeriesForecast(
            type=series.type, name=series.name, mean_forecast=mean.tolist(), frequency=series.frequency,
            start_timestamp=start.strftime(TIMESTAMP),
            quantiles={str(q): (mean + np.quantile(residuals, q, axis=0)).tolist() for q in quantiles} or None)
        return ForecastOutput(type="time_series_forecast", id=str(uuid.uuid4()), status=Status.COMPLETED,
                              content=[forecast])


class DictForecaster(kserve.TimeSeriesModel):
    """Answers a plain dict: a valid ForecastResponse for horizon 1, one missing ``outputs`` otherwise."""

    async def forecast(self, request, context=None):
        answer = {"id": "dict-1", "created_at": 0, "status": "completed", "model": self.name,
                  "outputs": [], "echo_header": context["headers"].get("x-forecast-tag")}
        if request.options.horizon != 1:
            del answer["outputs"]
        return answer


class Broken(kserve.TimeSeriesModel):
    """horizon 1: returns a string; horizon 2: raises ZeroDivisionError; else a typed InvalidInput."""

    async def forecast(self, request, context=None):
        if request.options.horizon == 1:
            return "not a forecast"
        if request.options.horizon == 2:
            return 1 / 0
        raise kserve.errors.InvalidInput("horizon must be 1 or 2")


class Unready(kserve.TimeSeriesModel):
    """A forecasting model that never becomes ready."""

    async def healthy(self):
        return False

    async def forecast(self, request, context=None):
        raise AssertionError("never called")


class Echo(kserve.Model):
    """A v1 model, which does not forecast."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        return {"predictions": payload["instances"]}


class Repository(ModelRepository):
    """Loads ``late-<anything>`` as a SeasonalNaive forecaster on demand."""

    def load(self, name: str) -> bool:
        if not name.startswith("late-"):
            return False
        self.update(SeasonalNaive(name))
        return True


if __name__ == "__main__":
    models = [SeasonalNaive("naive"), DictForecaster("dict"), Broken("broken"), Unready("unready"), Echo("echo")]
    kserve.ModelServer(registered_models=Repository()).start(models)

"""The time-series forecasting API's request and response documents, as pydantic models.

Field names, defaults and enum values are those of KServe's ``kserve.protocol.rest.timeseries.types``, so a
document written for KServe validates here, and nested dicts given to a constructor become these models.
Unknown extra fields are kept where KServe keeps them (everywhere but in the error objects, which drop them).

This module imports pydantic: the server loads it only when a forecast request arrives, never on the v1/v2
paths.
"""
from datetime import timedelta
from enum import Enum
from typing import Callable, Dict, List, Optional, Union

from dateutil.relativedelta import relativedelta
from pydantic import BaseModel, ConfigDict, Field

#: One observed or forecast series: a list of values (univariate) or a list of rows (multivariate).
TimeSeries = Union[List[float], List[List[float]]]

_KEEP_EXTRA = ConfigDict(extra="allow")


class Error(BaseModel):
    """What went wrong: a message, a type, and optionally the HTTP status code (as a string) and the field."""

    code: Optional[str] = Field(None, description="HTTP status code of the error, as a string.")
    message: str = Field(..., description="What went wrong.")
    param: Optional[str] = Field(None, description="The request field the error is about.")
    type: str = Field(..., description="Kind of error, e.g. invalid_horizon.")


class ErrorResponse(BaseModel):
    """An error answer: ``{"error": {...}}``, sent with ``error.code`` as the HTTP status."""

    error: Error


class Frequency(str, Enum):
    """How far apart the points of a series are: a long name or its one-letter short form."""

    SECOND = "second"
    SECOND_SHORT = "S"
    MINUTE = "minute"
    MINUTE_SHORT = "T"
    HOUR = "hour"
    HOUR_SHORT = "H"
    DAY = "day"
    DAY_SHORT = "D"
    WEEK = "week"
    WEEK_SHORT = "W"
    MONTH = "month"
    MONTH_SHORT = "M"
    QUARTER = "quarter"
    QUARTER_SHORT = "Q"
    YEAR = "year"
    YEAR_SHORT = "Y"


def _steps(unit: str, per_step: int) -> Callable[[int], Union[timedelta, relativedelta]]:
    """A function of ``steps`` giving the time that many points span, ``per_step`` units each; months and
    years are calendar ones, so that adding them to a timestamp keeps its day of the month."""
    if unit in ("months", "years"):
        return lambda steps: relativedelta(**{unit: per_step * steps})
    return lambda steps: timedelta(**{unit: per_step * steps})


_STEP = {"SECOND": ("seconds", 1), "MINUTE": ("minutes", 1), "HOUR": ("hours", 1), "DAY": ("days", 1),
         "WEEK": ("weeks", 1), "MONTH": ("months", 1), "QUARTER": ("months", 3), "YEAR": ("years", 1)}

#: Frequency value (long or short, or a Frequency member) -> function(steps) giving the time they span;
#: ``start + FREQUENCY_MAP[frequency](len(series))`` is where a forecast of the series starts.
FREQUENCY_MAP: Dict[str, Callable[[int], Union[timedelta, relativedelta]]] = {
    f.value: _steps(*_STEP[f.name.removesuffix("_SHORT")]) for f in Frequency}


class Status(str, Enum):
    """Where a whole request, or one of its outputs, stands."""

    COMPLETED = "completed"
    ERROR = "error"
    PENDING = "pending"
    PARTIAL = "partial"


class TimeSeriesType(str, Enum):
    """Whether a series has one value per point or several."""

    UNIVARIATE = "univariate_time_series"
    MULTIVARIATE = "multivariate_time_series"


class TimeSeriesInput(BaseModel):
    """One observed series to forecast from."""

    model_config = _KEEP_EXTRA
    type: TimeSeriesType = Field(..., description="univariate_time_series or multivariate_time_series.")
    name: str = Field(..., description="The series' name; its forecast carries the same name.")
    series: TimeSeries = Field(..., description="The observed values: a list of numbers, or of rows of numbers.")
    frequency: Frequency = Field(..., description="How far apart the points are.")
    start_timestamp: Optional[str] = Field(None, description="ISO 8601 time of the first point.")


class ForecastOptions(BaseModel):
    """How far ahead to forecast, and which quantiles besides the mean."""

    model_config = _KEEP_EXTRA
    horizon: int = Field(..., description="How many points to forecast.")
    quantiles: Optional[List[float]] = Field(None, description="Quantiles to forecast too, e.g. [0.1, 0.9].")


class Metadata(BaseModel):
    """Free-form metadata the caller attaches to a request (any fields)."""

    model_config = _KEEP_EXTRA


class ForecastRequest(BaseModel):
    """The body of ``POST /v1/timeseries/forecast``."""

    model_config = _KEEP_EXTRA
    model: str = Field(..., description="Name of the served forecasting model to ask.")
    inputs: List[TimeSeriesInput] = Field(..., description="The series to forecast.")
    options: ForecastOptions = Field(..., description="Horizon, quantiles and model-specific options.")
    metadata: Optional[Metadata] = Field(None, description="Caller's metadata.")


class TimeSeriesForecast(BaseModel):
    """The forecast of one input series."""

    model_config = _KEEP_EXTRA
    type: TimeSeriesType = Field(..., description="univariate_time_series or multivariate_time_series.")
    name: str = Field(..., description="The input series' name.")
    mean_forecast: TimeSeries = Field(..., description="The forecast values, one (or one row) per step.")
    frequency: Frequency = Field(..., description="How far apart the forecast points are.")
    start_timestamp: str = Field(..., description="ISO 8601 time of the first forecast point.")
    quantiles: Optional[Dict[str, TimeSeries]] = Field(None, description="Quantile (as a string) -> its forecast.")


class ForecastOutput(BaseModel):
    """One result of a request, holding forecasts of its series."""

    model_config = _KEEP_EXTRA
    type: str = Field(..., description="Kind of output, e.g. time_series_forecast.")
    id: str = Field(..., description="Identifier of this output.")
    status: Status = Field(..., description="Whether this output is complete.")
    content: List[TimeSeriesForecast] = Field(..., description="The forecasts, one per input series.")
    error: Optional[Error] = Field(None, description="Why this output failed, when it did.")


class Usage(BaseModel):
    """What a request cost, counted in tokens as language models count them."""

    model_config = _KEEP_EXTRA
    prompt_tokens: int = Field(..., description="Tokens the input took.")
    completion_tokens: int = Field(..., description="Tokens the forecast took.")
    total_tokens: int = Field(..., description="Both together.")


class ForecastResponse(BaseModel):
    """The answer of ``POST /v1/timeseries/forecast``."""

    model_config = _KEEP_EXTRA
    id: str = Field(..., description="Identifier of this response.")
    created_at: int = Field(..., description="When it was made, in Unix seconds.")
    status: Status = Field(..., description="Whether the whole request is complete.")
    error: Optional[Error] = Field(None, description="Why the request failed, when it did.")
    model: str = Field(..., description="The model that forecast.")
    outputs: List[ForecastOutput] = Field(..., description="The results.")
    usage: Optional[Usage] = Field(None, description="What the request cost.")

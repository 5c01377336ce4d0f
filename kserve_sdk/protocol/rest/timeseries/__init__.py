"""Time-series forecasting (KServe's ``kserve.protocol.rest.timeseries``): the request and response types
and the errors a forecasting model answers with.

A model serves ``POST /v1/timeseries/forecast`` by subclassing ``kserve_sdk.TimeSeriesModel`` and writing
``async def forecast(self, request, context=None)``. Importing this package imports pydantic; serving v1 and
v2 does not.
"""
from .error import TimeSeriesError, create_error_response
from .types import (
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
    TimeSeries,
    TimeSeriesForecast,
    TimeSeriesInput,
    TimeSeriesType,
    Usage,
)

__all__ = [
    "ForecastRequest", "ForecastResponse", "TimeSeriesType", "TimeSeriesInput", "ForecastOptions", "Frequency",
    "FREQUENCY_MAP", "TimeSeriesForecast", "ForecastOutput", "Status", "Usage", "Error", "ErrorResponse",
    "Metadata", "TimeSeries", "TimeSeriesError", "create_error_response",
]

"""Forecast calls below the HTTP adapter: find the forecasting model, call its ``forecast``, and bring what
it answered to a ForecastResponse or an ErrorResponse (timeseries/api.py encodes it).

This module imports pydantic (through the types): timeseries/api.py imports it at the first forecast.
"""
from typing import Any, Dict, Optional, Union

from pydantic import ValidationError

from ..dataplane import DataPlane
from ..errors import InferenceError, ModelNotFound
from ..lifecycle import Call
from ..protocol.rest.json_body import describe_validation_error
from ..protocol.rest.timeseries.error import TimeSeriesError, create_error_response
from ..protocol.rest.timeseries.types import ErrorResponse, ForecastRequest, ForecastResponse
from .model import is_forecasting_model


class NotAForecastingModel(ModelNotFound):
    """The named model is served but does not forecast (HTTP 404, as for a model that is not there)."""

    def __init__(self, model_name: str):
        super().__init__(model_name)
        self.reason = (f"Model with name {model_name} is not a forecasting model "
                       "(a TimeSeriesModel, or a model with an async forecast method).")


async def forecast(dataplane: DataPlane, request: ForecastRequest, headers: Dict[str, str],
                   call: Optional[Call] = None) -> Union[ForecastResponse, ErrorResponse]:
    """Ask the model ``request.model`` for a forecast, as one model call (``call``: the protocol's): ModelNotFound
    (404) when there is no such forecasting model, ModelNotReady (503) when it cannot serve, a ModelError (500)
    when its code fails, DeadlineExceeded (504) past ``--request_timeout_seconds``."""
    name = request.model
    model = await dataplane.ready_model(name)
    if not is_forecasting_model(model):
        raise NotAForecastingModel(name)
    answer = await dataplane.model_call(name, call, headers, model).run(_forecast_of(model, request, headers),
                                                                        whole_is_one_execution=True)
    return _as_forecast_result(name, answer)


async def _forecast_of(model: Any, request: ForecastRequest, headers: Dict[str, str]) -> Any:
    """The model's forecast, or the ErrorResponse a TimeSeriesError it raised stands for."""
    try:
        return await model.forecast(request, context={"headers": headers})
    except TimeSeriesError as e:
        return _error_response_of(e)


def _error_response_of(exc: TimeSeriesError) -> ErrorResponse:
    """The ErrorResponse a raised TimeSeriesError stands for (a bare message is a 400)."""
    if isinstance(exc.response, ErrorResponse):
        return exc.response
    return create_error_response(str(exc), err_type=type(exc).__name__)


def _as_forecast_result(name: str, answer: Any) -> Union[ForecastResponse, ErrorResponse]:
    """What the model returned as a ForecastResponse or an ErrorResponse; a dict is validated as a
    ForecastResponse; anything else is the model's fault (500)."""
    if isinstance(answer, (ForecastResponse, ErrorResponse)):
        return answer
    if isinstance(answer, dict):
        try:
            return ForecastResponse.model_validate(answer)
        except ValidationError as e:
            raise InferenceError(f"model '{name}' returned a dict that is not a ForecastResponse: "
                                 f"{describe_validation_error(e)}") from None
    raise InferenceError(f"model '{name}' returned {type(answer).__name__}, not a ForecastResponse or an "
                         "ErrorResponse")

"""``TimeSeriesModel``: the base class of a forecasting model, served at ``POST /v1/timeseries/forecast``.

KServe keeps this class in its Hugging Face server; here it is part of the SDK, so any custom model can
forecast. The request and response types live in ``kserve_sdk.protocol.rest.timeseries`` (pydantic), which
this module does not import, so that serving v1 and v2 never loads pydantic.
"""
import inspect
from abc import abstractmethod
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

from ..model import BaseKServeModel
from ..model_repository import ModelRepository

if TYPE_CHECKING:
    from ..protocol.rest.timeseries.types import ErrorResponse, ForecastRequest, ForecastResponse


class TimeSeriesModel(BaseKServeModel):
    """A model that forecasts time series. Ready as soon as it is made (override ``load`` to load weights
    and ``healthy`` to say when it can serve)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True

    @abstractmethod
    async def forecast(self, request: "ForecastRequest", context: Optional[Dict[str, Any]] = None
                       ) -> Union["ForecastResponse", "ErrorResponse"]:
        """Forecast the series of ``request`` (a validated ForecastRequest).

        Return a ForecastResponse (or a dict of its fields), or an ErrorResponse, whose ``error.code`` is the
        HTTP status the client gets; raising ``TimeSeriesError`` does the same. ``context["headers"]`` holds
        the request headers (lowercase names).
        """


def is_forecasting_model(model: Any) -> bool:
    """Whether a served model answers forecasts: a TimeSeriesModel, or any model with an async ``forecast``."""
    if isinstance(model, TimeSeriesModel):
        return True
    forecast = getattr(model, "forecast", None)
    return forecast is not None and inspect.iscoroutinefunction(forecast)


def forecasting_model_names(repository: ModelRepository) -> List[str]:
    """Names of the models of ``repository`` that answer forecasts."""
    return [name for name, model in repository.get_models().items() if is_forecasting_model(model)]

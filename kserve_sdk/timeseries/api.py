"""Time-series forecasting over REST, KServe's routes: ``POST /v1/timeseries/forecast`` (the body's
``model`` picks the model) and ``GET /v1/timeseries/models``."""
from ..handlers.api import RestAPI
from ..handlers.base import BaseHandler, cancel_on_disconnect
from .model import forecasting_model_names


class ForecastHandler(BaseHandler):
    """``POST /v1/timeseries/forecast``: a ForecastRequest in, a ForecastResponse or ErrorResponse out."""

    protocol, endpoint = "rest_v1", "forecast"

    @cancel_on_disconnect
    async def post(self) -> None:
        # Imported here: the types need pydantic, which a server that never forecasts should not load.
        from ..protocol.rest.timeseries.codec import decode_forecast_request, encode_forecast_result
        from .dataplane import forecast

        request = decode_forecast_request(self.request.body)
        self.open_call().model_name = request.model  # the body names the model: metrics and the access log too
        answer = await forecast(self.dataplane, request, self.request_headers(), self.call)
        status, body = encode_forecast_result(answer)
        self.set_status(status)
        self.send_body(body)


class ForecastingModelsHandler(BaseHandler):
    """``GET /v1/timeseries/models``: the names of the served forecasting models, a JSON array."""

    protocol, endpoint = "rest_v1", "timeseries_models"

    def get(self) -> None:
        self.send_json(forecasting_model_names(self.dataplane.model_registry))


#: The time-series API (always served: a model loaded later can forecast).
API = RestAPI("timeseries", [(r"/v1/timeseries/forecast", ForecastHandler),
                             (r"/v1/timeseries/models", ForecastingModelsHandler)])

"""One model per verb, each of which waits ``delay`` seconds first when the request asks: tests/test_model_call.py
runs every verb through the one model-call path (statistics, the latency line, kserve_requests_total and
``--request_timeout_seconds``).

- ``classic``: v1 ``predict`` and ``explain`` (``{"instances": [...], "delay": s}``).
- ``words``: an async-generator ``predict``, streamed over ``generate_stream`` (``parameters.delay``: before
  its first word).
- ``completer``: an OpenAI completion model (a prompt ``"delay <s> ..."``).
- ``forecaster``: a forecasting model (``options.delay``).
"""
import asyncio
import time

import kserve_sdk as kserve
from kserve_sdk.protocol.rest.openai import OpenAIGenerativeModel
from kserve_sdk.protocol.rest.openai.types import Completion, CompletionChoice, UsageInfo
from kserve_sdk.protocol.rest.timeseries import ForecastOutput, ForecastResponse, Status, TimeSeriesForecast


class Classic(kserve.Model):
    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload, headers=None):
        await asyncio.sleep(payload.get("delay", 0))
        return {"predictions": payload["instances"]}

    async def explain(self, payload, headers=None):
        await asyncio.sleep(payload.get("delay", 0))
        return {"explanations": [len(payload["instances"])]}


class Words(kserve.Model):
    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload, headers=None):
        await asyncio.sleep(payload.get("parameters", {}).get("delay", 0))
        for i, word in enumerate(payload["text_input"].split()):
            yield {"text_output": word, "index": i}


class Completer(OpenAIGenerativeModel):
    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    async def create_completion(self, request, raw_request=None, context=None):
        words = str(request.prompt).split()
        if words[:1] == ["delay"]:
            await asyncio.sleep(float(words[1]))
        return Completion(id="cmpl-1", model=self.name, choices=[
            CompletionChoice(index=0, text=" ".join(reversed(words)), finish_reason="stop")],
            usage=UsageInfo(prompt_tokens=len(words), completion_tokens=len(words), total_tokens=2 * len(words)))

    async def create_chat_completion(self, request, raw_request=None, context=None):
        raise NotImplementedError


class Forecaster(kserve.TimeSeriesModel):
    async def forecast(self, request, context=None):
        await asyncio.sleep(getattr(request.options, "delay", 0))
        series = request.inputs[0]
        return ForecastResponse(
            id="f-1", created_at=int(time.time()), status=Status.COMPLETED, model=request.model,
            outputs=[ForecastOutput(type="time_series_forecast", id="o-1", status=Status.COMPLETED, content=[
                TimeSeriesForecast(type=series.type, name=series.name, frequency=series.frequency,
                                   start_timestamp=series.start_timestamp,
                                   mean_forecast=[series.series[-1]] * request.options.horizon)])])


if __name__ == "__main__":
    models = [Classic("classic"), Words("words"), Completer("completer"), Forecaster("forecaster")]
    for model in models:
        model.ready = True
    kserve.ModelServer().start(models)

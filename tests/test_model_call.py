"""Every verb through the one model-call path (kserve_sdk/model_call.py), against a real server: v1 predict and
explain, an SSE stream, an OpenAI completion and a forecast each show in Triton's statistics, write the latency
line, are counted in kserve_requests_total, and are cut at --request_timeout_seconds with a 504."""
import time
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

TIMEOUT = 1.0  # --request_timeout_seconds
SLOW = 3.0  # what a slow call waits before answering: past TIMEOUT


def _forecast(delay: float = 0) -> dict:
    series = {"type": "univariate_time_series", "name": "s", "series": [1.0, 2.0, 3.0], "frequency": "D",
              "start_timestamp": "2026-01-01T00:00:00Z"}
    return {"model": "forecaster", "inputs": [series], "options": {"horizon": 2, "delay": delay}}


# verb -> (model, path, body of a quick call, body of a slow call, request-total labels (protocol, endpoint),
#          what a quick answer holds)
VERBS = {
    "predict": ("classic", "/v1/models/classic:predict", {"instances": [[1, 2]]},
                {"instances": [[1, 2]], "delay": SLOW}, ("rest_v1", "predict"), b'"predictions"'),
    "explain": ("classic", "/v1/models/classic:explain", {"instances": [[1, 2]]},
                {"instances": [[1, 2]], "delay": SLOW}, ("rest_v1", "explain"), b'"explanations"'),
    "stream": ("words", "/v2/models/words/generate_stream", {"text_input": "a b c"},
               {"text_input": "a b c", "parameters": {"delay": SLOW}}, ("rest_v2", "generate_stream"),
               b'"text_output":"c"'),
    "openai": ("completer", "/openai/v1/completions", {"model": "completer", "prompt": "x y"},
               {"model": "completer", "prompt": f"delay {SLOW} y"}, ("openai", "completions"), b'"text":"y x"'),
    "forecast": ("forecaster", "/v1/timeseries/forecast", _forecast(), _forecast(SLOW), ("rest_v1", "forecast"),
                 b'"mean_forecast":[3.0,3.0]'),
}


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("tests/models/model_calls.py", "--request_timeout_seconds", str(TIMEOUT), grpc=False)


def _requests_total(server, model: str, protocol: str, endpoint: str, status: str) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "kserve_requests_total" and sample.labels == {
                    "model_name": model, "protocol": protocol, "endpoint": endpoint, "status": status}:
                return sample.value
    return 0.0


def _stats(server, model: str) -> dict:
    answer = httpx.get(f"{server.url}/v2/models/{model}/stats", timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()["model_stats"][0]["inference_stats"]


def _post(server, path: str, body: dict, request_id: str) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers={"x-request-id": request_id}, timeout=30)


@pytest.mark.parametrize("verb", list(VERBS))
def test_a_quick_call_is_in_statistics_the_latency_line_and_the_request_count(server, verb):
    model, path, quick, _, (protocol, endpoint), answer_holds = VERBS[verb]
    successes = _stats(server, model)["success"]["count"]
    counted = _requests_total(server, model, protocol, endpoint, "200")
    request_id = f"quick-{verb}-{uuid.uuid4()}"

    answer = _post(server, path, quick, request_id)

    assert answer.status_code == 200, answer.text
    assert answer_holds in answer.content.replace(b", ", b",").replace(b": ", b":")
    assert _stats(server, model)["success"]["count"] == successes + 1
    assert _requests_total(server, model, protocol, endpoint, "200") == counted + 1
    line = next(line for line in server.log_with(f"requestId: {request_id},").splitlines()
                if f"requestId: {request_id}," in line)
    assert "predict_ms" in line and "postprocess_ms" in line


@pytest.mark.parametrize("verb", list(VERBS))
def test_a_call_past_the_request_timeout_is_cut_with_504_and_counted_as_a_failure(server, verb):
    model, path, _, slow, (protocol, endpoint), _ = VERBS[verb]
    failures = _stats(server, model)["fail"]["count"]
    counted = _requests_total(server, model, protocol, endpoint, "504")

    start = time.monotonic()
    answer = _post(server, path, slow, f"slow-{verb}-{uuid.uuid4()}")
    took = time.monotonic() - start

    assert answer.status_code == 504, answer.text
    assert TIMEOUT <= took < SLOW, took
    message = answer.json()["error"]
    message = message["message"] if isinstance(message, dict) else message  # OpenAI's error shape
    assert f"model '{model}' did not answer within 1 s (--request_timeout_seconds)" in message
    assert _stats(server, model)["fail"]["count"] == failures + 1
    assert _requests_total(server, model, protocol, endpoint, "504") == counted + 1

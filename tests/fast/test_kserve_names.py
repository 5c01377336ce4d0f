"""KServe 0.21's model-author names and signatures, called as KServe's source and docs call them (keywords
included), in this process: Model's settable ``protocol`` and ``required_response_headers``, the tensor helpers'
keyword names, ``kserve.model``'s functions, ``kserve.metrics``' names that need no metrics set-up,
``kserve.protocol.infer_type``'s parameter and content helpers, ``errors.WorkersShouldBeLessThanMaxWorkersError``
and the three ``kserve.protocol.rest.openai.*_model`` modules. (tests/test_kserve_names.py serves them.)"""
import asyncio
import inspect
import time

import httpx
import numpy as np
import pytest

from kserve_sdk import context, errors, metrics
from kserve_sdk.errors import InferenceError, InvalidInput, UpstreamError
from kserve_sdk.model import (
    InferReturnType,
    Model,
    PredictorConfig,
    PredictorProtocol,
    append_forwardable_headers,
    get_latency_ms,
    is_v2,
)
from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve_sdk.protocol.infer_type import (
    InferInput,
    InferOutput,
    deserialize_bytes_tensor,
    get_content,
    to_grpc_parameters,
    to_http_parameters,
)
from kserve_sdk.protocol.rest import openai as openai_package
from kserve_sdk.protocol.rest.openai import openai_chat_adapter_model, openai_model, openai_proxy_model
from kserve_sdk.protocol.rest.openai.errors import OpenAIError


# --- Model: protocol and required_response_headers are settable -----------------------------------------------
class DriverTransformer(Model):
    """KServe's feast driver-transformer sample's constructor: it sets the protocol it speaks."""

    def __init__(self, name: str, predictor_host: str, protocol: str):
        super().__init__(name)
        self.predictor_host = predictor_host
        self.protocol = protocol
        self.ready = True


@pytest.fixture
def predictor_config():
    """The server's predictor configuration (``--predictor_*``) while a test runs: v1 to 127.0.0.1:9."""
    before = context.get_predictor_config()
    context.set_predictor_config(PredictorConfig("127.0.0.1:9", "v1"))
    yield context.get_predictor_config()
    context.set_predictor_config(before)


def test_protocol_set_in_init_is_what_the_model_reads(predictor_config):
    assert DriverTransformer("t", "127.0.0.1:9", "grpc-v2").protocol == "grpc-v2"
    assert DriverTransformer("t", "127.0.0.1:9", PredictorProtocol.REST_V2).protocol == "v2"
    assert DriverTransformer("t", "127.0.0.1:9", "V2").protocol == "v2"


def test_protocol_not_set_is_the_predictor_configurations(predictor_config):
    model = Model("m")
    assert model.protocol == "v1" and model.predictor_config is predictor_config
    model.protocol = "grpc-v2"
    assert model.protocol == "grpc-v2"
    assert model.predictor_config is predictor_config  # KServe's: the server's configuration stays as it is
    model.protocol = None
    assert model.protocol == "v1"


def test_protocol_forwards_over_a_configuration_of_its_own(predictor_config):
    model = DriverTransformer("t", "127.0.0.1:9", "grpc-v2")
    over = model._config_over(predictor_config)
    assert (over.predictor_protocol, over.predictor_host) == ("grpc-v2", "127.0.0.1:9")
    assert model._config_over(predictor_config) is over  # made once
    model.protocol = "v2"
    assert model._config_over(predictor_config).predictor_protocol == "v2"


@pytest.mark.parametrize("bad", ["v3", "grpc", 2])
def test_a_protocol_that_is_none_of_the_three_is_refused(bad):
    with pytest.raises(ValueError) as e:
        DriverTransformer("t", "127.0.0.1:9", bad)
    assert str(e.value) == f"protocol must be one of v1, v2, grpc-v2 (or a PredictorProtocol); got {bad!r}"


class Headed(Model):
    def __init__(self, name: str):
        super().__init__(name)
        self.required_response_headers = True

    async def predict(self, payload, headers=None, response_headers=None):
        response_headers["x-rows"] = str(len(payload["instances"]))
        return {"predictions": payload["instances"]}


def test_required_response_headers_set_in_init_passes_response_headers():
    model = Headed("h")
    assert model.required_response_headers is True and model.return_response_headers is True
    response, headers = asyncio.run(model({"instances": [1, 2, 3]}, {}))
    assert response == {"predictions": [1, 2, 3]} and headers == {"x-rows": "3"}
    model.required_response_headers = False
    assert model.return_response_headers is False


# --- kserve.model's functions ------------------------------------------------------------------------------------
def test_get_latency_ms():
    start = time.time()
    assert get_latency_ms(start, start + 0.25) == 250.0
    assert get_latency_ms(1.0, 1.0000000000001) == 0.0  # rounded to 9 decimals, as KServe's


@pytest.mark.parametrize("protocol,v2", [(PredictorProtocol.REST_V1, False), ("v1", False), ("V1", False),
                                         (PredictorProtocol.REST_V2, True), ("v2", True),
                                         (PredictorProtocol.GRPC_V2, True), ("grpc-v2", True)])
def test_is_v2(protocol, v2):
    assert is_v2(protocol) is v2


def test_append_forwardable_headers():
    incoming = {"x-request-id": "r1", "authorization": "Bearer t", "x-b3-traceid": "b3", "cookie": "c",
                "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    forwarded = append_forwardable_headers(incoming, {"Content-Type": "application/json"})
    assert forwarded == {"Content-Type": "application/json", "x-request-id": "r1", "authorization": "Bearer t",
                         "x-b3-traceid": "b3", "traceparent": incoming["traceparent"]}
    assert append_forwardable_headers(None) == {} and append_forwardable_headers(headers=None, base=None) == {}
    base = {"a": "b"}
    append_forwardable_headers(incoming, base)
    assert base == {"a": "b"}  # a copy is returned


def test_kserves_return_type_names():
    assert "InferResponse" in str(InferReturnType) and "Awaitable" in str(InferReturnType)


# --- the tensor helpers' keyword names ---------------------------------------------------------------------------
def test_set_data_from_numpy_takes_kserves_keywords():
    infer_input = InferInput(name="x", shape=[2], datatype="FP32")
    infer_input.set_data_from_numpy(input_tensor=np.array([1.5, 2.5], np.float32), binary_data=False)
    assert infer_input.data == [1.5, 2.5] and infer_input.binary_data is False
    infer_output = InferOutput(name="y", shape=[1], datatype="INT64")
    infer_output.set_data_from_numpy(output_tensor=np.array([7], np.int64))
    assert infer_output.as_numpy().tolist() == [7] and infer_output.binary_data is True
    infer_output.set_data_from_numpy(np.array([8], np.int64), False)  # positional, as KServe's own code calls it
    assert infer_output.data == [8]
    assert list(inspect.signature(InferInput.set_data_from_numpy).parameters) == ["self", "input_tensor",
                                                                                 "binary_data"]
    assert list(inspect.signature(InferOutput.set_data_from_numpy).parameters) == ["self", "output_tensor",
                                                                                  "binary_data"]


def test_set_data_from_numpy_still_refuses_what_does_not_fit():
    infer_input = InferInput("x", [2], "FP32")
    with pytest.raises(InferenceError) as e:
        infer_input.set_data_from_numpy(input_tensor=np.array([1, 2], np.int32))
    assert str(e.value) == "got unexpected datatype INT32 from numpy array, expected FP32"
    with pytest.raises(InferenceError) as e:
        InferOutput("y", [3], "FP32").set_data_from_numpy(output_tensor=np.zeros((2, 2), np.float32))
    assert str(e.value) == "got unexpected numpy array shape [2, 2], expected [3]"


def test_deserialize_bytes_tensor_takes_encoded_tensor():
    decoded = deserialize_bytes_tensor(encoded_tensor=b"\x02\x00\x00\x00ab\x00\x00\x00\x00")
    assert decoded.dtype == np.object_ and decoded.tolist() == [b"ab", b""]
    with pytest.raises(InvalidInput) as e:
        deserialize_bytes_tensor(encoded_tensor=b"\x09\x00\x00\x00ab")
    assert str(e.value).endswith("BYTES element length 9 at offset 0 runs past the end of the data"), str(e.value)


# --- kserve.protocol.infer_type's helpers ------------------------------------------------------------------------
def test_get_content_reads_each_contents_field():
    contents = pb.InferTensorContents(int_contents=[1, -2], bytes_contents=[b"a"], fp32_contents=[0.5])
    assert get_content("INT32", contents) == [1, -2]
    assert get_content(datatype="BYTES", data=contents) == [b"a"]
    assert get_content("FP32", contents) == [0.5]
    assert get_content("FP16", contents) == []  # FP16 comes as raw contents only


def test_get_content_of_a_datatype_without_a_contents_field():
    with pytest.raises(InvalidInput) as e:
        get_content("BF16", pb.InferTensorContents())
    assert str(e.value) == "invalid content type: datatype 'BF16' has no typed gRPC contents field"


def test_parameters_go_to_grpc_and_back():
    rest = {"content_type": "pd", "binary_data_output": True, "priority": 2, "temperature": 0.5, "big": 2 ** 63}
    grpc_params = to_grpc_parameters(parameters=rest)
    assert grpc_params["content_type"] == pb.InferParameter(string_param="pd")
    assert grpc_params["binary_data_output"] == pb.InferParameter(bool_param=True)
    assert grpc_params["priority"] == pb.InferParameter(int64_param=2)
    assert grpc_params["temperature"] == pb.InferParameter(double_param=0.5)
    assert grpc_params["big"] == pb.InferParameter(uint64_param=2 ** 63)
    kept = pb.InferParameter(string_param="as is")
    assert to_grpc_parameters({"k": kept})["k"] is kept
    request = pb.ModelInferRequest(parameters=grpc_params)  # a protobuf map, as a gRPC request carries them
    assert to_http_parameters(parameters=request.parameters) == rest
    assert to_http_parameters({"plain": 1}) == {"plain": 1}


def test_a_parameter_value_grpc_cannot_carry_is_refused():
    with pytest.raises(InvalidInput) as e:
        to_grpc_parameters({"shape": [1, 2]})
    assert str(e.value) == "to_grpc: invalid parameter value: [1, 2] (parameter 'shape')"


# --- kserve.metrics and kserve.errors ---------------------------------------------------------------------------
def test_metrics_labels_and_llm_stats():
    assert metrics.PROM_LABELS == ["model_name"]
    assert metrics.get_labels("my-model") == {"model_name": "my-model"}
    stats = metrics.LLMStats(num_prompt_tokens=3)
    assert (stats.num_prompt_tokens, stats.num_generation_tokens) == (3, 0)
    assert metrics.LLMStats is type(stats) and metrics.LLMStats.__name__ == "LLMStats"
    assert metrics.LLMStats(num_prompt_tokens=1, num_generation_tokens=2).model_dump() == {
        "num_prompt_tokens": 1, "num_generation_tokens": 2}
    with pytest.raises(AttributeError) as e:
        metrics.NOT_A_METRIC  # noqa: B018
    assert str(e.value) == "module 'kserve_sdk.metrics' has no attribute 'NOT_A_METRIC'"


def test_the_stage_histograms_stand_for_the_servers_and_set_nothing_up_when_imported():
    from kserve_sdk.metrics import EXPLAIN_HIST_TIME, POST_HIST_TIME, PRE_HIST_TIME, PREDICT_HIST_TIME

    before = metrics._m  # reading an attribute of one would set the metrics up: only repr is asked here
    assert [repr(h) for h in (PRE_HIST_TIME, PREDICT_HIST_TIME, POST_HIST_TIME, EXPLAIN_HIST_TIME)] == [
        f"StageHistogram('request_{stage}_seconds')" for stage in ("preprocess", "predict", "postprocess", "explain")]
    assert metrics._m is before


def test_workers_should_be_less_than_max_workers_error():
    with pytest.raises(errors.WorkersShouldBeLessThanMaxWorkersError) as e:
        raise errors.WorkersShouldBeLessThanMaxWorkersError(max_workers=4)
    assert str(e.value) == "Workers cannot be greater than 4" and e.value.reason == str(e.value)
    assert str(errors.WorkersShouldBeLessThanMaxWorkersError()) == "Workers cannot be greater than None"


# --- kserve.protocol.rest.openai.openai_model, openai_proxy_model, openai_chat_adapter_model -------------------
def test_the_openai_modules_hold_the_packages_classes():
    for module in (openai_model, openai_proxy_model, openai_chat_adapter_model):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__} lacks {name}"
            if name in openai_package.__all__:
                assert getattr(module, name) is getattr(openai_package, name), name
    assert openai_model.ChatPrompt(prompt="p").response_role == "assistant"
    assert openai_proxy_model.COMPLETIONS_ENDPOINT == "/v1/completions"
    assert openai_proxy_model.CHAT_COMPLETIONS_ENDPOINT == "/v1/chat/completions"
    proxy = openai_proxy_model.OpenAIProxyModel(name="p", predictor_url="http://127.0.0.1:9")
    assert proxy._completions_endpoint == "http://127.0.0.1:9" + openai_proxy_model.COMPLETIONS_ENDPOINT


async def _items(*values, fail=None):
    for value in values:
        yield value
    if fail is not None:
        raise fail


def _collect(iterator):
    async def collect():
        return [item async for item in iterator]
    return asyncio.run(collect())


def test_async_mapping_iterator_maps_skips_none_and_closes_at_the_end():
    closed = []
    mapped = openai_model.AsyncMappingIterator(iterator=_items(1, 2, 3, 4),
                                               mapper=lambda n: n * 10 if n % 2 else None,
                                               close=lambda: closed.append("end"))
    assert _collect(mapped) == [10, 30] and closed == ["end"]
    kept = openai_model.AsyncMappingIterator(_items(1, 2), mapper=lambda n: None if n == 2 else n, skip_none=False)
    assert _collect(kept) == [1, None]
    assert _collect(openai_model.AsyncMappingIterator(_items("a"))) == ["a"]


def test_async_mapping_iterator_closes_when_the_source_fails():
    closed = []

    async def close():
        closed.append("async close")

    mapped = openai_model.AsyncMappingIterator(_items(1, fail=RuntimeError("upstream went away")), close=close)
    with pytest.raises(RuntimeError, match="upstream went away"):
        _collect(mapped)
    assert closed == ["async close"]


def test_async_mapping_iterator_stopped_early_closes_its_source_once():
    seen = []

    async def source():
        try:
            for n in range(10):
                yield n
        finally:
            seen.append("source closed")

    async def read_two_then_stop():
        mapped = openai_model.AsyncMappingIterator(source(), mapper=str, close=lambda: seen.append("close"))
        got = [await mapped.__anext__(), await mapped.__anext__()]
        await mapped.aclose()  # what the server does when the client leaves the stream
        await mapped.aclose()
        return got

    assert asyncio.run(read_two_then_stop()) == ["0", "1"] and seen == ["source closed", "close"]
    ended = []
    mapped = openai_model.AsyncMappingIterator(_items(1), close=lambda: ended.append("close"))
    assert _collect(mapped) == [1]
    asyncio.run(mapped.aclose())  # after the end, as the server closes every stream
    assert ended == ["close"]


def _status_error(status: int, content: bytes) -> httpx.HTTPStatusError:
    """What httpx's ``raise_for_status`` raises for an upstream's error answer."""
    request = httpx.Request("POST", "http://upstream/v1/completions")
    return httpx.HTTPStatusError(str(status), request=request, response=httpx.Response(status, content=content,
                                                                                       request=request))


UPSTREAM_FAILURES = [
    (_status_error(429, b'{"error": {"message": "slow down", "type": "RateLimit", "param": null, "code": "429"}}'),
     "429", "RateLimit", "slow down"),
    (_status_error(500, b"oops"), "502", "BadGateway", "Received invalid response from upstream: oops"),
    (httpx.ReadTimeout("read timed out"), "504", "GatewayTimeout",
     "Timed out when communicating with upstream: read timed out"),
    (httpx.ConnectError("connection refused"), "503", "ServiceUnavailableError",
     "Failed to communicate with upstream: connection refused"),
    (httpx.DecodingError("bad gzip"), "500", "InternalServerError", "Upstream request failed: bad gzip"),
    (UpstreamError(503, "cannot reach the upstream"), "503", "ServiceUnavailableError", "cannot reach the upstream"),
]


@pytest.mark.parametrize("failure,code,kind,message", UPSTREAM_FAILURES, ids=lambda v: type(v).__name__
                         if isinstance(v, Exception) else None)
def test_error_handler_answers_upstream_failures_as_openai_errors(failure, code, kind, message):
    @openai_proxy_model.error_handler
    async def create_completion(request, raw_request=None, context=None):
        raise failure

    with pytest.raises(OpenAIError) as e:
        asyncio.run(create_completion("request"))
    error = e.value.response.error
    assert (error.code, error.type, error.message) == (code, kind, message)
    assert e.value.__cause__ is failure


def test_error_handler_passes_other_errors_and_answers():
    @openai_proxy_model.error_handler
    async def works(value):
        return value * 2

    @openai_proxy_model.error_handler
    async def fails():
        raise KeyError("not an upstream failure")

    assert asyncio.run(works(value=21)) == 42 and works.__name__ == "works"
    with pytest.raises(KeyError):
        asyncio.run(fails())

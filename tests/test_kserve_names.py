"""KServe 0.21's model-author names, served: scripts written as KServe's users write them (every import is
``kserve``), run unchanged with ``python -m kserve_sdk``, answering real clients.

- a transformer that sets ``self.protocol`` and ``self.required_response_headers`` in ``__init__`` (KServe's
  feast sample does the first) forwards over the protocol it set, with no ``--predictor_protocol``, to a
  predictor that builds its v2 answer with ``InferOutput.set_data_from_numpy(output_tensor=...)``;
- a model observing ``kserve.metrics``' histograms lands in the series the server exports on /metrics;
- ``get_predict_input`` on rows of dicts, and on a v2 request of ``content_type`` "pd" (``as_dataframe``),
  without pandas: the answer says which extra to install (and so does each call, in a plain process);
- an OpenAI model built from ``kserve.protocol.rest.openai.openai_model``, ``.openai_chat_adapter_model`` and
  ``.openai_proxy_model`` answers completions, chat and a proxied completion.
The in-process checks of the same names are in tests/fast/test_kserve_names.py.
"""
import os

import pytest

from helpers import ROOT, assert_error_answer, eventually, post_json, post_json_raw, run_python, scrape, value

KSERVE = ("-m", "kserve_sdk")  # `import kserve` resolves to kserve_sdk

PREDICTOR = '''
"""A predictor: doubles the rows it is given; a v2 answer's output is named after how the request came."""
import numpy as np

from kserve import Model, ModelServer
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse
from kserve.utils.utils import get_predict_input


class Doubler(Model):
    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        doubled = np.asarray(get_predict_input(payload), dtype=np.int64) * 2
        if not isinstance(payload, InferRequest):
            return {"predictions": doubled.tolist()}
        way = "grpc" if payload.from_grpc else "rest"
        output = InferOutput(name=f"doubled-{way}", shape=list(doubled.shape), datatype="INT64")
        output.set_data_from_numpy(output_tensor=doubled, binary_data=False)
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[output])


if __name__ == "__main__":
    ModelServer().start([Doubler("rows")])
'''

TRANSFORMER = '''
"""KServe's transformer pattern: the protocol it speaks to its predictor is set in __init__, from a flag."""
import argparse

import numpy as np

from kserve import Model, ModelServer, model_server
from kserve.model import PredictorProtocol
from kserve.protocol.infer_type import InferInput, InferRequest, InferResponse


class DriverTransformer(Model):
    def __init__(self, name, predictor_host, protocol):
        super().__init__(name)
        self.predictor_host = predictor_host
        self.protocol = protocol
        self.required_response_headers = True
        self.ready = True

    def preprocess(self, payload, headers=None):
        rows = np.array(payload["instances"], dtype=np.int64)
        if self.protocol == PredictorProtocol.REST_V1.value:
            return {"instances": rows.tolist()}
        infer_input = InferInput(name="rows", shape=list(rows.shape), datatype="INT64")
        infer_input.set_data_from_numpy(input_tensor=rows, binary_data=False)
        return InferRequest(model_name=self.name, infer_inputs=[infer_input])

    def postprocess(self, result, headers=None, response_headers=None):
        response_headers["x-predictor-protocol"] = self.protocol
        if isinstance(result, InferResponse):
            output = result.outputs[0]
            return {"predictions": output.as_numpy().tolist(), "output": output.name}
        return result


parser = argparse.ArgumentParser(parents=[model_server.parser])
parser.add_argument("--speak", default=None, help="the protocol the transformer speaks to its predictor")
args, _ = parser.parse_known_args()

if __name__ == "__main__":
    ModelServer().start([DriverTransformer("rows", args.predictor_host, args.speak)])
'''

METRICS_MODEL = '''
"""A model that observes KServe's stage histograms itself."""
from kserve import Model, ModelServer
from kserve.metrics import (
    EXPLAIN_HIST_TIME, POST_HIST_TIME, PRE_HIST_TIME, PREDICT_HIST_TIME, PROM_LABELS, LLMStats, get_labels,
)


class Timed(Model):
    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        with PREDICT_HIST_TIME.labels(**get_labels(self.name)).time():
            rows = payload["instances"]
        side = get_labels("side")
        PRE_HIST_TIME.labels(**side).observe(0.25)
        POST_HIST_TIME.labels(**side).observe(0.5)
        EXPLAIN_HIST_TIME.labels(**side).observe(2.0)
        stats = LLMStats(num_prompt_tokens=len(rows))
        return {"predictions": rows, "labels": PROM_LABELS, "prompt_tokens": stats.num_prompt_tokens}


if __name__ == "__main__":
    ModelServer().start([Timed("timed")])
'''

ROWS_MODEL = '''
"""A model reading its input with get_predict_input: rows of dicts, or a v2 request of content_type "pd",
become a DataFrame."""
from kserve import Model, ModelServer
from kserve.utils.utils import get_predict_input


class Rows(Model):
    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        return {"predictions": get_predict_input(payload).to_dict("records")}


if __name__ == "__main__":
    ModelServer().start([Rows("rows")])
'''

OPENAI_MODEL = '''
"""OpenAI models from KServe's module paths: a chat adapter that shouts its prompt, and a proxy to it."""
from kserve import ModelServer, model_server
from kserve.protocol.rest.openai.openai_chat_adapter_model import (
    ChatPrompt, Completion, CompletionChoice, CompletionChunk, CompletionChunkChoice, OpenAIChatAdapterModel,
)
from kserve.protocol.rest.openai.openai_model import AsyncMappingIterator, CompletionRequest
from kserve.protocol.rest.openai.openai_proxy_model import OpenAIProxyModel
from kserve.protocol.rest.openai.types import UsageInfo


class Shouter(OpenAIChatAdapterModel):
    def apply_chat_template(self, request):
        return ChatPrompt(prompt=" ".join(m["content"] for m in request.messages), response_role="shouter")

    async def create_completion(self, request: CompletionRequest, raw_request=None, context=None):
        words = str(request.prompt).upper().split()
        if not request.stream:
            usage = UsageInfo(prompt_tokens=len(words), completion_tokens=len(words), total_tokens=2 * len(words))
            return Completion(id="cmpl-1", model=self.name, usage=usage, choices=[
                CompletionChoice(index=0, text=" ".join(words), finish_reason="stop")])

        async def each_word():
            for word in words + [None]:
                yield word

        def as_event(word):
            chunk = CompletionChunk(id="cmpl-1", model=self.name, choices=[
                CompletionChunkChoice(index=0, text=word, finish_reason=None)])
            return f"data: {chunk.model_dump_json()}\\n\\n"

        return AsyncMappingIterator(iterator=each_word(), mapper=lambda w: None if w is None else as_event(w))


class ToShouter(OpenAIProxyModel):
    def preprocess_completion_request(self, request, raw_request=None):
        request.model = "shouter"


if __name__ == "__main__":
    upstream = f"http://127.0.0.1:{model_server.args.http_port}/openai"
    ModelServer().start([Shouter("shouter"), ToShouter("proxied", predictor_url=upstream, health_endpoint=None)])
'''


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    """Each script of this module written to a file: name -> path."""
    folder = tmp_path_factory.mktemp("kserve-names")
    paths = {}
    for name, text in (("predictor", PREDICTOR), ("transformer", TRANSFORMER), ("metrics_model", METRICS_MODEL),
                       ("rows_model", ROWS_MODEL), ("openai_model", OPENAI_MODEL)):
        paths[name] = str(folder / f"{name}.py")
        with open(paths[name], "w") as f:
            f.write(text)
    return paths


# --- self.protocol and self.required_response_headers ------------------------------------------------------------
@pytest.fixture(scope="module")
def predictor(start_server, scripts):
    return start_server(scripts["predictor"], python_args=KSERVE)


@pytest.mark.parametrize("speak,port,answer", [
    ("v2", "http", {"predictions": [[2, 4], [6, 8]], "output": "doubled-rest"}),
    ("grpc-v2", "grpc", {"predictions": [[2, 4], [6, 8]], "output": "doubled-grpc"}),
    (None, "http", {"predictions": [[2, 4], [6, 8]]}),
], ids=["v2", "grpc-v2", "not-set"])
def test_a_transformer_forwards_over_the_protocol_it_set(start_server, scripts, predictor, speak, port, answer):
    """No --predictor_protocol (v1): a protocol the transformer set is what it forwards over (a v1 call to the
    gRPC port would fail), and one it did not set is the flag's; the response header it sets in postprocess
    arrives because it set required_response_headers."""
    host = predictor.grpc_url if port == "grpc" else f"127.0.0.1:{predictor.http_port}"
    flags = ["--predictor_host", host] + (["--speak", speak] if speak else [])
    transformer = start_server(scripts["transformer"], *flags, grpc=False, python_args=KSERVE)
    status, headers, body = post_json(transformer.http_port, "/v1/models/rows:predict",
                                      {"instances": [[1, 2], [3, 4]]})
    assert (status, body) == (200, answer)
    assert headers["x-predictor-protocol"] == (speak or "v1")
    transformer.stop()


# --- kserve.metrics ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("workers", ["1", "2"])
def test_kserve_metrics_names_land_in_the_served_series(start_server, scripts, workers):
    server = start_server(scripts["metrics_model"], "--workers", workers, grpc=False, python_args=KSERVE)
    status, _, body = post_json(server.http_port, "/v1/models/timed:predict", {"instances": [[1], [2], [3]]})
    assert (status, body) == (200, {"predictions": [[1], [2], [3]], "labels": ["model_name"], "prompt_tokens": 3})

    def observed() -> bool:
        samples = scrape(server)
        # the server's own observation of the predict stage and the model's, in one series
        assert value(samples, "request_predict_seconds_count", model_name="timed") == 2, samples
        assert value(samples, "request_preprocess_seconds_count", model_name="timed") == 1
        assert value(samples, "request_preprocess_seconds_sum", model_name="side") == 0.25
        assert value(samples, "request_postprocess_seconds_sum", model_name="side") == 0.5
        assert value(samples, "request_explain_seconds_sum", model_name="side") == 2.0
        assert value(samples, "request_explain_seconds_count", model_name="side") == 1
        return True

    eventually(observed, timeout=15, message=server.log)
    server.stop()


def test_the_stage_histograms_set_the_metrics_up_at_their_first_use_not_at_import():
    out = run_python("""
        import os, sys
        from kserve_sdk import metrics
        from kserve_sdk.metrics import PREDICT_HIST_TIME, get_labels
        print("prometheus_client" in sys.modules, "PROMETHEUS_MULTIPROC_DIR" in os.environ)
        PREDICT_HIST_TIME.labels(**get_labels("m")).observe(1.5)
        print("prometheus_client" in sys.modules, "PROMETHEUS_MULTIPROC_DIR" in os.environ)
        body, _ = metrics.render(None)
        print([line for line in body.decode().splitlines() if line.startswith("request_predict_seconds_sum")])
        metrics.cleanup()
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["False False", "True True",
                                       "['request_predict_seconds_sum{model_name=\"m\"} 1.5']"]


# --- pandas is the pandas extra ----------------------------------------------------------------------------------
PANDAS_HINT = "needs pandas, which is not installed: pip install 'kserve-sdk[pandas]'"


@pytest.fixture(scope="module")
def without_pandas(tmp_path_factory) -> str:
    """PYTHONPATH on which `import pandas` fails as it does where pandas is not installed."""
    folder = tmp_path_factory.mktemp("no-pandas")
    (folder / "pandas").mkdir()
    (folder / "pandas" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'pandas'\", name='pandas')\n")
    return str(folder) + os.pathsep + ROOT


def test_a_model_needing_pandas_says_which_extra_to_install(start_server, scripts, without_pandas):
    server = start_server(scripts["rows_model"], grpc=False, env={"PYTHONPATH": without_pandas}, python_args=KSERVE)
    got = post_json_raw(server.http_port, "/v1/models/rows:predict", {"instances": [{"a": 1}, {"a": 2}]})
    assert_error_answer(server.http_port, got, 500, "ModuleNotFoundError : get_predict_input on rows of dicts "
                                                    f"(a DataFrame) {PANDAS_HINT} (model 'rows')")
    v2 = {"inputs": [{"name": "a", "shape": [2], "datatype": "INT32", "data": [1, 2]}],
          "parameters": {"content_type": "pd"}}
    got = post_json_raw(server.http_port, "/v2/models/rows/infer", v2)
    assert_error_answer(server.http_port, got, 500, f"ModuleNotFoundError : InferRequest.as_dataframe {PANDAS_HINT}")
    server.stop()


def test_each_pandas_call_names_the_extra_in_a_plain_process():
    out = run_python("""
        import sys
        sys.modules["pandas"] = None  # as if it were not installed
        import numpy as np
        from kserve_sdk.protocol.infer_type import InferInput, InferRequest
        from kserve_sdk.utils.utils import get_predict_input

        request = InferRequest("m", [InferInput("a", [2], "INT32", [1, 2])])
        calls = [lambda: get_predict_input({"instances": [{"a": 1}]}),
                 lambda: get_predict_input({"instances": [[{"a": 1}]]}),
                 lambda: request.as_dataframe()]
        for call in calls:
            try:
                call()
            except ModuleNotFoundError as e:
                print(e.name, "|", e)
        # the numpy paths need no pandas
        assert get_predict_input({"instances": [[1, 2]]}).tolist() == [[1, 2]]
        assert get_predict_input(request).tolist() == [1, 2]
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"pandas | get_predict_input on rows of dicts (a DataFrame) {PANDAS_HINT}",
        f"pandas | get_predict_input on rows of dicts (a DataFrame) {PANDAS_HINT}",
        f"pandas | InferRequest.as_dataframe {PANDAS_HINT}",
    ]


# --- kserve.protocol.rest.openai.openai_model, openai_chat_adapter_model, openai_proxy_model -----------------------
@pytest.fixture(scope="module")
def openai_server(start_server, scripts):
    return start_server(scripts["openai_model"], grpc=False, python_args=KSERVE)


def test_openai_models_from_kserves_module_paths(openai_server):
    import openai

    with openai.OpenAI(base_url=f"{openai_server.url}/openai/v1", api_key="unused", max_retries=0, timeout=30) as c:
        assert c.completions.create(model="shouter", prompt="hello there").choices[0].text == "HELLO THERE"
        chat = c.chat.completions.create(model="shouter", messages=[{"role": "user", "content": "hi"}])
        assert (chat.choices[0].message.role, chat.choices[0].message.content) == ("shouter", "HI")
        assert c.completions.create(model="proxied", prompt="via proxy").choices[0].text == "VIA PROXY"
        # a stream made by AsyncMappingIterator, its closing None left out
        chunks = list(c.completions.create(model="shouter", prompt="one two", stream=True))
        assert [chunk.choices[0].text for chunk in chunks] == ["ONE", "TWO"]

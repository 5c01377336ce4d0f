"""KServe 0.21 scripts, unchanged, run with `python <script>.py` once the companion distribution (compat/kserve,
kserve-sdk-alias) is installed, and answer as KServe does.

The scripts (tests/kserve_scripts/) import only `kserve`, as KServe's docs and samples write them: the docs'
custom model (v1), a v2/gRPC model (InferRequest -> InferResponse), a feast-style transformer that sets
`self.protocol` and calls its predictor over v1, v2 and gRPC, a model recording `kserve.metrics`' histograms,
and an OpenAI model built on `kserve.protocol.rest.openai.openai_model`. Each is a real process started as
`python script.py` with no PYTHONPATH, so `kserve` comes from the installed companion. Also here: the
companion's `kserve` is kserve_sdk's own objects, a KServe Procfile runs as written, and the companion refuses
to import where a real kserve's files overlap its own.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
from importlib import metadata
from typing import Callable, Iterator, List

import numpy as np
import pytest
import tritonclient.grpc as tgrpc

from helpers import (
    ROOT,
    Server,
    answers_ok,
    assert_error_answer,
    assert_openai_error,
    eventually,
    free_port,
    http_get,
    post_json,
    post_json_raw,
    procfile,
    run_python,
    scrape,
    sse_data,
    stop_process_group,
    triton_error,
    triton_input,
    value,
)

SCRIPTS = os.path.join(ROOT, "tests", "kserve_scripts")
COMPANION = os.path.join(ROOT, "compat", "kserve")
NO_PYTHONPATH = {"PYTHONPATH": ""}
# the weights of tests/kserve_scripts/custom_model.py and the driver table of driver_transformer.py
WEIGHTS = np.array([[1.0, -1.0], [0.5, 0.5], [2.0, 0.0]])
DRIVERS = {1001: [0.5, 0.25, 2.0], 1002: [1.0, 4.0, 0.0], 1003: [3.0, 1.0, 1.5]}


@pytest.fixture(scope="module", autouse=True)
def companion_installed() -> None:
    try:
        metadata.distribution("kserve-sdk-alias")
    except metadata.PackageNotFoundError:
        pytest.fail("kserve-sdk-alias (compat/kserve) is not installed in this environment: "
                    "`pip install -e ./compat/kserve` (hack/venv.sh installs it with the test extra)", pytrace=False)


def started_servers() -> Iterator[Callable[..., Server]]:
    """A factory: ``start("custom_model.py", "--flag", "v")`` starts ``python tests/kserve_scripts/<script>`` on
    free ports with no PYTHONPATH; every server it started is stopped when the generator is closed."""
    started: List[Server] = []

    def start(script: str, *args: str) -> Server:
        server = Server(os.path.join(SCRIPTS, script), list(args), env=NO_PYTHONPATH)
        started.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in started:
            server.stop()
            os.unlink(server.log_file.name)


serve = pytest.fixture(scope="module")(started_servers)


@pytest.fixture(scope="module")
def custom_model(serve) -> Server:
    return serve("custom_model.py", "--model_name", "custom-model")


@pytest.fixture(scope="module")
def grpc_model(serve) -> Server:
    return serve("model_grpc.py", "--model_name", "doubler")


# --- import kserve ------------------------------------------------------------------------------------------------
def test_import_kserve_gives_kserve_sdk_itself():
    out = run_python("""
        import importlib.util, sys
        print(importlib.util.find_spec("kserve").origin)  # what `import kserve` finds: the companion's module
        import kserve
        import kserve.protocol.infer_type
        from kserve import Model, ModelServer, model_server
        from kserve.errors import InvalidInput
        from kserve.protocol.grpc import grpc_predict_v2_pb2, grpc_predict_v2_pb2_grpc
        import kserve_sdk
        from kserve_sdk.server import import_alias
        assert kserve is kserve_sdk and Model is kserve_sdk.Model and ModelServer is kserve_sdk.ModelServer
        assert model_server is sys.modules["kserve_sdk.model_server"] and InvalidInput is kserve_sdk.errors.InvalidInput
        for name in ("protocol", "protocol.infer_type", "protocol.grpc", "errors"):  # the ones imported as kserve.x
            assert sys.modules["kserve." + name] is sys.modules["kserve_sdk." + name], name
        assert grpc_predict_v2_pb2 is sys.modules["kserve_sdk.protocol.grpc.grpc_predict_v2_pb2"]
        assert grpc_predict_v2_pb2_grpc is sys.modules["kserve_sdk.protocol.grpc.grpc_predict_v2_pb2_grpc"]
        assert kserve.__name__ == "kserve_sdk" and import_alias.installed()
        import kserve_sdk.as_kserve  # the edit a script needed before: still harmless
    """, pythonpath="")
    assert out.returncode == 0, out.stderr
    origin = out.stdout.strip()
    assert origin.endswith(os.path.join("", "kserve", "__init__.py")), origin  # not kserve_sdk/__init__.py


def test_python_m_kserve_sdk_still_runs_a_script_beside_the_companion(tmp_path):
    script = tmp_path / "model.py"
    script.write_text("import kserve, kserve_sdk\nimport kserve.utils.utils\n"
                      "print(kserve is kserve_sdk, kserve.utils.utils is kserve_sdk.utils.utils)\n")
    out = run_python("", "-m", "kserve_sdk", str(script), pythonpath="")
    assert (out.returncode, out.stdout) == (0, "True True\n"), out.stderr


# --- (a) the docs' custom model, v1 -------------------------------------------------------------------------------
def test_custom_model_predicts_over_v1(custom_model):
    rows = [[1, 2, 3], [0, 0, 1]]
    status, headers, body = post_json(custom_model.http_port, "/v1/models/custom-model:predict", {"instances": rows})
    assert status == 200, body
    assert set(body) == {"id", "predictions"} and len(body["id"]) == 36
    assert body["predictions"] == (np.array(rows) @ WEIGHTS).tolist()
    assert float(headers["prediction-time-latency"]) >= 0  # the docs' custom response header


def test_custom_model_readiness(custom_model):
    status, body = http_get(f"{custom_model.url}/v1/models/custom-model")
    assert (status, json.loads(body)) == (200, {"name": "custom-model", "ready": True})


@pytest.mark.parametrize("doc, message", [
    ({"instances": [[1, 2]]}, "expected rows of 3 features, got shape [1, 2]"),
    ({"rows": [[1, 2, 3]]}, "invalid payload"),
])
def test_custom_model_invalid_input_is_400(custom_model, doc, message):
    got = post_json_raw(custom_model.http_port, "/v1/models/custom-model:predict", doc)
    assert_error_answer(custom_model.http_port, got, 400, message)
    assert got[2] == b'{"error":"' + message.encode() + b'"}'  # KServe's body: the InvalidInput's reason alone


def test_unknown_model_is_404(custom_model):
    got = post_json_raw(custom_model.http_port, "/v1/models/nope:predict", {"instances": [[1, 2, 3]]})
    assert_error_answer(custom_model.http_port, got, 404, "Model with name nope does not exist")


# --- (b) the v2 / gRPC model --------------------------------------------------------------------------------------
def test_grpc_model_over_grpc(grpc_model):
    client = tgrpc.InferenceServerClient(grpc_model.grpc_url)
    try:
        x = np.array([[1.5, -2.0], [0.0, 4.0]], np.float32)
        result = client.infer("doubler", [triton_input(tgrpc, "x", x)])
        np.testing.assert_array_equal(result.as_numpy("output-0"), x * 2)
        status, message = triton_error(client.infer, "doubler", [triton_input(tgrpc, "x", np.array([1], np.int32))])
        assert status == "StatusCode.INVALID_ARGUMENT" and message == "input 'x' is INT32, FP32 expected", message
    finally:
        client.close()


def test_grpc_model_over_v2_rest(grpc_model):
    doc = {"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    status, _, body = post_json(grpc_model.http_port, "/v2/models/doubler/infer", doc)
    assert status == 200, body
    # KServe's InferenceResponse: model_name, model_version, id, parameters, outputs (the optional ones null)
    assert set(body) <= {"model_name", "model_version", "id", "parameters", "outputs"}
    assert {k: v for k, v in body.items() if v is not None and k != "id"} == {"model_name": "doubler", "outputs": [
        {"name": "output-0", "datatype": "FP32", "shape": [2, 2], "data": [2.0, 4.0, 6.0, 8.0]}]}
    assert len(body["id"]) == 36
    doc["inputs"][0].update(datatype="INT32", shape=[1], data=[1])
    got = post_json_raw(grpc_model.http_port, "/v2/models/doubler/infer", doc)
    assert_error_answer(grpc_model.http_port, got, 400, "input 'x' is INT32, FP32 expected")


# --- (c) the transformer, in front of (a) over v1 and (b) over v2 and gRPC ----------------------------------------
@pytest.fixture(scope="module", params=["v1", "v2", "grpc-v2"])
def transformer(request):
    """(protocol, the transformer server) in front of a predictor of the same model name; both stopped before
    the next protocol's pair starts."""
    protocol, name = request.param, f"drivers-{request.param}"
    servers = started_servers()
    serve = next(servers)
    try:
        if protocol == "v1":  # KServe's default protocol: no flag
            predictor = serve("custom_model.py", "--model_name", name)
            flags = ["--predictor_host", f"127.0.0.1:{predictor.http_port}"]
        else:
            predictor = serve("model_grpc.py", "--model_name", name)
            port = predictor.grpc_port if protocol == "grpc-v2" else predictor.http_port
            flags = ["--predictor_host", f"127.0.0.1:{port}", "--protocol", protocol, "--predictor_protocol", protocol]
        yield protocol, serve("driver_transformer.py", "--model_name", name, *flags)
    finally:
        servers.close()


def test_transformer_looks_up_features_and_calls_its_predictor(transformer):
    protocol, server = transformer
    ids = [[1001, 1002], [1003]]
    status, _, body = post_json(server.http_port, f"/v1/models/drivers-{protocol}:predict", {"instances": ids})
    assert status == 200, (body, server.log()[-3000:])
    rows = np.array([DRIVERS[1001], DRIVERS[1002], DRIVERS[1003]])
    expected = rows @ WEIGHTS if protocol == "v1" else rows * 2  # custom_model.py / model_grpc.py
    assert body["predictions"] == expected.tolist()
    assert f"Protocol = {protocol}" in server.log()  # self.protocol, as the script set it (v1: KServe's default)


def test_transformer_invalid_input_is_400(transformer):
    protocol, server = transformer
    got = post_json_raw(server.http_port, f"/v1/models/drivers-{protocol}:predict", {"instances": [[7]]})
    assert_error_answer(server.http_port, got, 400, "unknown driver id 7")


# --- (d) kserve.metrics -------------------------------------------------------------------------------------------
def test_metrics_model_records_into_kserves_histograms(serve):
    server = serve("metrics_model.py", "--model_name", "words")
    status, _, body = post_json(server.http_port, "/v1/models/words:predict", {"instances": ["a b c", "d e"]})
    assert (status, body) == (200, {"predictions": [3, 2], "usage": {"num_prompt_tokens": 5,
                                                                      "num_generation_tokens": 0}})
    status, _, body = post_json(server.http_port, "/v1/models/words:explain", {"instances": ["a b"]})
    assert (status, body) == (200, {"explanations": [{"a": 1, "b": 1}]})

    # A predict runs preprocess, predict, postprocess; an explain preprocess, explain, postprocess: counted by the
    # server under the model's name and by the model itself under its own labels.
    counts = {"preprocess": 2, "predict": 1, "postprocess": 2, "explain": 1}
    own = {"preprocess": "tokenizer", "predict": "scorer", "postprocess": "formatter", "explain": "explainer"}

    def recorded():
        samples = scrape(server)
        for stage, count in counts.items():
            name = f"request_{stage}_seconds_count"
            assert value(samples, name, model_name="words") == count, (name, samples)
            assert value(samples, name, model_name=f"words-{own[stage]}") == count, (name, samples)
        assert value(samples, "word_count_prompt_tokens_total", model_name="words") == 5
        return True

    eventually(recorded, timeout=10)


# --- (e) an OpenAI model from kserve.protocol.rest.openai.openai_model --------------------------------------------
@pytest.fixture(scope="module")
def echo_llm(serve) -> Server:
    return serve("echo_llm.py", "--model_name", "echo-llm")


def test_openai_completion(echo_llm):
    status, _, body = post_json(echo_llm.http_port, "/openai/v1/completions",
                                {"model": "echo-llm", "prompt": "one two three", "max_tokens": 2})
    assert status == 200, body
    assert isinstance(body.pop("created"), int)
    # KServe answers the Completion with its unset (None) fields left out
    assert body == {"id": "cmpl-echo", "object": "text_completion", "model": "echo-llm",
                    "choices": [{"index": 0, "text": "three two", "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}


def test_openai_chat_completion(echo_llm):
    status, _, body = post_json(echo_llm.http_port, "/openai/v1/chat/completions",
                                {"model": "echo-llm", "messages": [{"role": "user", "content": "hello big world"}]})
    assert status == 200, body
    assert (body["id"], body["object"], body["model"]) == ("chatcmpl-echo", "chat.completion", "echo-llm")
    [choice] = body["choices"]
    assert (choice["index"], choice["finish_reason"]) == (0, "stop")
    assert (choice["message"]["role"], choice["message"]["content"]) == ("assistant", "world big hello")
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}


def test_openai_streamed_completion(echo_llm):
    status, headers, raw = post_json_raw(echo_llm.http_port, "/openai/v1/completions",
                                         {"model": "echo-llm", "prompt": "one two three", "stream": True})
    assert status == 200 and headers["content-type"].startswith("text/event-stream"), raw[:300]
    *chunks, done = sse_data(raw)
    assert done == "[DONE]"
    texts = [json.loads(chunk)["choices"][0]["text"] for chunk in chunks]
    assert texts == ["three", " two", " one"]
    assert json.loads(chunks[-1])["choices"][0]["finish_reason"] == "stop"


def test_openai_unknown_model_is_404(echo_llm):
    # KServe's message, in OpenAI's error shape (docs/openai.md: KServe answers {"error": "<message>"} here)
    got = post_json(echo_llm.http_port, "/openai/v1/completions", {"model": "nope", "prompt": "x"})
    assert_openai_error(got, 404, "Model with name nope does not exist.", kind="NotFoundError")


# --- a KServe Procfile, as written --------------------------------------------------------------------------------
def test_procfile_runs_as_written(tmp_path):
    """tests/kserve_scripts/Procfile's `web` command (KServe's sample form, `python -m <module>`), run by a shell
    in that folder as a Procfile runner does; the ports added (the Procfile leaves KServe's defaults)."""
    http_port, grpc_port = free_port(), free_port()
    command = f"{procfile(SCRIPTS)['web']} --http_port {http_port} --grpc_port {grpc_port}"
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"], **NO_PYTHONPATH}
    log = str(tmp_path / "web.log")
    with open(log, "wb") as out:
        proc = subprocess.Popen(["sh", "-c", command], cwd=SCRIPTS, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        eventually(lambda: proc.poll() is not None or answers_ok(f"http://127.0.0.1:{http_port}/v2/health/ready"),
                   timeout=60)
        assert proc.poll() is None, (tmp_path / "web.log").read_text()
        # KServe's default --model_name: "model"
        status, _, body = post_json(http_port, "/v1/models/model:predict", {"instances": [[1, 1, 1]]})
        assert (status, body["predictions"]) == (200, [[3.5, -0.5]]), body
    finally:
        stop_process_group(proc, signal.SIGTERM)


# --- the companion refuses to import where a real kserve's files overlap its own ----------------------------------
def site_folder_with_the_companion(folder) -> str:
    """``folder`` holding a copy of the companion's `kserve` package, as pip would install it there."""
    (folder / "kserve").mkdir()
    shutil.copy(os.path.join(COMPANION, "src", "kserve", "__init__.py"), folder / "kserve" / "__init__.py")
    return str(folder)


def fake_real_kserve(folder) -> None:
    """KServe 0.21.0's installed metadata in ``folder``, its RECORD claiming `kserve/__init__.py`."""
    info = folder / "kserve-0.21.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kserve\nVersion: 0.21.0\n")
    (info / "RECORD").write_text("kserve/__init__.py,,\nkserve-0.21.0.dist-info/METADATA,,\n")


def test_import_is_refused_beside_a_real_kserve(tmp_path):
    site = site_folder_with_the_companion(tmp_path)
    fake_real_kserve(tmp_path)
    out = run_python("import kserve", pythonpath=site)
    assert out.returncode == 1
    assert (f"ImportError: `kserve` here is kserve-sdk-alias, installed together with the real KServe (kserve 0.21.0) "
            f"in {site}: both provide the `kserve` package and their files overlap. Keep one: `pip uninstall "
            "kserve-sdk-alias` and then `pip install --force-reinstall kserve` to go back to KServe") in out.stderr, \
        out.stderr


def test_a_real_kserve_elsewhere_is_not_an_overlap(tmp_path):
    """The control: the same copy imports, as kserve_sdk, when the real kserve's metadata is in another folder."""
    (tmp_path / "site").mkdir()
    (tmp_path / "other").mkdir()
    site = site_folder_with_the_companion(tmp_path / "site")
    fake_real_kserve(tmp_path / "other")
    out = run_python("import kserve, kserve_sdk; print(kserve is kserve_sdk)",
                     pythonpath=site + os.pathsep + str(tmp_path / "other"))
    assert (out.returncode, out.stdout) == (0, "True\n"), out.stderr

"""A model repository served by ``python -m kserve_sdk --model_repository DIR`` (and beside a script's own
models), on real servers with tritonclient and raw HTTP: versions side by side under each version policy
(a model.py class, scikit-learn and ONNX, each version answering its own predictions, the highest by
default), ``poll`` (a new version served within two poll periods, a changed one reloaded while a stream on
the old one finishes, a removed model unloaded), ``explicit`` (the repository API, also with two workers),
bad input said once in the log while every other model is served, a repository downloaded from a storage
URI, and docs/model-repository.md's example as written."""
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from typing import Any, Dict, List

import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp

from helpers import (
    ROOT,
    Server,
    eventually,
    free_port,
    http_get,
    markdown_parts,
    post_json,
    repository_server,
    request,
    same_line,
    shell_commands,
    side_by_side,
    triton_error,
    triton_input,
)

MODELS = "tests.models.repository_models"
#: Three iris rows (setosa, versicolor, virginica): version 1 of the classifiers says [0, 1, 2], version 2
#: (a one-split tree) [0, 1, 1].
ROWS = np.array([[5.1, 3.5, 1.4, 0.2], [6.4, 3.2, 4.5, 1.5], [6.3, 3.3, 6.0, 2.5]])
LABELS = {"1": [0, 1, 2], "2": [0, 1, 1]}
FACTORS = {"1": 10.0, "2": 20.0}
SCALER = '''import os

from kserve_sdk import Model
from kserve_sdk.utils.utils import get_predict_response


class Scaler(Model):
    def load(self):
        with open(os.path.join(self.model_dir, "factor.txt")) as f:
            self.factor = float(f.read())
        self.ready = True
        return True

    def predict(self, payload, headers=None):
        return get_predict_response(payload, payload.inputs[0].as_numpy() * self.factor, self.name)
'''


@pytest.fixture(scope="module")
def serve():
    """A factory: ``serve(repository, *flags)`` runs ``python -m kserve_sdk --model_repository repository
    flags...`` and waits until it is ready (``ready=False``: live); every server is stopped at the end."""
    started: List[Server] = []

    def start(repository: str, *flags: str, ready: bool = True, server: Server = None) -> Server:
        server = server or repository_server(repository, *flags)
        started.append(server)
        server.start()
        if ready:
            eventually(lambda: request(server.http_port, "GET", "/v2/health/ready")[0] == 200, 60,
                       message=server.log)
        return server

    yield start
    for server in started:
        server.stop()
        os.unlink(server.log_file.name)


def write_json(path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def index(server: Server) -> List[Dict[str, str]]:
    status, _, entries = post_json(server.http_port, "/v2/repository/index", {})
    assert status == 200, entries
    return entries


def events(path) -> List[List[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


# --- versions side by side under each version policy ---------------------------------------------------------
POLICIES = {"latest": None, "all": {"all": {}}, "specific": {"specific": {"versions": [1]}}}
SERVED = {"latest": ["2"], "all": ["1", "2"], "specific": ["1"]}


def classifiers():
    """The two iris classifiers of versions 1 and 2."""
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression
    from sklearn.tree import DecisionTreeClassifier

    features, labels = load_iris(return_X_y=True)
    models = {"1": LogisticRegression(max_iter=1000).fit(features, labels),
              "2": DecisionTreeClassifier(max_depth=1, random_state=0).fit(features, labels)}
    for version, model in models.items():
        assert model.predict(ROWS).tolist() == LABELS[version]
    return models


@pytest.fixture(scope="module")
def versioned(serve, tmp_path_factory):
    """A model.py class, a scikit-learn model and an ONNX model, two versions each, under each policy; and
    MLServer's layout of string versions (iris v1, v2)."""
    import joblib
    from skl2onnx import to_onnx

    root = tmp_path_factory.mktemp("versioned")
    for version, model in classifiers().items():
        graph = to_onnx(model, ROWS[:1].astype(np.float32), options={"zipmap": False}).SerializeToString()
        for policy, chosen in POLICIES.items():
            settings = {} if chosen is None else {"version_policy": chosen}
            (root / f"class-{policy}" / version).mkdir(parents=True)
            (root / f"class-{policy}" / version / "factor.txt").write_text(str(FACTORS[version]))
            write_json(root / f"class-{policy}" / "model-settings.json", {"implementation": "model.Scaler", **settings})
            (root / f"class-{policy}" / "model.py").write_text(SCALER)
            (root / f"sklearn-{policy}" / version).mkdir(parents=True)
            joblib.dump(model, root / f"sklearn-{policy}" / version / "model.joblib")
            (root / f"onnx-{policy}" / version).mkdir(parents=True)
            (root / f"onnx-{policy}" / version / "model.onnx").write_bytes(graph)
            if chosen is not None:
                write_json(root / f"sklearn-{policy}" / "model-settings.json", settings)
                write_json(root / f"onnx-{policy}" / "model-settings.json", settings)
        folder = root / "iris" / f"v{version}"
        write_json(folder / "model-settings.json", {"name": "iris", "implementation": "mlserver_sklearn.SKLearnModel",
                                                    "parameters": {"uri": "./model.joblib", "version": f"v{version}"}})
        joblib.dump(model, folder / "model.joblib")
    return serve(str(root))


def infer(client, module, kind: str, model: str, version: str = ""):
    """The answer of ``model`` (a ``kind``: class, sklearn or onnx) at ``version`` ("" none)."""
    if kind == "class":
        inputs, output = [triton_input(module, "x", np.array([1.0, 2.0], dtype=np.float32))], "output-0"
    elif kind == "sklearn":
        inputs, output = [triton_input(module, "input-0", ROWS)], "output-0"
    else:
        inputs, output = [triton_input(module, "X", ROWS.astype(np.float32))], "label"
    answer = client.infer(model, inputs, model_version=version)
    return answer.as_numpy(output).tolist(), answer.get_response(**({"as_json": True} if module is tgrpc else {}))


def expected(kind: str, version: str) -> List[Any]:
    return [FACTORS[version], 2 * FACTORS[version]] if kind == "class" else LABELS[version]


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("kind", ["class", "sklearn", "onnx"])
def test_each_served_version_answers_its_own_predictions(versioned, kind, policy, protocol):
    module = thttp if protocol == "rest" else tgrpc
    client = module.InferenceServerClient(versioned.url[len("http://"):] if protocol == "rest" else versioned.grpc_url)
    model, served = f"{kind}-{policy}", SERVED[policy]
    metadata = client.get_model_metadata(model, **({"as_json": True} if protocol == "grpc" else {}))
    assert metadata["versions"] == served
    for version in served:
        assert infer(client, module, kind, model, version)[0] == expected(kind, version)
    answer, response = infer(client, module, kind, model)
    assert answer == expected(kind, served[-1])  # no version: the highest served
    assert response["model_version"] == served[-1]
    unserved = "1" if "1" not in served else "3"
    status, message = triton_error(infer, client, module, kind, model, unserved)
    assert status in ("404", "StatusCode.NOT_FOUND")
    assert message == (f"Request for unknown model: '{model}' version {unserved} is not found. Model '{model}' has "
                       f"no version '{unserved}'; versions served: {', '.join(served)}.")


def test_string_versions_of_mlservers_layout(versioned):
    body = {"inputs": [{"name": "input-0", "shape": [3, 4], "datatype": "FP64", "data": ROWS.ravel().tolist()}]}
    for path, version in [("/v2/models/iris/versions/v1/infer", "1"), ("/v2/models/iris/versions/v2/infer", "2"),
                          ("/v2/models/iris/infer", "2")]:
        status, _, answer = post_json(versioned.http_port, path, body)
        assert status == 200 and answer["outputs"][0]["data"] == LABELS[version], answer
        assert answer["model_version"] == f"v{version}"
    status, _, answer = post_json(versioned.http_port, "/v2/models/iris/versions/v3/infer", body)
    assert status == 404
    assert answer["error"] == ("Request for unknown model: 'iris' version 'v3' is not found. Model 'iris' has no "
                               "version 'v3'; versions served: v1, v2.")
    assert json.loads(http_get(versioned.url + "/v2/models/iris")[1])["versions"] == ["v1", "v2"]


def test_the_index_lists_every_served_version(versioned):
    entries = index(versioned)
    for kind in ["class", "sklearn", "onnx"]:
        for policy, served in SERVED.items():
            assert [entry for entry in entries if entry["name"] == f"{kind}-{policy}"] == [
                {"name": f"{kind}-{policy}", "version": version, "state": "READY"} for version in served]
    client = tgrpc.InferenceServerClient(versioned.grpc_url)
    grpc_entries = client.get_model_repository_index(as_json=True)["models"]
    assert {"name": "iris", "version": "v1", "state": "READY"} in grpc_entries
    assert len(grpc_entries) == len(entries) == 3 * 4 + 2  # three kinds of 1 + 2 + 1 versions, and iris's two


# --- poll ---------------------------------------------------------------------------------------------------
POLL_S = 1.0


@pytest.fixture(scope="module")
def polled(serve, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("polled")
    root, log = tmp / "repo", tmp / "events.txt"
    extra = {"parameters": {"extra": {"events": str(log)}}}
    write_json(root / "streamer" / "model-settings.json", {"implementation": f"{MODELS}:Streamer", **extra})
    (root / "streamer" / "1").mkdir()
    (root / "streamer" / "1" / "tag.txt").write_text("old")
    write_json(root / "grows" / "model-settings.json", {"implementation": f"{MODELS}:Echo", **extra})
    (root / "grows" / "1").mkdir()
    (root / "grows" / "1" / "factor.txt").write_text("1")
    write_json(root / "goes" / "model-settings.json", {"implementation": f"{MODELS}:Echo", **extra})
    server = serve(str(root), "--model_control_mode", "poll", "--repository_poll_secs", str(POLL_S))
    return server, root, log


def v2_factor(server: Server, model: str, version: str = "") -> Any:
    path = f"/v2/models/{model}{f'/versions/{version}' if version else ''}/infer"
    status, _, body = post_json(server.http_port, path, {"inputs": [
        {"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}]})
    return body["outputs"][0]["data"][0] if status == 200 else (status, body)


def test_poll_serves_a_new_version_within_two_poll_periods(polled):
    server, root, _ = polled
    assert v2_factor(server, "grows") == 1.0
    (root / "grows" / "2.tmp").mkdir()
    (root / "grows" / "2.tmp" / "factor.txt").write_text("2")
    added = time.monotonic()
    os.rename(root / "grows" / "2.tmp", root / "grows" / "2")  # the version appears whole
    eventually(lambda: v2_factor(server, "grows", "2") == 2.0, 10, message=server.log)
    assert time.monotonic() - added <= 2 * POLL_S + 2.0  # two periods, and the scan and load themselves
    assert v2_factor(server, "grows") == 2.0  # the highest now
    # the latest policy serves one version: the old one is unloaded once the new one is served
    eventually(lambda: v2_factor(server, "grows", "1")[0] == 404, 10)
    assert v2_factor(server, "grows", "1")[1]["error"].endswith("versions served: 2.")


def test_poll_reloads_a_changed_version_while_a_stream_on_the_old_one_finishes(polled):
    import httpx
    from httpx_sse import connect_sse

    server, root, log = polled
    answers: List[Dict[str, Any]] = []
    first = threading.Event()

    def read() -> None:  # 40 answers 250 ms apart: a stream of 10 s
        body = {"text_input": "x", "parameters": {"count": 40, "gap_ms": 250}}
        with httpx.Client(base_url=server.url, timeout=30) as client:
            with connect_sse(client, "POST", "/v2/models/streamer/generate_stream", json=body) as source:
                for event in source.iter_sse():
                    answers.append(json.loads(event.data))
                    first.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert first.wait(20), server.log()  # the stream runs on the object loaded at start
    (root / "streamer" / "1" / "tag.txt").write_text("new")

    def tag() -> str:
        status, _, body = post_json(server.http_port, "/v2/models/streamer/generate",
                                    {"text_input": "x", "parameters": {"count": 1, "gap_ms": 0}})
        assert status == 200, body
        return body["text_output"]

    eventually(lambda: tag() == "new", 8, message=server.log)  # reloaded: new calls reach the new object
    assert reader.is_alive()  # while the stream on the old one goes on,
    assert ["stop", "streamer"] not in [e[:2] for e in events(log)]  # and the old one is not stopped
    reader.join(30)
    assert [a["index"] for a in answers] == list(range(40))  # every answer, no error
    assert {(a["text_output"], a["stopped"]) for a in answers} == {("old", False)}
    # the old object is stopped once its stream has ended
    eventually(lambda: [e[:2] for e in events(log) if e[1] == "streamer"] ==
               [["load", "streamer"], ["load", "streamer"], ["stop", "streamer"]], 10)
    assert {"name": "streamer", "version": "1", "state": "READY"} in index(server)


def test_poll_unloads_a_removed_model(polled):
    server, root, log = polled
    status, _, body = post_json(server.http_port, "/v1/models/goes:predict", {"instances": [1]})
    assert status == 200 and body["predictions"][0] == "goes"
    shutil.rmtree(root / "goes")
    eventually(lambda: ["stop", "goes"] in [e[:2] for e in events(log)], 10, message=server.log)
    status, _, body = post_json(server.http_port, "/v1/models/goes:predict", {"instances": [1]})
    assert status == 404 and body["error"].startswith("Request for unknown model: 'goes' is not found. Model with name "
                                                      "goes does not exist. Models served: "), body
    assert "goes" not in {entry["name"] for entry in index(server)}


# --- explicit ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def explicit(serve, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("explicit")
    root, log = tmp / "repo", tmp / "events.txt"
    for name in ["a", "b"]:
        write_json(root / name / "model-settings.json",
                   {"implementation": f"{MODELS}:Echo", "parameters": {"extra": {"events": str(log)}}})
    return serve(str(root), "--model_control_mode", "explicit", "--workers", "2"), root, log


def test_explicit_loads_only_through_the_repository_api_in_every_worker(explicit):
    server, root, log = explicit
    assert index(server) == [{"name": "a"}, {"name": "b"}]  # in the repository, not loaded
    status, _, body = post_json(server.http_port, "/v1/models/a:predict", {"instances": [1]})
    assert status == 404 and body["error"] == ("Request for unknown model: 'a' has no available versions. Model a is "
                                               "not loaded: load it with POST /v2/repository/models/a/load."), body
    status, _, body = post_json(server.http_port, "/v2/repository/models/a/load", {})
    assert status == 200 and body == {"name": "a", "load": True}, body
    pids = side_by_side(lambda: post_json(server.http_port, "/v1/models/a:predict", {"instances": [1]})[2]
                        ["predictions"][2], lambda found: len(set(found)) == 2, seconds=60)
    assert len(set(pids)) == 2  # both workers serve it
    assert sorted(int(e[3]) for e in events(log) if e[:2] == ["load", "a"]) == sorted(set(pids))
    assert {"name": "a", "state": "READY"} in index(server) and {"name": "b"} in index(server)


def test_explicit_load_reads_a_new_model_and_unload_keeps_it_in_the_index(explicit):
    server, root, log = explicit
    write_json(root / "c" / "model-settings.json", {"implementation": f"{MODELS}:Echo"})
    client = tgrpc.InferenceServerClient(server.grpc_url)
    client.load_model("c")  # found in the folder, though it came after the start
    assert client.is_model_ready("c")
    client.unload_model("c")
    entries = client.get_model_repository_index(as_json=True)["models"]
    assert {"name": "c", "state": "UNAVAILABLE", "reason": "unloaded"} in entries
    status, _, body = post_json(server.http_port, "/v1/models/c:predict", {"instances": [1]})
    assert status == 404 and body["error"].endswith(
        "Model c was unloaded: load it again (POST /v2/repository/models/c/load) to serve it."), body
    status, _, body = post_json(server.http_port, "/v2/repository/models/nowhere/load", {})
    assert status == 404 and body["error"].startswith("failed to load model 'nowhere': "), body
    status, _, body = post_json(server.http_port, "/v2/repository/models/c/load",
                                {"parameters": {"config": '{"max_batch_size": 4}'}})
    assert status == 400 and body["error"] == (
        "failed to load model 'c': a config override cannot be applied to a model of the model repository: set its "
        "fields in its model-settings.json"), body


# --- bad input -----------------------------------------------------------------------------------------------
def test_bad_input_is_one_line_each_and_the_other_models_are_served(serve, tmp_path):
    root = tmp_path / "repo"
    echo = {"implementation": f"{MODELS}:Echo"}
    write_json(root / "good" / "model-settings.json", echo)
    (root / "malformed").mkdir(parents=True)
    (root / "malformed" / "model-settings.json").write_text('{"name": "malformed",\n  "implementation" "x"}')
    write_json(root / "unknown" / "model-settings.json", {"implementation": "tensorflow"})
    write_json(root / "twin-a" / "model-settings.json", {"name": "twin", **echo})
    write_json(root / "twin-b" / "model-settings.json", {"name": "twin", **echo})
    write_json(root / "numbered" / "model-settings.json", echo)
    (root / "numbered" / "1").mkdir()
    (root / "numbered" / "latest").mkdir()
    write_json(root / "raises" / "model-settings.json", {"implementation": "model.Scorer"})
    (root / "raises" / "model.py").write_text("import math\n\nmath.floor(1 / 0)\n")
    server = serve(str(root))
    problems = {
        "malformed": f"{root}/malformed/model-settings.json: is not valid JSON: Expecting ':' delimiter: line 2 "
                     "column 20 (char 41)",
        "unknown": f"{root}/unknown/model-settings.json: unknown implementation 'tensorflow'; it must be a runtime "
                   "(sklearn, xgboost, lightgbm, onnx)",
        "twin": f"folders {root}/twin-a and {root}/twin-b both hold model 'twin'",
        "numbered": f"{root}/numbered: sub-folder 'latest' is not a version number",
        "raises": f"{root}/raises/model.py: importing it raised ZeroDivisionError: division by zero",
    }
    log = server.log()
    for name, problem in problems.items():
        lines = [line for line in log.splitlines() if problem in line]
        assert len(lines) == 1, (name, lines, log[-3000:])
        assert " ERROR " in lines[0]
    entries = {entry["name"]: entry for entry in index(server)}
    for name, problem in problems.items():
        assert entries[name]["state"] == "UNAVAILABLE" and problem in entries[name]["reason"], entries[name]
    assert entries["good"] == {"name": "good", "state": "READY"}
    status, _, body = post_json(server.http_port, "/v1/models/good:predict", {"instances": [1]})
    assert status == 200 and body["predictions"][0] == "good"
    status, _, body = post_json(server.http_port, "/v1/models/twin:predict", {"instances": [1]})
    assert status == 404 and body["error"].endswith(f"Model twin is UNAVAILABLE: {problems['twin']}"), body
    status, _, body = post_json(server.http_port, "/v1/models/raises:predict", {"instances": [1]})
    assert status == 404 and problems["raises"] in body["error"], body


def test_a_repository_that_cannot_be_read_stops_the_server_in_one_line(tmp_path):
    server = repository_server(str(tmp_path / "missing"))
    server.start(wait_ready=False)
    try:
        assert server.wait_exit(30) == 1
        log = server.log()
        assert f"{tmp_path}/missing: the model repository is not a folder" in log
        assert "Traceback" not in log
    finally:
        server.stop()
        os.unlink(server.log_file.name)


# --- a repository downloaded, and beside a script's own model ------------------------------------------------
def test_a_repository_at_a_storage_uri_is_downloaded_and_served(serve, tmp_path):
    repo = tmp_path / "repo"
    write_json(repo / "remote" / "model-settings.json", {"implementation": f"{MODELS}:Echo"})
    files = tmp_path / "files"
    files.mkdir()
    with tarfile.open(files / "repository.tar.gz", "w:gz") as tar:
        tar.add(repo / "remote", arcname="remote")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(files))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        uri = f"http://127.0.0.1:{httpd.server_address[1]}/repository.tar.gz"
        server = Server(f"--model_repository={uri}", [], python_args=["-m", "kserve_sdk"],
                        env={"KSERVE_SDK_MODEL_CACHE": str(tmp_path / "cache")})
        server = serve("", server=server)
        status, _, body = post_json(server.http_port, "/v1/models/remote:predict", {"instances": [1]})
        assert status == 200 and body["predictions"][0] == "remote", body
        assert str(tmp_path / "cache") in server.log()
    finally:
        httpd.shutdown()


def test_a_scripts_own_models_are_served_beside_the_repository(serve, tmp_path):
    root = tmp_path / "repo"
    for name in ["own", "other"]:
        write_json(root / name / "model-settings.json", {"implementation": f"{MODELS}:Echo"})
    server = serve("", server=Server(os.path.join(ROOT, "tests/models/repository_beside.py"),
                                     ["--model_repository", str(root)]))
    answers = {name: post_json(server.http_port, f"/v1/models/{name}:predict", {"instances": [1]})[2]
               for name in ["own", "other"]}
    assert answers["own"] == {"predictions": ["the script's own"]}
    assert answers["other"]["predictions"][0] == "other"
    assert "model 'own' is not served from it: the server's own code serves a model of that name" in server.log()
    assert index(server) == [{"name": "own", "state": "READY"}, {"name": "other", "state": "READY"}]


# --- the docs' example ---------------------------------------------------------------------------------------
def doc_parts():
    with open(os.path.join(ROOT, "docs", "model-repository.md")) as f:
        return list(markdown_parts(f.read()))


def test_the_docs_example_works_as_written(serve, tmp_path):
    parts = doc_parts()
    files = {}
    for (kind, _, text), (next_kind, info, code) in zip(parts, parts[1:], strict=False):
        label = re.fullmatch(r"`(models/[^`]+)`(?: \(.*\))?:", text.strip()) if kind == "text" else None
        if label and next_kind == "code" and info in ("json", "python"):
            files[label.group(1)] = code
    assert sorted(files) == ["models/fraud/model-settings.json", "models/fraud/model.py",
                             "models/iris/v1/model-settings.json", "models/iris/v2/model-settings.json"]
    for path, code in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(code)
    blocks = [code for kind, info, code in parts if kind == "code" and info == "sh"]
    make = next(code for code in blocks if code.startswith("mkdir -p models/"))
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    subprocess.run(["bash", "-e", "-c", make], cwd=tmp_path, env=env, check=True, timeout=120)
    assert "python -m kserve_sdk --model_repository models" in [code.strip() for code in blocks]
    server = serve(str(tmp_path / "models"))
    commands = shell_commands(next(code for code in blocks if code.startswith("curl ")))
    assert len(commands) == 9
    for command, want in commands:
        command = command.replace("localhost:8080", f"127.0.0.1:{server.http_port}")
        got = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=30).stdout
        assert len(want) == 1 and same_line(got, want[0]), (command, got, want)

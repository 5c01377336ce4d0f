"""The ready-made runtimes, ``python -m kserve_sdk.runtimes.sklearn|xgboost|lightgbm|onnx``, as a user runs them.

Each runtime serves a tiny model trained here on iris (the data scikit-learn ships) and saved the library's
way; its v1 and v2 answers, over REST and gRPC (tritonclient), must equal the library's own predictions on
the same rows. One server per model file, all started at once for the module; the failures (no model file,
several, a corrupt one, a missing library) run the real ``python -m`` command and must exit non-zero with
one clear line. Everything listens on 127.0.0.1 and is stopped by its PID.
"""
import concurrent.futures
import http.server
import json
import os
import subprocess
import sys
import threading
from typing import Dict, List, Tuple

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import (
    ROOT,
    Server,
    free_port,
    http_get,
    post_json,
    started_together,
    triton_error,
    triton_input,
)
from samples.runtimes.train import iris, save_lightgbm, save_onnx, save_sklearn, save_xgboost

LAUNCHER = os.path.join(ROOT, "tests", "models", "run_module.py")
TABULAR = ["sklearn", "xgboost", "lightgbm"]
RUNTIMES = TABULAR + ["onnx"]


def rows() -> np.ndarray:
    """15 iris rows, every class."""
    return iris()[0][::10]


# --- the models, trained and saved as samples/runtimes/train.py does (the README's first step) -------------
def save_two_input_onnx(folder: str):
    """y = x * w: inputs x FP32 [-1, 4] and w INT64 [-1, 1], so each must be found by name and typed."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Cast", ["w"], ["w_float"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["x", "w_float"], ["y"])], "scale",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
         helper.make_tensor_value_info("w", TensorProto.INT64, ["n", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with open(os.path.join(folder, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())


def onnx_session(folder: str):
    import onnxruntime as ort

    return ort.InferenceSession(os.path.join(folder, "model.onnx"), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Dict[str, str]:
    """{model: its folder}; one file each, as KServe's storage initializer would leave it."""
    folders = {name: str(tmp_path_factory.mktemp(name)) for name in ["sklearn", "xgboost", "lightgbm", "onnx",
                                                                        "onnx-two-inputs"]}
    sklearn_model = save_sklearn(folders["sklearn"])
    save_xgboost(folders["xgboost"])
    save_lightgbm(folders["lightgbm"])
    save_onnx(folders["onnx"], sklearn_model)
    save_two_input_onnx(folders["onnx-two-inputs"])
    return folders


@pytest.fixture(scope="module")
def expected(trained) -> Dict[str, object]:
    """What each library itself predicts for rows() (ONNX: every output by name)."""
    import joblib
    import lightgbm as lgb
    import xgboost as xgb

    data = rows()
    sklearn_model = joblib.load(os.path.join(trained["sklearn"], "model.joblib"))
    booster = xgb.Booster(model_file=os.path.join(trained["xgboost"], "model.json"))
    session = onnx_session(trained["onnx"])
    names = [o.name for o in session.get_outputs()]
    return {
        "sklearn": sklearn_model.predict(data),
        "sklearn-proba": sklearn_model.predict_proba(data),
        "xgboost": booster.predict(xgb.DMatrix(data)),
        "lightgbm": lgb.Booster(model_file=os.path.join(trained["lightgbm"], "model.bst")).predict(data),
        "onnx": dict(zip(names, session.run(None, {"X": data.astype(np.float32)}), strict=True)),
    }


# --- the servers ---------------------------------------------------------------------------------------------
class FileServer:
    """A plain HTTP server on 127.0.0.1 serving one folder, recording the paths asked for."""

    def __init__(self, folder: str):
        asked = self.asked = []

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=folder, **kwargs)

            def do_GET(self):
                asked.append(self.path)
                super().do_GET()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def files(trained):
    server = FileServer(trained["sklearn"])
    yield server
    server.close()


@pytest.fixture(scope="module")
def servers(trained, files, tmp_path_factory) -> Dict[str, Server]:
    """{model: its server}, started together. The PREDICT_PROBA one downloads its model from STORAGE_URI."""
    plans = {
        "sklearn": ("sklearn", ["--model_dir", trained["sklearn"]], {}),
        "sklearn-proba": ("sklearn", [], {"PREDICT_PROBA": "true", "STORAGE_URI": files.url + "/model.joblib",
                                          "KSERVE_SDK_MODEL_CACHE": str(tmp_path_factory.mktemp("cache"))}),
        "xgboost": ("xgboost", ["--model_dir", trained["xgboost"], "--nthread", "2"], {}),
        "lightgbm": ("lightgbm", ["--model_dir", trained["lightgbm"]], {}),
        "onnx": ("onnx", ["--model_dir", trained["onnx"]], {}),
        "onnx-two-inputs": ("onnx", ["--model_dir", trained["onnx-two-inputs"]], {}),
    }
    with started_together({name: Server(LAUNCHER, ["--model_name", name, *args],
                                        env={"RUN_MODULE": f"kserve_sdk.runtimes.{runtime}", **env})
                            for name, (runtime, args, env) in plans.items()}) as started:
        yield started


# --- clients -------------------------------------------------------------------------------------------------
def post(server: Server, path: str, body: Dict) -> Tuple[int, Dict]:
    status, _, doc = post_json(server.http_port, path, body, timeout=10)
    return status, doc


def v2_infer(server: Server, model: str, arrays: Dict[str, np.ndarray], protocol: str,
             datatypes: Dict[str, str], outputs: List[str] = ()):
    """{output name: array} of a tritonclient infer call over ``protocol`` ("rest" or "grpc")."""
    module = httpclient if protocol == "rest" else grpcclient
    url = f"127.0.0.1:{server.http_port}" if protocol == "rest" else server.grpc_url
    client = module.InferenceServerClient(url)
    try:
        inputs = []
        for name, array in arrays.items():
            inputs.append(triton_input(module, name, array, datatypes[name]))
        requested = [module.InferRequestedOutput(name) for name in outputs] or None
        result = client.infer(model, inputs, outputs=requested)
        names = [o["name"] for o in result.get_response()["outputs"]] if protocol == "rest" \
            else [o.name for o in result.get_response().outputs]
        return {name: result.as_numpy(name) for name in names}
    finally:
        client.close()


def v2_error(server: Server, model: str, arrays: Dict[str, np.ndarray], protocol: str,
             datatypes: Dict[str, str]) -> Tuple[str, str]:
    return triton_error(v2_infer, server, model, arrays, protocol, datatypes)


def metadata(server: Server, model: str) -> Dict:
    status, body = http_get(f"{server.url}/v2/models/{model}")
    assert status == 200, body
    return json.loads(body)


def v2_datatypes(server: Server, model: str) -> Dict[str, str]:
    return {spec["name"]: spec["datatype"] for spec in metadata(server, model)["inputs"]}


NUMPY_OF = {"FP32": np.float32, "FP64": np.float64, "INT64": np.int64}


# --- answers equal the library's own predictions ------------------------------------------------------------
@pytest.mark.parametrize("runtime", TABULAR)
def test_v1_predictions_are_the_librarys(servers, expected, runtime):
    status, body = post(servers[runtime], f"/v1/models/{runtime}:predict", {"instances": rows().tolist()})
    assert status == 200, body
    np.testing.assert_allclose(np.array(body["predictions"]), expected[runtime], rtol=1e-6)


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
@pytest.mark.parametrize("runtime", TABULAR)
def test_v2_outputs_are_the_librarys(servers, expected, runtime, protocol):
    datatypes = v2_datatypes(servers[runtime], runtime)
    data = rows().astype(NUMPY_OF[datatypes["input-0"]])
    outputs = v2_infer(servers[runtime], runtime, {"input-0": data}, protocol, datatypes)
    assert list(outputs) == ["output-0"]
    assert outputs["output-0"].shape == expected[runtime].shape
    np.testing.assert_allclose(outputs["output-0"], expected[runtime], rtol=1e-6)


def test_onnx_v1_predictions_are_onnxruntimes(servers, expected):
    status, body = post(servers["onnx"], "/v1/models/onnx:predict", {"instances": rows().tolist()})
    assert status == 200, body
    answers = body["predictions"]
    assert [row["label"] for row in answers] == expected["onnx"]["label"].tolist()
    np.testing.assert_allclose([row["probabilities"] for row in answers], expected["onnx"]["probabilities"], rtol=1e-6)


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_onnx_v2_outputs_are_onnxruntimes(servers, expected, protocol):
    data = rows().astype(np.float32)
    outputs = v2_infer(servers["onnx"], "onnx", {"X": data}, protocol, {"X": "FP32"})
    assert sorted(outputs) == ["label", "probabilities"]
    np.testing.assert_array_equal(outputs["label"], expected["onnx"]["label"])
    np.testing.assert_allclose(outputs["probabilities"], expected["onnx"]["probabilities"], rtol=1e-6)
    only = v2_infer(servers["onnx"], "onnx", {"X": data}, protocol, {"X": "FP32"}, outputs=["probabilities"])
    assert list(only) == ["probabilities"]


def test_predict_proba_from_storage_uri(servers, expected, files):
    server = servers["sklearn-proba"]
    assert "/model.joblib" in files.asked  # downloaded over HTTP from STORAGE_URI, not read in place
    status, body = post(server, "/v1/models/sklearn-proba:predict", {"instances": rows().tolist()})
    assert status == 200, body
    np.testing.assert_allclose(np.array(body["predictions"]), expected["sklearn-proba"], rtol=1e-9)
    outputs = v2_infer(server, "sklearn-proba", {"input-0": rows()}, "grpc", {"input-0": "FP64"})
    np.testing.assert_allclose(outputs["output-0"], expected["sklearn-proba"], rtol=1e-9)


# --- v2 metadata from the model ------------------------------------------------------------------------------
def tensor(name: str, datatype: str, shape: List[int]) -> Dict:
    return {"name": name, "datatype": datatype, "shape": shape}


METADATA = {
    "sklearn": ([tensor("input-0", "FP64", [-1, 4])], [tensor("output-0", "INT64", [-1])]),
    "sklearn-proba": ([tensor("input-0", "FP64", [-1, 4])], [tensor("output-0", "FP64", [-1, 3])]),
    "xgboost": ([tensor("input-0", "FP32", [-1, 4])], [tensor("output-0", "FP32", [-1, 3])]),
    "lightgbm": ([tensor("input-0", "FP64", [-1, 4])], [tensor("output-0", "FP64", [-1, 3])]),
    "onnx": ([tensor("X", "FP32", [-1, 4])],
             [tensor("label", "INT64", [-1]), tensor("probabilities", "FP32", [-1, 3])]),
    "onnx-two-inputs": ([tensor("x", "FP32", [-1, 4]), tensor("w", "INT64", [-1, 1])], [tensor("y", "FP32", [-1, 4])]),
}


@pytest.mark.parametrize("model", sorted(METADATA))
def test_v2_metadata_describes_the_model(servers, model):
    meta = metadata(servers[model], model)
    assert (meta["inputs"], meta["outputs"]) == METADATA[model]
    client = grpcclient.InferenceServerClient(servers[model].grpc_url)
    try:
        grpc_meta = client.get_model_metadata(model)
    finally:
        client.close()
    assert [(t.name, t.datatype, list(t.shape)) for t in grpc_meta.inputs] == \
        [(t["name"], t["datatype"], t["shape"]) for t in METADATA[model][0]]


# --- bad input: 400 / INVALID_ARGUMENT naming the problem ---------------------------------------------------
@pytest.mark.parametrize("runtime", TABULAR)
def test_tabular_bad_shapes(servers, runtime):
    server, data = servers[runtime], rows()
    status, body = post(server, f"/v1/models/{runtime}:predict", {"instances": data[:2, :3].tolist()})
    assert (status, body) == (400, {"error": "expected rows of 4 features, got 3 (input shape [2, 3])"})
    status, body = post(server, f"/v1/models/{runtime}:predict", {"instances": data[0].tolist()})
    assert (status, body) == (400, {"error": "expected a 2-D input of rows [N, 4] features, got shape [4]"})
    status, body = post(server, f"/v1/models/{runtime}:predict", {"instances": [["a", "b", "c", "d"]]})
    assert status == 400 and body["error"].startswith(f"{runtime} could not predict these rows: "), body
    datatypes = v2_datatypes(server, runtime)
    wide = np.zeros((2, 5), NUMPY_OF[datatypes["input-0"]])
    for protocol, code in (("rest", "400"), ("grpc", "StatusCode.INVALID_ARGUMENT")):
        assert v2_error(server, runtime, {"input-0": wide}, protocol, datatypes) == \
            (code, "expected rows of 4 features, got 5 (input shape [2, 5])")


def test_onnx_bad_shape_and_output(servers):
    server = servers["onnx"]
    status, body = post(server, "/v1/models/onnx:predict", {"instances": [[1.0, 2.0, 3.0]]})
    assert (status, body) == (400, {"error": "input X: expected shape [-1, 4] (-1: any size), got [1, 3]"})
    flat = np.zeros(4, np.float32)
    assert v2_error(server, "onnx", {"X": flat}, "grpc", {"X": "FP32"}) == \
        ("StatusCode.INVALID_ARGUMENT", "input X: expected shape [-1, 4] (-1: any size), got [4]")
    with pytest.raises(InferenceServerException) as info:
        v2_infer(server, "onnx", {"X": flat.reshape(1, 4)}, "rest", {"X": "FP32"}, outputs=["nope"])
    assert (info.value.status(), info.value.message()) == \
        ("400", "unknown output nope; the model's outputs are label, probabilities")


# --- an ONNX model of two inputs ----------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_onnx_inputs_by_name_in_any_order_and_type(servers, trained, protocol):
    x, w = rows()[:3], np.array([[1], [2], [3]], np.int64)
    want = onnx_session(trained["onnx-two-inputs"]).run(None, {"x": x.astype(np.float32), "w": w})[0]
    # w first, and x as FP64: the graph's FP32 is what onnxruntime is given
    outputs = v2_infer(servers["onnx-two-inputs"], "onnx-two-inputs", {"w": w, "x": x}, protocol,
                       {"w": "INT64", "x": "FP64"})
    assert outputs["y"].dtype == np.float32
    np.testing.assert_array_equal(outputs["y"], want)


def test_onnx_v1_instances_as_objects(servers, trained):
    x = rows()[:2]
    want = onnx_session(trained["onnx-two-inputs"]).run(None, {"x": x.astype(np.float32),
                                                               "w": np.array([[2], [3]], np.int64)})[0]
    instances = [{"x": x[0].tolist(), "w": [2]}, {"x": x[1].tolist(), "w": [3]}]
    status, body = post(servers["onnx-two-inputs"], "/v1/models/onnx-two-inputs:predict", {"instances": instances})
    assert status == 200, body
    np.testing.assert_allclose(body["predictions"], want, rtol=1e-6)


def test_onnx_input_errors(servers):
    server, model = servers["onnx-two-inputs"], "onnx-two-inputs"
    x, w = np.zeros((1, 4), np.float32), np.ones((1, 1), np.int64)
    assert v2_error(server, model, {"x": x}, "rest", {"x": "FP32"}) == \
        ("400", "missing input w; the model's inputs are x, w")
    assert v2_error(server, model, {"x": x, "w": w, "z": w}, "grpc", {"x": "FP32", "w": "INT64", "z": "INT64"}) == \
        ("StatusCode.INVALID_ARGUMENT", "unknown input z; the model's inputs are x, w")
    assert v2_error(server, model, {"x": x, "w": x[:, :1]}, "rest", {"x": "FP32", "w": "FP32"}) == \
        ("400", "input w: expected INT64, got FP32")
    assert v2_error(server, model, {"x": np.zeros((2, 4), np.float32), "w": w}, "rest",
                    {"x": "FP32", "w": "INT64"}) == \
        ("400", "input w: dimension n is 1, but 2 in input x")  # the graph names both batch dimensions n
    words = np.array([["a", "b", "c", "d"]], dtype=np.object_)
    assert v2_error(server, model, {"x": words, "w": w}, "grpc", {"x": "BYTES", "w": "INT64"}) == \
        ("StatusCode.INVALID_ARGUMENT", "input x: expected FP32, got BYTES")
    status, body = post(server, f"/v1/models/{model}:predict", {"instances": [[1, 2, 3, 4]]})
    assert (status, body) == (400, {"error": "this model takes several inputs (x, w): send each instance "
                                             "as an object of them"})
    status, body = post(server, f"/v1/models/{model}:predict", {"instances": [{"x": [1, 2, 3, 4]}]})
    assert (status, body) == (400, {"error": "missing input w; the model's inputs are x, w"})


# --- setup mistakes stop the real `python -m` command with one clear line -------------------------------------
def run_runtime(runtime: str, model_dir: str, env: Dict[str, str] = None) -> Tuple[int, str]:
    argv = [sys.executable, "-m", f"kserve_sdk.runtimes.{runtime}", "--model_dir", model_dir, "--model_name", "m",
            "--http_port", str(free_port()), "--grpc_port", str(free_port())]
    full_env = {**os.environ, "PYTHONPATH": ROOT, **(env or {})}
    if env and "PYTHONPATH" in env:
        full_env["PYTHONPATH"] = env["PYTHONPATH"] + os.pathsep + ROOT
    done = subprocess.run(argv, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=90,
                          start_new_session=True)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def failures(trained, tmp_path_factory) -> Dict[str, Tuple[str, int, str]]:
    """{case: (model dir, exit status, output)}, the four commands run at once."""
    empty = str(tmp_path_factory.mktemp("no-model"))
    with open(os.path.join(empty, "notes.txt"), "w") as f:
        f.write("the model is elsewhere\n")
    several = str(tmp_path_factory.mktemp("several"))
    for name in ("model.json", "model.ubj"):
        with open(os.path.join(trained["xgboost"], "model.json"), "rb") as src, \
                open(os.path.join(several, name), "wb") as dst:
            dst.write(src.read())
    corrupt = str(tmp_path_factory.mktemp("corrupt"))
    with open(os.path.join(corrupt, "model.txt"), "w") as f:
        f.write("not a LightGBM model\n")
    shadow = str(tmp_path_factory.mktemp("no-onnxruntime"))  # an onnxruntime that is not installed
    os.makedirs(os.path.join(shadow, "onnxruntime"))
    with open(os.path.join(shadow, "onnxruntime", "__init__.py"), "w") as f:
        f.write("raise ImportError(\"No module named 'onnxruntime'\")\n")
    cases = {"missing": ("sklearn", empty, None), "several": ("xgboost", several, None),
             "corrupt": ("lightgbm", corrupt, None), "extra": ("onnx", trained["onnx"], {"PYTHONPATH": shadow})}
    with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
        runs = {case: pool.submit(run_runtime, *plan) for case, plan in cases.items()}
        return {case: (cases[case][1], *run.result()) for case, run in runs.items()}


def error_lines(output: str) -> List[str]:
    assert "Traceback" not in output, output
    return [line for line in output.splitlines() if " ERROR " in line]


def test_no_model_file(failures):
    model_dir, status, output = failures["missing"]
    assert status == 1, output
    (line,) = error_lines(output)
    assert line.endswith(f"sklearn: no .joblib / .pkl / .pickle model file in {model_dir} (it holds: notes.txt)")


def test_several_model_files(failures):
    model_dir, status, output = failures["several"]
    assert status == 1, output
    (line,) = error_lines(output)
    assert line.endswith(f"xgboost: 2 model files in {model_dir} (model.json, model.ubj); only one is allowed: "
                         "remove the others or point --model_dir at one of them")


def test_model_that_fails_to_load_is_never_served(failures):
    model_dir, status, output = failures["corrupt"]
    assert status == 1, output
    (line,) = error_lines(output)
    assert f"model m failed to load from {os.path.join(model_dir, 'model.txt')}: LightGBMError: " in line
    assert "Model server" not in output  # it never started listening


def test_missing_extra_names_it(failures):
    _, status, output = failures["extra"]
    assert status == 1, output
    (line,) = error_lines(output)
    assert line.endswith("the onnx runtime needs the onnxruntime package (No module named 'onnxruntime'): "
                         "pip install 'kserve-sdk[onnx]'")

"""``python -m kserve_sdk.runtimes --framework sklearn|xgboost|lightgbm|onnx``: one command for every runtime,
as KServe's predictiveserver (``--framework``, default sklearn; ``--nthread``, default 1).

Each framework serves a tiny iris model trained here (samples/runtimes/train.py) and must answer, over v1 and
v2 REST and gRPC, what the library itself predicts. The server started without ``--framework`` must be the
scikit-learn one, and must not need the other libraries (they are hidden from it). The mistakes run the real
command and must stop with one clear line and the right exit status: an unknown framework (2, argparse's
usage), ``--framework`` without a value (2), the framework's model file missing (1), its library missing (1).
Everything listens on 127.0.0.1 and is stopped by its PID.
"""
import concurrent.futures
import json
import os
import subprocess
import sys
from typing import Dict, List, Tuple

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from helpers import (
    ROOT,
    Server,
    free_port,
    http_get,
    post_json,
    started_together,
    triton_input,
)
from samples.runtimes.train import iris, save_lightgbm, save_onnx, save_sklearn, save_xgboost

MODULE = "kserve_sdk.runtimes"
TABULAR = ["sklearn", "xgboost", "lightgbm"]
OTHER_LIBRARIES = ["xgboost", "lightgbm", "onnxruntime"]  # what the default (sklearn) server must not need


def rows() -> np.ndarray:
    """15 iris rows, every class."""
    return iris()[0][::10]


def hide_modules(folder: str, names: List[str]) -> str:
    """A folder that, first on PYTHONPATH, makes ``import name`` fail as if the package were not installed."""
    for name in names:
        os.makedirs(os.path.join(folder, name))
        with open(os.path.join(folder, name, "__init__.py"), "w") as f:
            f.write(f"raise ImportError(\"No module named '{name}'\")\n")
    return folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Dict[str, str]:
    """{framework: the folder of its one model file}."""
    folders = {name: str(tmp_path_factory.mktemp(name)) for name in TABULAR + ["onnx"]}
    sklearn_model = save_sklearn(folders["sklearn"])
    save_xgboost(folders["xgboost"])
    save_lightgbm(folders["lightgbm"])
    save_onnx(folders["onnx"], sklearn_model)
    return folders


@pytest.fixture(scope="module")
def expected(trained) -> Dict[str, object]:
    """What each library itself predicts for rows() (ONNX: every output by name)."""
    import joblib
    import lightgbm as lgb
    import onnxruntime as ort
    import xgboost as xgb

    data = rows()
    session = ort.InferenceSession(os.path.join(trained["onnx"], "model.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return {
        "sklearn": joblib.load(os.path.join(trained["sklearn"], "model.joblib")).predict(data),
        "xgboost": xgb.Booster(model_file=os.path.join(trained["xgboost"], "model.json")).predict(xgb.DMatrix(data)),
        "lightgbm": lgb.Booster(model_file=os.path.join(trained["lightgbm"], "model.bst")).predict(data),
        "onnx": dict(zip(names, session.run(None, {"X": data.astype(np.float32)}), strict=True)),
    }


@pytest.fixture(scope="module")
def servers(trained, tmp_path_factory) -> Dict[str, Server]:
    """{served model: its server}, started together. "default" is sklearn's model with no --framework and
    the other frameworks' libraries hidden."""
    hidden = hide_modules(str(tmp_path_factory.mktemp("hidden")), OTHER_LIBRARIES)
    plans = {
        "default": ([], trained["sklearn"], {"PYTHONPATH": hidden + os.pathsep + ROOT}),
        "sklearn": (["--framework", "sklearn"], trained["sklearn"], {}),
        "xgboost": (["--framework", "xgboost", "--nthread", "2"], trained["xgboost"], {}),
        "lightgbm": (["--framework=lightgbm"], trained["lightgbm"], {}),
        "onnx": (["--framework", "onnx"], trained["onnx"], {}),
    }
    with started_together({name: Server(MODULE, ["--model_name", name, "--model_dir", folder, *flags], env=env,
                                        python_args=["-m"])
                            for name, (flags, folder, env) in plans.items()}) as started:
        yield started


def v2_infer(server: Server, model: str, name: str, array: np.ndarray, protocol: str) -> Dict[str, np.ndarray]:
    """{output name: array} of a tritonclient call over ``protocol`` ("rest" or "grpc")."""
    module = httpclient if protocol == "rest" else grpcclient
    client = module.InferenceServerClient(f"127.0.0.1:{server.http_port}" if protocol == "rest" else server.grpc_url)
    try:
        result = client.infer(model, [triton_input(module, name, array)])
        outputs = result.get_response()["outputs"] if protocol == "rest" else result.get_response().outputs
        names = [o["name"] if protocol == "rest" else o.name for o in outputs]
        return {output: result.as_numpy(output) for output in names}
    finally:
        client.close()


def v2_metadata(server: Server, model: str) -> Dict:
    status, body = http_get(f"{server.url}/v2/models/{model}")
    assert status == 200, body
    return json.loads(body)


# --- every framework answers as its library -----------------------------------------------------------------
@pytest.mark.parametrize("model, library", [("default", "sklearn"), ("sklearn", "sklearn"),
                                            ("xgboost", "xgboost"), ("lightgbm", "lightgbm")])
def test_tabular_frameworks_answer_as_their_library(servers, expected, model, library):
    server = servers[model]
    status, _, body = post_json(server.http_port, f"/v1/models/{model}:predict", {"instances": rows().tolist()},
                                timeout=10)
    assert status == 200, body
    np.testing.assert_allclose(np.array(body["predictions"]), expected[library], rtol=1e-6)
    datatype = v2_metadata(server, model)["inputs"][0]["datatype"]
    data = rows().astype(np.float32 if datatype == "FP32" else np.float64)
    for protocol in ("rest", "grpc"):
        outputs = v2_infer(server, model, "input-0", data, protocol)
        assert list(outputs) == ["output-0"]
        np.testing.assert_allclose(outputs["output-0"], expected[library], rtol=1e-6)


def test_onnx_framework_answers_as_onnxruntime(servers, expected):
    server, want = servers["onnx"], expected["onnx"]
    status, _, body = post_json(server.http_port, "/v1/models/onnx:predict", {"instances": rows().tolist()},
                                timeout=10)
    assert status == 200, body
    assert [row["label"] for row in body["predictions"]] == want["label"].tolist()
    for protocol in ("rest", "grpc"):
        outputs = v2_infer(server, "onnx", "X", rows().astype(np.float32), protocol)
        assert sorted(outputs) == ["label", "probabilities"]
        np.testing.assert_allclose(outputs["probabilities"], want["probabilities"], rtol=1e-6)


def test_the_metadata_is_the_chosen_runtimes(servers):
    """Each runtime describes its model its own way: XGBoost computes in FP32, ONNX names the graph's tensors."""
    described = {model: (v2_metadata(server, model)["inputs"], v2_metadata(server, model)["outputs"])
                 for model, server in servers.items()}
    fp64_rows = [{"name": "input-0", "datatype": "FP64", "shape": [-1, 4]}]
    assert described["default"] == described["sklearn"] == \
        (fp64_rows, [{"name": "output-0", "datatype": "INT64", "shape": [-1]}])
    assert described["xgboost"] == ([{"name": "input-0", "datatype": "FP32", "shape": [-1, 4]}],
                                    [{"name": "output-0", "datatype": "FP32", "shape": [-1, 3]}])
    assert described["lightgbm"] == (fp64_rows, [{"name": "output-0", "datatype": "FP64", "shape": [-1, 3]}])
    assert [t["name"] for t in described["onnx"][0] + described["onnx"][1]] == ["X", "label", "probabilities"]


def test_the_log_names_the_framework_and_threads(servers):
    assert "model default: framework sklearn\n" in servers["default"].log()
    assert "model xgboost: framework xgboost, nthread 2\n" in servers["xgboost"].log()
    assert "model lightgbm: framework lightgbm, nthread 1\n" in servers["lightgbm"].log()
    assert "model onnx: framework onnx, nthread 1\n" in servers["onnx"].log()


# --- mistakes stop the real command with one clear line --------------------------------------------------------
def run(flags: List[str], env: Dict[str, str] = None) -> Tuple[int, str]:
    """(exit status, output) of ``python -m kserve_sdk.runtimes --model_name m flags...`` on free ports."""
    argv = [sys.executable, "-m", MODULE, "--model_name", "m", "--http_port", str(free_port()),
            "--grpc_port", str(free_port()), *flags]
    done = subprocess.run(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, **(env or {})},
                          capture_output=True, text=True, timeout=120, start_new_session=True)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def mistakes(trained, tmp_path_factory) -> Dict[str, Tuple[int, str]]:
    """{case: (exit status, output)}, the commands run at once."""
    no_lightgbm = hide_modules(str(tmp_path_factory.mktemp("no-lightgbm")), ["lightgbm"])
    cases = {
        "unknown": (["--framework", "tensorflow", "--model_dir", trained["sklearn"]], None),
        "no value": (["--model_dir", trained["sklearn"], "--framework"], None),
        "default on a booster": (["--model_dir", trained["xgboost"]], None),
        "any case": (["--framework", "XGBoost", "--model_dir", trained["sklearn"]], None),
        "library missing": (["--framework", "lightgbm", "--model_dir", trained["lightgbm"]],
                            {"PYTHONPATH": no_lightgbm + os.pathsep + ROOT}),
        "help": (["--help"], None),
    }
    with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
        runs = {case: pool.submit(run, *plan) for case, plan in cases.items()}
        return {case: future.result() for case, future in runs.items()}


def error_lines(output: str) -> List[str]:
    assert "Traceback" not in output, output
    return [line for line in output.splitlines() if " ERROR " in line]


def test_an_unknown_framework_is_a_usage_error(mistakes):
    status, output = mistakes["unknown"]
    assert status == 2, output
    assert "usage: python -m kserve_sdk.runtimes " in output, output
    assert output.rstrip().endswith("python -m kserve_sdk.runtimes: error: argument --framework/-framework: "
                                    "unknown framework 'tensorflow'; choose sklearn, xgboost, lightgbm or onnx")
    assert "Traceback" not in output and "framework tensorflow" not in output  # stopped before any model


def test_framework_without_a_value_is_a_usage_error(mistakes):
    status, output = mistakes["no value"]
    assert status == 2, output
    assert output.rstrip().endswith("error: argument --framework/-framework: expected one argument"), output


def test_without_framework_it_is_sklearn(mistakes, trained):
    """KServe's default: no --framework serves scikit-learn, so a booster's folder has no model file for it."""
    status, output = mistakes["default on a booster"]
    assert status == 1, output
    (line,) = error_lines(output)
    assert line.endswith(f"sklearn: no .joblib / .pkl / .pickle model file in {trained['xgboost']} "
                         "(it holds: model.json)")


def test_framework_in_any_case(mistakes, trained):
    status, output = mistakes["any case"]
    assert status == 1, output
    (line,) = error_lines(output)
    assert line.endswith(f"xgboost: no .bst / .json / .ubj model file in {trained['sklearn']} "
                         "(it holds: model.joblib)")


def test_the_frameworks_library_missing_names_its_extra(mistakes):
    status, output = mistakes["library missing"]
    assert status == 1, output
    (line,) = error_lines(output)
    assert line.endswith("the lightgbm runtime needs the lightgbm package (No module named 'lightgbm'): "
                         "pip install 'kserve-sdk[lightgbm]'")


def test_help_lists_the_frameworks(mistakes):
    status, output = mistakes["help"]
    assert status == 0, output
    words = " ".join(output.split())  # argparse wraps the help to the terminal's width
    assert words.startswith("usage: python -m kserve_sdk.runtimes ")
    assert "--framework {sklearn,xgboost,lightgbm,onnx}" in words and "(default: sklearn)" in words
    assert "--nthread NTHREAD" in words

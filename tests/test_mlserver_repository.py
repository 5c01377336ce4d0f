"""An MLServer repository, as MLServer's docs write one for its scikit-learn runtime, served unchanged by
``python -m kserve_sdk --model_repository DIR``.

Three models, each with a ``model-settings.json`` in one of the shapes MLServer's docs give (its scikit-learn
example: ``parameters.uri`` names the file and ``parameters.version`` is ``v0.1.0``; its multi-model serving
example: a version and no uri, the file being ``model.joblib``; its custom environment example: a name and the
implementation only), under ``models/`` beside the docs' server ``settings.json``. Their answers over REST (raw
HTTP with the docs' own request body, and tritonclient) and gRPC (tritonclient), with the version in the request
and without it, must equal scikit-learn's own predictions. hack/bench/repo_bench.py sends the same requests to
MLServer 1.7.1 too and compares. Everything listens on 127.0.0.1 and is stopped by its PID.
"""
import json
import os
from typing import Dict, Tuple

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from helpers import Server, answers_ok, eventually, http_get, post_json, post_json_raw, triton_input

IMPLEMENTATION = "mlserver_sklearn.SKLearnModel"
#: name -> (its model-settings.json as the docs write it, its model file, the dataset, the estimator)
MODELS = {
    "mnist-svm": ({"name": "mnist-svm", "implementation": IMPLEMENTATION,
                   "parameters": {"uri": "./mnist-svm.joblib", "version": "v0.1.0"}},
                  "mnist-svm.joblib", "digits", "svc"),
    "iris-logreg": ({"name": "iris-logreg", "implementation": IMPLEMENTATION, "parameters": {"version": "v0.1.0"}},
                    "model.joblib", "iris", "logreg"),
    "diabetes-tree": ({"name": "diabetes-tree", "implementation": IMPLEMENTATION}, "model.joblib", "diabetes", "tree"),
}
LAUNCHER = os.path.join("tests", "models", "run_module.py")


def dataset(name: str) -> Tuple[np.ndarray, np.ndarray]:
    """Features and targets of a dataset scikit-learn ships (nothing is downloaded)."""
    from sklearn import datasets

    if name == "digits":
        digits = datasets.load_digits()
        return digits.images.reshape((len(digits.images), -1)), digits.target
    return getattr(datasets, f"load_{name}")(return_X_y=True)


def trained(kind: str, x: np.ndarray, y: np.ndarray):
    """Fitted on the first half of the rows, as the docs' train_test_split(shuffle=False) does."""
    from sklearn import linear_model, svm, tree

    half = len(x) // 2
    estimator = {"svc": lambda: svm.SVC(gamma=0.001),
                 "logreg": lambda: linear_model.LogisticRegression(max_iter=1000),
                 "tree": lambda: tree.DecisionTreeRegressor(max_depth=4, random_state=0)}[kind]()
    return estimator.fit(x[:half], y[:half])


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Tuple[str, Dict[str, Tuple[np.ndarray, np.ndarray]]]:
    """(the folder, {model: (test rows as FP32, scikit-learn's predictions for them)})."""
    import joblib

    root = tmp_path_factory.mktemp("mlserver-docs")
    (root / "settings.json").write_text(json.dumps({"debug": "true"}))  # the docs' server settings: not ours
    expected = {}
    for name, (settings, file, data, kind) in MODELS.items():
        x, y = dataset(data)
        estimator = trained(kind, x, y)
        folder = root / "models" / name
        folder.mkdir(parents=True)
        joblib.dump(estimator, folder / file)
        (folder / "model-settings.json").write_text(json.dumps(settings, indent=4))
        rows = x[len(x) // 2:][::37][:5].astype(np.float32)
        expected[name] = rows, estimator.predict(rows)
    return str(root), expected


@pytest.fixture(scope="module")
def server(start_server, repository) -> Server:
    started = start_server(LAUNCHER, "--model_repository", repository[0], env={"RUN_MODULE": "kserve_sdk"})
    eventually(lambda: answers_ok(started.url + "/v2/health/ready"), timeout=120,
               message=lambda: f"not ready; log:\n{started.log()[-3000:]}")
    return started


def paths(name: str):
    """The infer paths of a model: with the version its settings give (when they give one) and without."""
    version = MODELS[name][0].get("parameters", {}).get("version")
    return ([f"/v2/models/{name}/versions/{version}/infer"] if version else []) + [f"/v2/models/{name}/infer"]


def versions(name: str):
    """The versions a tritonclient call names: the settings' one (when they give one) and none."""
    version = MODELS[name][0].get("parameters", {}).get("version")
    return ([version] if version else []) + [""]


@pytest.mark.parametrize("name", list(MODELS))
def test_the_docs_request_body_answers_sklearns_predictions(server, repository, name):
    rows, expected = repository[1][name]
    for path in paths(name):
        for x, want in ((rows[:1], expected[:1]), (rows, expected)):
            # As the docs send it: input "predict", FP32, the rows nested (x_0.tolist()).
            body = {"inputs": [{"name": "predict", "shape": list(x.shape), "datatype": "FP32", "data": x.tolist()}]}
            status, _, doc = post_json(server.http_port, path, body)
            assert status == 200, (path, doc)
            assert doc["model_name"] == name
            # MLServer's sklearn runtime answers one output, "predict", a column [N, 1]: so do we
            assert [(o["name"], o["shape"]) for o in doc["outputs"]] == [("predict", [len(x), 1])], doc["outputs"]
            np.testing.assert_array_equal(np.asarray(doc["outputs"][0]["data"]).reshape(-1), want)


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
@pytest.mark.parametrize("name", list(MODELS))
def test_tritonclient_answers_are_sklearns_predictions(server, repository, name, protocol):
    rows, expected = repository[1][name]
    module = httpclient if protocol == "rest" else grpcclient
    client = module.InferenceServerClient(server.url[len("http://"):] if protocol == "rest" else server.grpc_url)
    try:
        for version in versions(name):
            result = client.infer(name, [triton_input(module, "predict", rows, "FP32")], model_version=version)
            got = result.as_numpy("predict")  # as MLServer's docs read the answer
            assert got is not None and got.shape == (len(rows), 1)
            np.testing.assert_array_equal(got.reshape(-1), expected)
    finally:
        client.close()


def test_every_model_is_ready_with_the_version_its_settings_give(server):
    status, _, index = post_json(server.http_port, "/v2/repository/index", {})
    assert status == 200, index
    assert {(row["name"], row.get("version", ""), row["state"]) for row in index} == {
        (name, settings.get("parameters", {}).get("version", ""), "READY") for name, (settings, *_) in MODELS.items()}
    for name, (settings, *_) in MODELS.items():
        status, body = http_get(f"{server.url}/v2/models/{name}")
        assert status == 200, body
        version = settings.get("parameters", {}).get("version")
        assert json.loads(body)["versions"] == ([version] if version else [])


def test_a_version_the_settings_do_not_give_is_404_naming_the_one_served(server, repository):
    rows, _ = repository[1]["mnist-svm"]
    body = {"inputs": [{"name": "predict", "shape": [1, 64], "datatype": "FP32", "data": rows[:1].tolist()}]}
    status, _, raw = post_json_raw(server.http_port, "/v2/models/mnist-svm/versions/v0.2.0/infer", body)
    assert status == 404, raw
    message = json.loads(raw)["error"]
    assert "'mnist-svm'" in message and "'v0.2.0'" in message and "versions served: v0.1.0" in message, message

"""From a repository version to a loaded model, in process: a model.py class, the scikit-learn and ONNX
runtimes (by our names and MLServer's class names), each version answering its own predictions; what
``prepare`` sets; and every bad implementation refused in one line naming the file and the problem."""
import json
import os

import numpy as np
import pytest

from kserve_sdk import Model, SchedulingPolicy
from kserve_sdk.repository import RepositoryError, build_model, prepare, runtime_of, scan
from kserve_sdk.runtimes.onnx import ONNXModel
from kserve_sdk.runtimes.sklearn import SKLearnModel

SCALER = '''
import os

from kserve_sdk import Model


class Scaler(Model):
    """Multiplies each value by the number in its version's factor.txt."""

    def load(self):
        with open(os.path.join(self.model_dir, "factor.txt")) as f:
            self.factor = float(f.read())
        self.ready = True
        return self.ready

    def predict(self, payload, headers=None):
        return {"predictions": [[self.factor * x for x in row] for row in payload["instances"]]}
'''


def put(path, content="") -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(json.dumps(content) if isinstance(content, dict) else content)
    return str(path)


def save_sklearn(path, factor: float) -> None:
    """y = factor * x, a LinearRegression saved with joblib."""
    import joblib
    from sklearn.linear_model import LinearRegression

    os.makedirs(os.path.dirname(path), exist_ok=True)
    x = np.arange(4, dtype=np.float64).reshape(-1, 1)
    joblib.dump(LinearRegression(fit_intercept=False).fit(x, factor * x[:, 0]), path)


def save_onnx(path, factor: float) -> None:
    """y = factor * x, an ONNX graph of one Mul (input x FP32 [n, 1])."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "k"], ["y"])], "scale",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1])],
        [helper.make_tensor("k", TensorProto.FLOAT, [1], [factor])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


@pytest.fixture
def repository(tmp_path):
    """3 models x 2 versions (all served): custom (model.py, factor = version), iris (sklearn, 10 x version),
    scale (onnx, 100 x version)."""
    put(tmp_path / "custom" / "model-settings.json", {"implementation": "model.Scaler", "version_policy": {"all": {}}})
    put(tmp_path / "custom" / "model.py", SCALER)
    put(tmp_path / "iris" / "model-settings.json", {"implementation": "sklearn", "version_policy": {"all": {}}})
    put(tmp_path / "scale" / "model-settings.json", {"implementation": "onnx", "version_policy": {"all": {}}})
    for version in (1, 2):
        put(tmp_path / "custom" / str(version) / "factor.txt", str(version))
        save_sklearn(tmp_path / "iris" / str(version) / "model.joblib", 10 * version)
        save_onnx(tmp_path / "scale" / str(version) / "model.onnx", 100 * version)
    return tmp_path


def loaded(source):
    model = prepare(build_model(source), source)
    assert model.load() is not False and model.ready
    return model


def test_each_version_of_each_model_answers_its_own_predictions(repository):
    entries = scan(repository)
    kinds = {"custom": Model, "iris": SKLearnModel, "scale": ONNXModel}
    for name, base in {"custom": 1, "iris": 10, "scale": 100}.items():
        assert list(entries[name].versions) == ["1", "2"]
        for version, source in entries[name].versions.items():
            model = loaded(source)
            assert isinstance(model, kinds[name]) and model.name == name and model.version == version
            answer = model.predict({"instances": [[3.0]]})
            assert np.allclose(np.asarray(answer["predictions"]).ravel(), [3.0 * base * int(version)]), answer
    assert not os.path.exists(repository / "custom" / "__pycache__")  # no bytecode left in the repository


def test_mlserver_sklearn_settings_as_its_docs_write_them_load_the_file_named(tmp_path):
    put(tmp_path / "mnist-svm" / "model-settings.json", {
        "name": "mnist-svm", "implementation": "mlserver_sklearn.SKLearnModel",
        "parameters": {"uri": "./mnist-svm.joblib", "version": "v0.1.0"}})
    save_sklearn(tmp_path / "mnist-svm" / "mnist-svm.joblib", 2.0)
    save_sklearn(tmp_path / "mnist-svm" / "old.joblib", 5.0)  # a second model file: the uri says which
    source = scan(tmp_path)["mnist-svm"].versions["v0.1.0"]
    assert runtime_of(source) == "sklearn"
    model = loaded(source)
    assert isinstance(model, SKLearnModel) and model.version == "v0.1.0"
    assert model.model_dir == model.model_uri == str(tmp_path / "mnist-svm" / "mnist-svm.joblib")
    assert np.allclose(model.predict({"instances": [[3.0]]})["predictions"], [6.0])


@pytest.mark.parametrize("implementation, runtime", [
    ("mlserver_xgboost.XGBoostModel", "xgboost"), ("mlserver_lightgbm.LightGBMModel", "lightgbm"),
    ("mlserver_onnx.OnnxModel", "onnx"), ("mlserver_sklearn.sklearn.SKLearnModel", "sklearn"),
    ("XGBoost", "xgboost"), ("lightgbm", "lightgbm"),
])
def test_mlserver_class_names_and_ours_name_the_runtimes(tmp_path, implementation, runtime):
    put(tmp_path / "m" / "model-settings.json", {"implementation": implementation})
    source = scan(tmp_path)["m"].versions[""]
    assert runtime_of(source) == runtime
    assert type(build_model(source)).__module__ == f"kserve_sdk.runtimes.{runtime}"


def test_a_runtime_is_given_its_model_file_not_the_settings_file(tmp_path):
    """MLServer's XGBoost example: model.json beside model-settings.json (both .json) in one folder."""
    put(tmp_path / "mushroom-xgboost" / "model-settings.json",
        {"name": "mushroom-xgboost", "implementation": "mlserver_xgboost.XGBoostModel",
         "parameters": {"version": "v0.1.0"}})
    put(tmp_path / "mushroom-xgboost" / "model.json", "{}")
    source = scan(tmp_path)["mushroom-xgboost"].versions["v0.1.0"]
    model = prepare(build_model(source), source)
    assert model.model_dir == str(tmp_path / "mushroom-xgboost" / "model.json")


def test_several_model_files_prefer_mlservers_well_known_name_else_are_refused(tmp_path):
    folder = tmp_path / "m"
    put(folder / "model-settings.json", {"implementation": "sklearn"})
    put(folder / "model.joblib", "a")
    put(folder / "encoder.pkl", "b")
    source = scan(tmp_path)["m"].versions[""]
    assert prepare(build_model(source), source).model_dir == str(folder / "model.joblib")
    os.rename(folder / "model.joblib", folder / "classifier.joblib")
    source = scan(tmp_path)["m"].versions[""]
    with pytest.raises(RepositoryError) as caught:
        prepare(build_model(source), source)
    assert str(caught.value) == (f"{folder / 'model-settings.json'}: 2 sklearn model files in {folder} "
                                 "(classifier.joblib, encoder.pkl): set parameters.uri to the one to serve")


def test_without_implementation_the_files_say_which_runtime(tmp_path):
    save_onnx(tmp_path / "resnet" / "1" / "model.onnx", 4.0)
    put(tmp_path / "weird" / "1" / "weights.bin", "x")
    entries = scan(tmp_path)
    model = loaded(entries["resnet"].versions["1"])
    assert isinstance(model, ONNXModel) and model.model_dir == str(tmp_path / "resnet" / "1" / "model.onnx")
    with pytest.raises(RepositoryError) as caught:
        build_model(entries["weird"].versions["1"])
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'weird'}: sets no implementation and its files "
                              f"({tmp_path / 'weird' / '1'}) hold no model file it can be told from: "
                              'set "implementation" to a runtime (sklearn, xgboost, lightgbm, onnx)'), message


def test_prepare_sets_what_the_settings_say(tmp_path):
    put(tmp_path / "m" / "model.py", SCALER)
    put(tmp_path / "m" / "data" / "factor.txt", "7")
    put(tmp_path / "m" / "model-settings.json", {
        "implementation": "model:Scaler", "parameters": {"version": "v3", "uri": "data/factor.txt",
                                                          "extra": {"threshold": 0.5}},
        "max_batch_size": 16, "max_batch_time": 0.02, "scheduling": {"instance_count": 2},
        "warmup": [{"instances": [[1.0]]}]})
    source = scan(tmp_path)["m"].versions["v3"]
    model = loaded(source)
    assert model.model_dir == str(tmp_path / "m" / "data")  # a class gets the folder of the file uri names
    assert model.model_uri == str(tmp_path / "m" / "data" / "factor.txt")
    assert (model.version, model.settings_extra, model.max_batch_size) == ("v3", {"threshold": 0.5}, 16)
    assert model.max_latency_ms == pytest.approx(20.0)  # MLServer's max_batch_time, seconds, in ms
    assert model.scheduling == SchedulingPolicy(instance_count=2)
    assert model.warmup == [{"instances": [[1.0]]}]
    assert model.predict({"instances": [[2.0]]}) == {"predictions": [[14.0]]}


def test_two_models_model_py_do_not_collide_and_a_changed_one_is_imported_anew(tmp_path):
    for name, factor in (("a", 2), ("b", 3)):
        put(tmp_path / name / "model-settings.json", {"implementation": "model.Fixed"})
        put(tmp_path / name / "model.py",
            f"from kserve_sdk import Model\n\nclass Fixed(Model):\n    factor = {factor}\n")
    entries = scan(tmp_path)
    first_a = build_model(entries["a"].versions[""])
    assert (first_a.factor, build_model(entries["b"].versions[""]).factor) == (2, 3)
    put(tmp_path / "a" / "model.py", "from kserve_sdk import Model\n\nclass Fixed(Model):\n    factor = 5\n")
    assert build_model(scan(tmp_path)["a"].versions[""]).factor == 5
    assert first_a.factor == 2  # the model built before keeps its class


def test_a_model_py_imports_its_neighbours_and_an_installed_class_works(tmp_path):
    put(tmp_path / "m" / "model-settings.json", {"implementation": "model.Uses"})
    put(tmp_path / "m" / "repo_helper_mod.py", "FACTOR = 9\n")
    put(tmp_path / "m" / "model.py", "from repo_helper_mod import FACTOR\nfrom kserve_sdk import Model\n\n"
                                     "class Uses(Model):\n    factor = FACTOR\n")
    put(tmp_path / "plain" / "model-settings.json", {"implementation": "kserve_sdk.model:Model"})
    entries = scan(tmp_path)
    assert build_model(entries["m"].versions[""]).factor == 9
    assert type(build_model(entries["plain"].versions[""])) is Model


# --- bad implementations: one line naming the file and the problem --------------------------------------------
FORMS = ("it must be a runtime (sklearn, xgboost, lightgbm, onnx); or MLServer's class of one "
         "(mlserver_sklearn.SKLearnModel, mlserver_xgboost.XGBoostModel, mlserver_lightgbm.LightGBMModel); or a "
         "class: module:Class or module.Class (module.py in the model's folder, or an installed module)")


@pytest.mark.parametrize("implementation, model_py, problem", [
    ("tensorflow", None, f"unknown implementation 'tensorflow'; {FORMS}"),
    ("nosuch_module_here.Thing", None,
     f"unknown implementation 'nosuch_module_here.Thing': no nosuch_module_here.py in {{folder}} and no installed "
     f"module 'nosuch_module_here'; {FORMS}"),
    ("model.Missing", "X = 1\n", "implementation 'model.Missing': module 'model' has no class 'Missing'"),
    ("model.X", "X = 1\n", "implementation 'model.X': module 'model' has no class 'X'"),
    ("model.NotAModel", "class NotAModel:\n    def __init__(self, name):\n        pass\n",
     "implementation 'model.NotAModel' is a NotAModel, not a kserve_sdk.Model"),
    ("model.Fails", "from kserve_sdk import Model\n\nclass Fails(Model):\n    def __init__(self, name):\n"
                    "        raise RuntimeError('no GPU here\\nsecond line')\n",
     "Fails('m') raised RuntimeError: no GPU here"),
    ("json.NoSuchClass", None, "implementation 'json.NoSuchClass': module 'json' has no class 'NoSuchClass'"),
])
def test_a_bad_implementation_names_the_settings_file_and_the_problem(tmp_path, implementation, model_py, problem):
    settings = put(tmp_path / "m" / "model-settings.json", {"implementation": implementation})
    if model_py is not None:
        put(tmp_path / "m" / "model.py", model_py)
    with pytest.raises(RepositoryError) as caught:
        build_model(scan(tmp_path)["m"].versions[""])
    assert str(caught.value) == f"{settings}: {problem.format(folder=tmp_path / 'm')}"


@pytest.mark.parametrize("model_py, problem", [
    ("import math\nx = 1 / 0\n", "importing it raised ZeroDivisionError: division by zero"),
    ("import no_such_dependency_here\n", "importing it raised ModuleNotFoundError: No module named "
                                         "'no_such_dependency_here'"),
    ("raise ValueError('bad config\\nmore detail')\n", "importing it raised ValueError: bad config"),
    ("def broken(:\n", "cannot be imported: SyntaxError: invalid syntax"),
])
def test_a_model_py_that_raises_at_import_names_the_file_and_the_first_line(tmp_path, model_py, problem):
    put(tmp_path / "m" / "model-settings.json", {"implementation": "model.Anything"})
    path = put(tmp_path / "m" / "model.py", model_py)
    with pytest.raises(RepositoryError) as caught:
        build_model(scan(tmp_path)["m"].versions[""])
    message = str(caught.value)
    assert message.startswith(f"{path}: {problem}"), message
    assert "\n" not in message

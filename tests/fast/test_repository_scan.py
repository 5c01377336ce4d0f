"""kserve_sdk.repository.scan over repositories generated here: both layouts (Triton's numbered version
folders, MLServer's settings files), each version policy over 3 models x 2 versions, every bad input the
issue lists as an entry problem naming the file or folders, and fingerprints that follow the files."""
import json
import os

import pytest

from kserve_sdk.repository import UNVERSIONED, RepositoryError, highest, scan


def put(path, content="") -> str:
    """Write a file (JSON for a dict), its folders made as needed."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(json.dumps(content) if isinstance(content, dict) else content)
    return str(path)


def numbered_repository(root, policy=None):
    """3 models x 2 versions in Triton's layout: 'custom' (a model.py class), 'iris' (sklearn), 'scale' (onnx)."""
    for name, implementation, model_file in [("custom", "model.Doubler", None), ("iris", "sklearn", "model.joblib"),
                                             ("scale", "onnx", "model.onnx")]:
        settings = {"implementation": implementation, **({"version_policy": policy} if policy else {})}
        put(root / name / "model-settings.json", settings)
        if model_file is None:
            put(root / name / "model.py", "class Doubler: pass\n")
        for version in ("1", "2"):
            put(root / name / version / (model_file or "weights.txt"), f"{name} {version}")
    return root


POLICIES = [
    (None, {"1": False, "2": True}),  # Triton's default: the latest version
    ({"latest": {"num_versions": 1}}, {"1": False, "2": True}),
    ({"latest": {"num_versions": 2}}, {"1": True, "2": True}),
    ({"all": {}}, {"1": True, "2": True}),
    ({"specific": {"versions": [1]}}, {"1": True, "2": False}),
    ({"specific": {"versions": [2, 1]}}, {"1": True, "2": True}),
]


@pytest.mark.parametrize("policy, served", POLICIES, ids=[json.dumps(p) for p, _ in POLICIES])
def test_each_version_policy_over_three_models_of_two_versions(tmp_path, policy, served):
    entries = scan(numbered_repository(tmp_path, policy))
    assert list(entries) == ["custom", "iris", "scale"]
    for name, entry in entries.items():
        assert entry.problem is None and entry.version_problems == {}
        assert list(entry.versions) == [v for v, on in served.items() if on]
        for version, source in entry.versions.items():
            assert (source.name, source.version) == (name, version)
            assert source.folder == str(tmp_path / name / version)
            assert source.model_folder == str(tmp_path / name)
            assert source.settings.path == str(tmp_path / name / "model-settings.json")
        assert highest(entry.versions) == max(v for v, on in served.items() if on)


def test_a_specific_version_that_does_not_exist_is_a_reason_beside_the_served_ones(tmp_path):
    entries = scan(numbered_repository(tmp_path, {"specific": {"versions": [1, 3]}}))
    entry = entries["iris"]
    assert list(entry.versions) == ["1"] and entry.problem is None
    assert entry.version_problems == {"3": 'version 3 is listed in version_policy {"specific": {"versions": [1, 3]}}, '
                                           "but no folder of model 'iris' holds it (versions found: 1, 2)"}


def test_a_model_none_of_whose_listed_versions_exist_is_unavailable(tmp_path):
    entry = scan(numbered_repository(tmp_path, {"specific": {"versions": [7]}}))["scale"]
    assert entry.versions == {}
    assert entry.problem.startswith("no version to serve: version 7 is listed in version_policy")


def test_a_numbered_model_without_settings_is_named_after_its_folder(tmp_path):
    put(tmp_path / "resnet" / "1" / "model.onnx", "x")
    put(tmp_path / "resnet" / "3" / "model.onnx", "y")
    entry = scan(tmp_path)["resnet"]
    assert list(entry.versions) == ["3"]
    settings = entry.versions["3"].settings
    assert settings.path is None and settings.implementation is None and settings.name == "resnet"


def test_mlserver_layout_versions_by_parameters_version_all_served(tmp_path):
    """MLServer's multi-model example: two folders, one name, two versions; MLServer serves both, so the
    default policy for versions that come from settings files is all."""
    for folder, version in (("mnist-svm-v1", "v0.1.0"), ("mnist-svm-v2", "v0.2.0")):
        put(tmp_path / folder / "model-settings.json", {
            "name": "mnist-svm", "implementation": "mlserver_sklearn.SKLearnModel",
            "parameters": {"uri": "./mnist-svm.joblib", "version": version}})
    put(tmp_path / "nested" / "mushroom-xgboost" / "model-settings.json", {
        "name": "mushroom-xgboost", "implementation": "mlserver_xgboost.XGBoostModel"})
    entries = scan(tmp_path)
    assert list(entries) == ["mnist-svm", "mushroom-xgboost"]
    svm = entries["mnist-svm"]
    assert list(svm.versions) == ["v0.1.0", "v0.2.0"] and highest(svm.versions) == "v0.2.0"
    assert svm.versions["v0.2.0"].folder == str(tmp_path / "mnist-svm-v2")
    assert svm.versions["v0.2.0"].location == str(tmp_path / "mnist-svm-v2" / "mnist-svm.joblib")
    assert list(entries["mushroom-xgboost"].versions) == [UNVERSIONED]


def test_mlserver_layout_honours_a_version_policy(tmp_path):
    for version in ("v1", "v2", "v3"):
        put(tmp_path / "m" / version / "model-settings.json",
            {"name": "m", "parameters": {"version": version}, "version_policy": {"latest": {"num_versions": 2}}})
    assert list(scan(tmp_path)["m"].versions) == ["v2", "v3"]


def test_version_folders_with_their_own_settings(tmp_path):
    """Triton's folders holding MLServer's per-version files: the folder's number is the version."""
    put(tmp_path / "m" / "1" / "model-settings.json", {"name": "m", "implementation": "sklearn"})
    put(tmp_path / "m" / "2" / "model-settings.json", {"implementation": "onnx", "parameters": {"version": "2"}})
    entry = scan(tmp_path)["m"]
    assert entry.problem is None and list(entry.versions) == ["2"]
    assert entry.versions["2"].settings.implementation == "onnx" and entry.versions["2"].settings.name == "m"


def test_folders_without_a_model_and_hidden_ones_are_skipped(tmp_path):
    put(tmp_path / "README.md", "models")
    put(tmp_path / "notes" / "todo.txt", "x")
    put(tmp_path / ".git" / "m" / "model-settings.json", {"name": "hidden"})
    put(tmp_path / "m" / "1" / "model.onnx", "x")
    put(tmp_path / "m" / "__pycache__" / "model.cpython-311.pyc", "x")  # what importing model.py may leave
    put(tmp_path / "m" / ".ipynb_checkpoints" / "x", "x")
    entries = scan(tmp_path)
    assert list(entries) == ["m"] and entries["m"].problem is None


def test_the_root_must_be_a_folder(tmp_path):
    with pytest.raises(RepositoryError, match=r"/nowhere: the model repository is not a folder$"):
        scan(str(tmp_path / "nowhere"))


# --- bad input: that model unavailable with a reason naming the file, every other model served ---------------
def test_a_malformed_settings_file_makes_that_model_unavailable_naming_the_file(tmp_path):
    numbered_repository(tmp_path)
    bad = put(tmp_path / "broken" / "model-settings.json", '{"name": "broken", "implementation": ')
    entries = scan(tmp_path)
    assert entries["broken"].versions == {}
    assert entries["broken"].problem.startswith(f"{bad}: is not valid JSON: Expecting value: line 1")
    assert all(entries[name].problem is None and entries[name].versions for name in ("custom", "iris", "scale"))


def test_two_models_with_one_name_are_both_unavailable_naming_both_folders(tmp_path):
    numbered_repository(tmp_path)
    put(tmp_path / "a" / "model-settings.json", {"name": "twin", "implementation": "sklearn"})
    put(tmp_path / "b" / "model-settings.json", {"name": "twin", "implementation": "onnx"})
    entries = scan(tmp_path)
    assert entries["twin"].versions == {}
    assert entries["twin"].problem == f"folders {tmp_path / 'a'} and {tmp_path / 'b'} both hold model 'twin'"
    assert entries["iris"].problem is None and list(entries["iris"].versions) == ["2"]


def test_two_folders_claiming_one_name_and_version(tmp_path):
    put(tmp_path / "x" / "model-settings.json", {"name": "m", "parameters": {"version": "v1"}})
    put(tmp_path / "y" / "model-settings.json", {"name": "m", "parameters": {"version": "v1"}})
    put(tmp_path / "z" / "model-settings.json", {"name": "m", "parameters": {"version": "v2"}})
    entry = scan(tmp_path)["m"]
    assert entry.versions == {}
    assert entry.problem == f"folders {tmp_path / 'x'} and {tmp_path / 'y'} both hold version 'v1' of model 'm'"


def test_a_version_folder_whose_name_is_not_a_number(tmp_path):
    numbered_repository(tmp_path)
    os.makedirs(tmp_path / "iris" / "latest")
    entries = scan(tmp_path)
    assert entries["iris"].versions == {}
    assert entries["iris"].problem == (f"{tmp_path / 'iris'}: sub-folder 'latest' is not a version number; in a "
                                       "model with numbered version folders (1/, 2/, ...) every sub-folder is a "
                                       "version")
    assert entries["scale"].problem is None and entries["custom"].problem is None


def test_parameters_version_beside_numbered_folders_is_refused(tmp_path):
    settings = put(tmp_path / "m" / "model-settings.json", {"parameters": {"version": "v1"}})
    put(tmp_path / "m" / "1" / "model.onnx", "x")
    assert scan(tmp_path)["m"].problem == (f"{settings}: parameters.version 'v1' is set, but this model's versions "
                                           "are its numbered folders: remove parameters.version")


def test_a_broken_version_file_makes_that_version_unavailable_only(tmp_path):
    put(tmp_path / "m" / "model-settings.json", {"implementation": "onnx", "version_policy": {"all": {}}})
    put(tmp_path / "m" / "1" / "model.onnx", "x")
    bad = put(tmp_path / "m" / "2" / "model-settings.json", {"name": "other"})
    entry = scan(tmp_path)["m"]
    assert list(entry.versions) == ["1"] and entry.problem is None
    assert entry.version_problems == {"2": f"{bad}: names model 'other', but its folder is a version of 'm'"}


def test_different_version_policies_for_one_model(tmp_path):
    one = put(tmp_path / "a" / "model-settings.json",
              {"name": "m", "parameters": {"version": "1"}, "version_policy": {"all": {}}})
    two = put(tmp_path / "b" / "model-settings.json",
              {"name": "m", "parameters": {"version": "2"}, "version_policy": {"latest": {"num_versions": 1}}})
    assert scan(tmp_path)["m"].problem == (f"the model's settings give different version policies: "
                                           f'{{"all": {{}}}} in {one} and {{"latest": {{"num_versions": 1}}}} in {two}')


# --- fingerprints ---------------------------------------------------------------------------------------------
def fingerprints(root):
    return {(name, version): source.fingerprint for name, entry in scan(root).items()
            for version, source in entry.versions.items()}


def touch_later(path, content):
    """Rewrite a file with a modification time surely different from before."""
    before = os.stat(path).st_mtime_ns
    put(path, content)
    os.utime(path, ns=(before + 2_000_000_000, before + 2_000_000_000))


def test_a_fingerprint_changes_when_a_file_of_its_version_changes(tmp_path):
    numbered_repository(tmp_path, {"all": {}})
    first = fingerprints(tmp_path)
    assert len(set(first.values())) == 6 and fingerprints(tmp_path) == first  # unchanged files: the same
    touch_later(tmp_path / "iris" / "2" / "model.joblib", "iris 2")  # same size, newer
    second = fingerprints(tmp_path)
    assert [key for key in first if first[key] != second[key]] == [("iris", "2")]
    put(tmp_path / "iris" / "2" / "extra" / "vocab.txt", "a b c")  # a new file, deeper
    third = fingerprints(tmp_path)
    assert [key for key in first if second[key] != third[key]] == [("iris", "2")]
    os.remove(tmp_path / "iris" / "2" / "extra" / "vocab.txt")
    assert fingerprints(tmp_path)[("iris", "2")] != third[("iris", "2")]


def test_a_change_to_the_model_folder_changes_every_version(tmp_path):
    numbered_repository(tmp_path, {"all": {}})
    first = fingerprints(tmp_path)
    touch_later(tmp_path / "custom" / "model.py", "class Doubler:\n    factor = 2\n")
    second = fingerprints(tmp_path)
    assert sorted(key for key in first if first[key] != second[key]) == [("custom", "1"), ("custom", "2")]


def test_a_uri_outside_the_folder_counts_and_pycache_does_not(tmp_path):
    shared = put(tmp_path / "shared" / "weights.joblib", "w")
    put(tmp_path / "models" / "m" / "model-settings.json", {"parameters": {"uri": "../../shared/weights.joblib"}})
    first = fingerprints(tmp_path / "models")[("m", UNVERSIONED)]
    put(tmp_path / "models" / "m" / "__pycache__" / "model.cpython-311.pyc", "bytecode")
    assert fingerprints(tmp_path / "models")[("m", UNVERSIONED)] == first
    touch_later(shared, "w2")
    assert fingerprints(tmp_path / "models")[("m", UNVERSIONED)] != first


def test_a_root_holding_settings_is_one_model_as_mlserver_start_dot_serves_it(tmp_path):
    put(tmp_path / "iris" / "model-settings.json", {"implementation": "sklearn", "parameters": {"version": "v1"}})
    put(tmp_path / "iris" / "sub" / "model-settings.json", {"name": "inner"})  # the model's files, not a model
    entries = scan(tmp_path / "iris")
    assert list(entries) == ["iris"] and list(entries["iris"].versions) == ["v1"]

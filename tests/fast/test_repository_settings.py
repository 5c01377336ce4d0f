"""``model-settings.json`` as kserve_sdk.repository reads it: MLServer's fields as MLServer's docs write them,
ours beside them, Triton's version policy, and every malformed file refused in one line naming the file."""
import json
import os

import pytest

from kserve_sdk import SchedulingPolicy, Warmup
from kserve_sdk.repository import RepositoryError, VersionPolicy, highest, ordered, read_settings
from kserve_sdk.repository.versions import parse_policy


def write(folder, document) -> str:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model-settings.json")
    with open(path, "w") as f:
        f.write(document if isinstance(document, str) else json.dumps(document))
    return path


def test_mlserver_sklearn_settings_as_its_docs_write_them(tmp_path):
    path = write(tmp_path / "mnist-svm", {
        "name": "mnist-svm",
        "implementation": "mlserver_sklearn.SKLearnModel",
        "parameters": {"uri": "./mnist-svm.joblib", "version": "v0.1.0"},
    })
    settings = read_settings(path)
    assert (settings.name, settings.implementation, settings.uri, settings.version) == (
        "mnist-svm", "mlserver_sklearn.SKLearnModel", "./mnist-svm.joblib", "v0.1.0")
    assert settings.folder == str(tmp_path / "mnist-svm") and settings.path == path
    assert settings.version_policy is None and settings.scheduling is None and settings.warmup is None
    assert settings.max_batch_size is None and settings.max_batch_latency_ms is None
    assert settings.pinned is False and settings.extra == {} and settings.unknown == ()


def test_mlserver_fields_we_do_not_use_are_accepted_and_not_called_unknown(tmp_path):
    path = write(tmp_path / "m", {
        "name": "m", "implementation": "sklearn", "platform": "sklearn", "versions": ["sklearn/1.3.0"],
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}], "outputs": [],
        "parallel_workers": 2, "warm_workers": True, "cache_enabled": True,
        "max_batch_size": 8, "max_batch_time": 0.25,
        "parameters": {"version": "v1", "format": "joblib", "content_type": "np", "environment_path": "/env",
                       "environment_tarball": "env.tar.gz", "inference_pool_gid": "g",
                       "autogenerate_inference_pool_gid": False, "extra": {"threshold": 0.5}},
        "versoin_policy": {"all": {}}, "parameters_extra": 1,
    })
    settings = read_settings(path)
    assert settings.max_batch_size == 8
    assert settings.max_batch_latency_ms == 250.0  # MLServer's max_batch_time is in seconds
    assert settings.extra == {"threshold": 0.5}
    assert settings.unknown == ("versoin_policy", "parameters_extra")  # typos are named, not silently taken


def test_our_fields_beside_mlservers(tmp_path):
    folder = tmp_path / "m"
    os.makedirs(folder)
    (folder / "ids.bin").write_bytes(bytes(4 * 8))
    path = write(folder, {
        "implementation": "model:Doubler",
        "version_policy": {"latest": {"num_versions": 2}},
        "scheduling": {"instance_count": 2, "priority_levels": 3, "timeout_action": "DELAY"},
        "warmup": [
            {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [1.0]}]},
            {"instances": [[1.0]]},
            {"name": "zeros", "batch_size": 4, "count": 2,
             "inputs": {"x": {"datatype": "FP32", "dims": [1]}, "ids": {"datatype": "INT64", "dims": [4],
                                                                       "input_data_file": "ids.bin"}}},
        ],
        "pinned": True,
        "max_batch_latency_ms": 5,
    })
    settings = read_settings(path)
    assert settings.name == "m"  # no name: the folder's
    assert settings.version_policy == VersionPolicy("latest", 2)
    assert settings.scheduling == SchedulingPolicy(instance_count=2, priority_levels=3, timeout_action="DELAY")
    assert settings.pinned is True and settings.max_batch_latency_ms == 5.0
    first, second, generated = settings.warmup
    assert first["inputs"][0]["name"] == "x" and second == {"instances": [[1.0]]}
    assert isinstance(generated, Warmup) and (generated.batch_size, generated.count) == (4, 2)
    # a relative input_data_file is the model folder's
    assert generated.inputs["ids"].input_data_file == str(folder / "ids.bin")


def test_an_empty_name_is_the_folders_as_in_mlserver(tmp_path):
    assert read_settings(write(tmp_path / "iris", {"name": "", "parameters": {"version": 3}})).name == "iris"
    assert read_settings(write(tmp_path / "iris", {"parameters": {"version": 3}})).version == "3"


MALFORMED = [
    ('{"name": "m",', "is not valid JSON: Expecting"),
    ("[1, 2]", "must hold a JSON object, not list"),
    ({"name": 7}, "name must be a string, got 7"),
    ({"implementation": ["sklearn"]}, 'implementation must be a string, got ["sklearn"]'),
    ({"parameters": ["uri"]}, 'parameters must be an object, got ["uri"]'),
    ({"parameters": {"uri": 3}}, "parameters.uri must be a string, got 3"),
    ({"parameters": {"version": 1.5}}, "parameters.version must be a string, got 1.5"),
    ({"parameters": {"version": "a/b"}}, "parameters.version must not hold '/'"),
    ({"parameters": {"extra": "x"}}, 'parameters.extra must be an object, got "x"'),
    ({"max_batch_size": "8"}, 'max_batch_size must be a non-negative integer, got "8"'),
    ({"max_batch_size": -1}, "max_batch_size must be a non-negative integer, got -1"),
    ({"max_batch_time": -0.1}, "max_batch_time must be a non-negative number, got -0.1"),
    ({"max_batch_time": 0.1, "max_batch_latency_ms": 5}, "give max_batch_time (seconds, MLServer's) or "
                                                         "max_batch_latency_ms, not both"),
    ({"pinned": "yes"}, 'pinned must be true or false, got "yes"'),
    ({"version_policy": {"newest": {}}}, "version_policy must be one of"),
    ({"version_policy": "latest"}, "version_policy must be one of"),
    ({"version_policy": {"latest": {"num_versions": 2}, "all": {}}}, "version_policy must be one of"),
    ({"version_policy": {"latest": {"num_versions": 0}}}, "version_policy latest must be"),
    ({"version_policy": {"latest": 2}}, "version_policy 'latest' must hold an object; got 2"),
    ({"version_policy": {"all": {"x": 1}}}, "version_policy all takes no fields"),
    ({"version_policy": {"specific": {"versions": []}}}, "version_policy specific must be"),
    ({"version_policy": {"specific": {"versions": [1, -2]}}}, "a version is a number or a non-empty string; got -2"),
    ({"scheduling": {"instance_count": 2, "max_queue": 3}}, "unknown scheduling field(s) 'max_queue'"),
    ({"scheduling": {"timeout_action": "DROP"}}, "timeout_action must be one of REJECT, DELAY, got 'DROP'"),
    ({"scheduling": [1]}, "scheduling must be an object of SchedulingPolicy's fields"),
    ({"warmup": {"instances": []}}, "warmup must be a list"),
    ({"warmup": [3]}, "warmup[0] is a int, not a request body"),
    ({"warmup": [{"inputs": {"x": {"datatype": "FP99", "dims": [1]}}}]}, "unknown datatype 'FP99'"),
]


@pytest.mark.parametrize("document, problem", MALFORMED, ids=[problem[:40] for _, problem in MALFORMED])
def test_a_malformed_file_is_one_line_naming_the_file_and_the_problem(tmp_path, document, problem):
    path = write(tmp_path / "m", document)
    with pytest.raises(RepositoryError) as caught:
        read_settings(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: "), message
    assert problem in message, message
    assert "\n" not in message
    assert isinstance(caught.value, ValueError)


def test_an_unreadable_file_names_it(tmp_path):
    path = str(tmp_path / "model-settings.json")
    os.makedirs(path)  # a folder where the file should be
    with pytest.raises(RepositoryError, match=r"model-settings\.json: cannot be read: "):
        read_settings(path)


@pytest.mark.parametrize("policy, available, served, missing", [
    ({"latest": {"num_versions": 1}}, ["1", "2", "10"], ["10"], []),
    ({"latest": {}}, ["1", "2"], ["2"], []),
    ({"latest": {"num_versions": 2}}, ["3", "1", "2"], ["2", "3"], []),
    ({"latest": {"num_versions": 5}}, ["1", "2"], ["1", "2"], []),
    ({"all": {}}, ["2", "1"], ["1", "2"], []),
    ({"specific": {"versions": [1, 3]}}, ["1", "2", "3"], ["1", "3"], []),
    ({"specific": {"versions": [3, 1, 7]}}, ["1", "2", "3"], ["1", "3"], ["7"]),
    ({"specific": {"versions": ["v1"]}}, ["v1", "v2"], ["v1"], []),
])
def test_triton_version_policies_choose_versions(policy, available, served, missing):
    assert parse_policy(policy).select(available) == (served, missing)


def test_versions_order_by_number_then_naturally():
    assert ordered(["10", "2", "1"]) == ["1", "2", "10"]
    assert ordered(["v10", "v2", "v10b", "v1.2.0", "v1.10.0"]) == ["v1.2.0", "v1.10.0", "v2", "v10", "v10b"]
    assert highest(["1", "9", "10"]) == "10" and highest(["v0.1.0", "v0.2.0"]) == "v0.2.0"
    assert highest(["", "v1"]) == "v1" and highest([]) is None
    assert ordered(["b", "2", "a1"]) == ["2", "a1", "b"]  # numbers and names mix without error

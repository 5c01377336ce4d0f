"""samples/runtimes: its ClusterServingRuntime and InferenceService YAMLs against KServe's CRD schemas (the parts
used, tests/schemas) and against the runtimes they start, and its README run as a user would: train, serve
with the one command, ask. Everything listens on 127.0.0.1 and is stopped by its PID."""
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from typing import Dict, List, Tuple

import jsonschema
import pytest
import yaml

from helpers import (
    LAUNCHER,
    ROOT,
    flag_values,
    free_port,
    procfile,
    readme_commands,
    same_line,
    server_flags,
    stop_process_group,
    wait_ready,
)

FOLDER = os.path.join(ROOT, "samples", "runtimes")
SCHEMAS = {"ClusterServingRuntime": "clusterservingruntime.schema.json",
           "InferenceService": "inferenceservice-model.schema.json"}
# runtime module: the KServe modelFormat it serves, and the flags it adds to the server's
RUNTIMES = {"sklearn": ("sklearn", set()), "xgboost": ("xgboost", {"--nthread"}),
            "lightgbm": ("lightgbm", {"--nthread"}), "onnx": ("onnx", {"--nthread"})}


def documents() -> Dict[str, Dict]:
    """{file name: its YAML document} of every YAML in the folder."""
    docs = {}
    for name in sorted(os.listdir(FOLDER)):
        if name.endswith((".yaml", ".yml")):
            with open(os.path.join(FOLDER, name)) as f:
                docs[name] = yaml.safe_load(f)
    return docs


def of_kind(kind: str) -> Dict[str, Dict]:
    return {name: doc for name, doc in documents().items() if doc["kind"] == kind}


def readme() -> str:
    with open(os.path.join(FOLDER, "README.md")) as f:
        return f.read()


def test_a_runtime_and_an_inference_service_per_runtime():
    assert sorted(documents()) == sorted([f"runtime-{r}.yaml" for r in RUNTIMES] + [f"isvc-{r}.yaml" for r in RUNTIMES])


@pytest.mark.parametrize("name", sorted(documents()))
def test_yaml_matches_kserves_schema(name):
    doc = documents()[name]
    with open(os.path.join(ROOT, "tests", "schemas", SCHEMAS[doc["kind"]])) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_cluster_serving_runtime_starts_the_runtime(runtime):
    spec = documents()[f"runtime-{runtime}.yaml"]["spec"]
    model_format, own_flags = RUNTIMES[runtime]
    assert [f["name"] for f in spec["supportedModelFormats"]] == [model_format]
    (container,) = spec["containers"]
    module = f"kserve_sdk.runtimes.{runtime}"
    assert container["command"] == LAUNCHER + ["python", "-m", module]
    assert importlib.util.find_spec(module) is not None
    # the image is the one the README builds, and it runs the Procfile's program
    assert re.search(rf"^pack build {re.escape(container['image'])} ", readme(), re.M)
    args = flag_values(container["args"])
    assert set(args) - server_flags() - own_flags == set()
    assert args["--model_dir"] == "/mnt/models" and args["--model_name"] == "{{.Name}}"
    (port,) = container["ports"]
    assert port["name"] == "http1" and int(args["--http_port"]) == port["containerPort"]
    assert spec["annotations"]["prometheus.kserve.io/port"] == str(port["containerPort"])


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_inference_service_uses_its_runtime(runtime):
    model = documents()[f"isvc-{runtime}.yaml"]["spec"]["predictor"]["model"]
    runtimes = {doc["metadata"]["name"]: doc["spec"] for doc in of_kind("ClusterServingRuntime").values()}
    served = runtimes[model["runtime"]]
    assert model["modelFormat"]["name"] in [f["name"] for f in served["supportedModelFormats"]]
    assert model["protocolVersion"] in served["protocolVersions"]


def test_procfile_runs_a_runtime_with_known_flags():
    tokens = shlex.split(re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", procfile(FOLDER)["web"]))  # ${X:-default}
    assert tokens[:3] == ["python", "-m", "kserve_sdk.runtimes.sklearn"]
    assert set(flag_values(tokens[3:])) - server_flags() == set()


# --- the README, run ------------------------------------------------------------------------------------------
def local_commands() -> List[Tuple[str, List[str]]]:
    """The README's commands up to the deployment section: install, train, serve, ask."""
    commands = readme_commands("runtimes")
    return commands[:next(i for i, (c, _) in enumerate(commands) if c.startswith("pack "))]


def test_readme_trains_serves_and_answers(tmp_path):
    """Run in a copy of the folder with this checkout's Python (the install line is checked, not run: the
    test environment has the runtimes' libraries); the serve command gets free ports."""
    work = shutil.copytree(FOLDER, str(tmp_path / "runtimes"))
    install, train, serve, *asks = local_commands()
    assert install[0] == "pip install -r requirements.txt skl2onnx"
    env = {**os.environ, "PYTHONPATH": ROOT}
    command = shlex.split(train[0], comments=True)
    assert command[:2] == ["python", "train.py"]
    subprocess.run([sys.executable, *command[1:]], cwd=work, env=env, check=True, timeout=120,
                   capture_output=True)
    http_port, grpc_port = free_port(), free_port()
    argv = shlex.split(serve[0], comments=True)
    assert argv[:3] == ["python", "-m", "kserve_sdk.runtimes.sklearn"]
    log = os.path.join(work, "serve.log")
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, *argv[1:], "--http_port", str(http_port), "--grpc_port",
                                 str(grpc_port)], cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_ready(http_port, proc, log)
        assert asks, "the README asks the server nothing"
        for command, expected in asks:
            assert command.startswith("curl ") and expected, command
            done = subprocess.run(command.replace("localhost:8080", f"127.0.0.1:{http_port}"), shell=True,
                                  cwd=work, capture_output=True, text=True, timeout=30)
            assert same_line(done.stdout, expected[0]), (command, done.stdout, expected)
    finally:
        stop_process_group(proc)

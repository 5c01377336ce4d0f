"""KServe code runs unchanged: `python -m kserve_sdk script.py` and `import kserve_sdk.as_kserve`.

tests/models/kserve_unchanged.py imports only `kserve` (kserve.errors, kserve.logging, kserve.utils.utils,
kserve.protocol.infer_type, model_server.parser as a parent, register_exception_handler). It is served both
ways with a fake `kserve` package first on PYTHONPATH whose import raises, so a pass proves the alias wins
over a real kserve installed beside us; and answered over v1, v2 (tritonclient.http) and gRPC (tritonclient.grpc).
Also here: the rest of KServe's ModelServer surface, InferRequest.from_inference_request and KServe's import
paths of DataPlane and ModelRepositoryExtension.
"""
import asyncio
import json
import os
import re
from types import SimpleNamespace

import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

from helpers import ROOT, post_json, run_python

SCRIPT = os.path.join(ROOT, "tests", "models", "kserve_unchanged.py")
FAKE_KSERVE_MESSAGE = "the real kserve was imported: the kserve_sdk alias did not win"
WAYS = ["python -m kserve_sdk", "import kserve_sdk.as_kserve"]


@pytest.fixture(scope="module")
def fake_kserve(tmp_path_factory) -> str:
    """A folder holding a `kserve` package that raises when imported: PYTHONPATH for the tests here."""
    folder = tmp_path_factory.mktemp("fake-kserve")
    (folder / "kserve").mkdir()
    (folder / "kserve" / "__init__.py").write_text(f"raise ImportError({FAKE_KSERVE_MESSAGE!r})\n")
    return str(folder) + os.pathsep + ROOT


@pytest.fixture(scope="module", params=WAYS)
def unchanged(request, start_server, fake_kserve, tmp_path_factory):
    """The unchanged script served one way or the other, as model `mult`, multiplying by 3."""
    args = ("--model_name", "mult", "--multiplier", "3")
    if request.param == "python -m kserve_sdk":
        return start_server(SCRIPT, *args, env={"PYTHONPATH": fake_kserve}, python_args=("-m", "kserve_sdk"))
    copy = tmp_path_factory.mktemp("as-kserve") / "model.py"
    with open(SCRIPT) as f:
        copy.write_text("import kserve_sdk.as_kserve\n" + f.read())
    return start_server(str(copy), *args, env={"PYTHONPATH": fake_kserve})


# --- the unchanged script, both ways ---------------------------------------------------------------------------
def test_v1_predict_and_kserve_errors(unchanged):
    status, _, body = post_json(unchanged.http_port, "/v1/models/mult:predict", {"instances": [[1, 2], [3, 4]]})
    assert status == 200 and body["predictions"] == [[3, 6], [9, 12]]
    assert len(body["id"]) == 36  # kserve.utils.utils.generate_uuid
    status, _, body = post_json(unchanged.http_port, "/v1/models/mult:predict", {"instances": [[1, -2]]})
    assert (status, body) == (400, {"error": "negative values are not allowed"})
    assert "kserve is kserve_sdk" in unchanged.log()


def test_v2_rest_infer(unchanged):
    client = thttp.InferenceServerClient(f"127.0.0.1:{unchanged.http_port}")
    x = thttp.InferInput("input-0", [2, 2], "FP32")
    x.set_data_from_numpy(np.array([[1, 2], [3, 4]], np.float32))
    result = client.infer("mult", [x])
    np.testing.assert_array_equal(result.as_numpy("output-0"), [[3, 6], [9, 12]])
    # the model rebuilds this one through InferRequest.from_inference_request
    result = client.infer("mult", [x], parameters={"rebuild": True})
    np.testing.assert_array_equal(result.as_numpy("output-0"), [[3, 6], [9, 12]])
    x.set_data_from_numpy(np.array([[1, 2], [3, -4]], np.float32))
    with pytest.raises(InferenceServerException) as e:
        client.infer("mult", [x])
    assert e.value.status() == "400" and "negative values are not allowed" in e.value.message()
    client.close()


def test_grpc_infer(unchanged):
    client = tgrpc.InferenceServerClient(unchanged.grpc_url)
    x = tgrpc.InferInput("input-0", [1, 3], "INT64")
    x.set_data_from_numpy(np.array([[1, 2, 3]], np.int64))
    np.testing.assert_array_equal(client.infer("mult", [x]).as_numpy("output-0"), [[3, 6, 9]])
    x.set_data_from_numpy(np.array([[-1, 2, 3]], np.int64))
    with pytest.raises(InferenceServerException) as e:
        client.infer("mult", [x])
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and "negative values are not allowed" in e.value.message()
    client.close()


def test_registered_exception_handler_gets_loop_errors(unchanged):
    assert "loop exception handler" not in unchanged.log()
    status, _, body = post_json(unchanged.http_port, "/v1/models/mult:predict", {"instances": [[13, 1]]})
    assert status == 200 and body["predictions"] == [[39, 3]]
    log = unchanged.log_with("loop exception handler:")
    assert "loop exception handler: RuntimeError('thirteen is unlucky')" in log, log


def test_without_the_alias_the_fake_kserve_is_what_imports(fake_kserve):
    """The control: run plainly, the script meets the fake kserve, so the tests above would fail without the hook."""
    out = run_python("", SCRIPT, "--http_port", "0", pythonpath=fake_kserve)
    assert out.returncode != 0 and FAKE_KSERVE_MESSAGE in out.stderr, out.stderr


# --- the import hook ---------------------------------------------------------------------------------------------
def test_kserve_names_are_the_kserve_sdk_objects(fake_kserve):
    out = run_python("""
        import sys
        import kserve_sdk.as_kserve
        import kserve, kserve_sdk
        import kserve.errors, kserve.utils.utils, kserve.protocol.infer_type, kserve.protocol.grpc.grpc_predict_v2_pb2
        from kserve.logging import logger
        from kserve.protocol.dataplane import DataPlane
        from kserve.protocol.model_repository_extension import ModelRepositoryExtension
        assert kserve is kserve_sdk and kserve.Model is kserve_sdk.Model
        assert kserve.errors is kserve_sdk.errors and kserve.errors.InvalidInput is kserve_sdk.errors.InvalidInput
        for name in ("errors", "utils.utils", "protocol.infer_type", "protocol.grpc.grpc_predict_v2_pb2", "logging",
                     "protocol.dataplane", "protocol.model_repository_extension"):
            assert sys.modules["kserve." + name] is sys.modules["kserve_sdk." + name], name
        assert kserve_sdk.errors.__name__ == "kserve_sdk.errors" \
            and kserve_sdk.errors.__spec__.name == "kserve_sdk.errors"
        assert logger is kserve_sdk.logging.logger and DataPlane is kserve_sdk.dataplane.DataPlane
        print("ok")
    """, pythonpath=fake_kserve)
    assert out.returncode == 0 and out.stdout == "ok\n", out.stderr


def test_a_module_kserve_sdk_lacks_is_named(fake_kserve):
    out = run_python("""
        import kserve_sdk.as_kserve
        try:
            from kserve.api.kserve_client import KServeClient
        except ModuleNotFoundError as e:
            print(e.name)
            print(e)
    """, pythonpath=fake_kserve)
    assert out.returncode == 0, out.stderr
    name, message = out.stdout.splitlines()
    assert name == "kserve.api"
    assert message == ("No module named 'kserve.api': kserve_sdk has no module 'kserve_sdk.api' to stand for it "
                       "(the kserve modules kserve_sdk provides are listed in docs/kserve-compat.md)")


def test_a_kserve_imported_before_the_alias_is_refused(tmp_path):
    (tmp_path / "kserve").mkdir()
    (tmp_path / "kserve" / "__init__.py").write_text("")
    out = run_python("import kserve\nimport kserve_sdk.as_kserve\n", pythonpath=str(tmp_path) + os.pathsep + ROOT)
    assert out.returncode == 1
    assert ("ImportError: a real 'kserve' was imported before kserve_sdk's kserve alias was installed: put "
            "`import kserve_sdk.as_kserve` before any kserve import") in out.stderr, out.stderr


def test_runner_usage_and_module_mode(fake_kserve, tmp_path):
    out = run_python("", "-m", "kserve_sdk", pythonpath=fake_kserve)
    assert out.returncode == 2 and out.stderr.startswith("usage: python -m kserve_sdk path/to/model.py [args...]")
    out = run_python("", "-m", "kserve_sdk", str(tmp_path / "missing.py"), pythonpath=fake_kserve)
    assert out.returncode == 2
    assert out.stderr == f"python -m kserve_sdk: can't open file {str(tmp_path / 'missing.py')!r}: no such file\n"
    (tmp_path / "kserve_user.py").write_text("import sys, kserve\nprint(kserve.__name__, __name__, sys.argv[1:])\n")
    out = run_python("", "-m", "kserve_sdk", "-m", "kserve_user", "--x", "1",
                     pythonpath=str(tmp_path) + os.pathsep + fake_kserve)
    assert (out.returncode, out.stdout) == (0, "kserve_sdk __main__ ['--x', '1']\n"), out.stderr
    out = run_python("", "-m", "kserve_sdk", str(tmp_path / "kserve_user.py"), "a", pythonpath=fake_kserve)
    assert (out.returncode, out.stdout) == (0, "kserve_sdk __main__ ['a']\n"), out.stderr


# --- ModelServer's loop set-up ------------------------------------------------------------------------------------
def test_setup_event_loop_uses_default_then_registered_handler():
    out = run_python("""
        import asyncio
        import kserve_sdk
        server = kserve_sdk.ModelServer(max_asyncio_workers=3)
        seen = []

        async def main():
            loop = asyncio.get_running_loop()
            server.setup_event_loop()
            assert loop.get_exception_handler() == server.default_exception_handler
            assert loop._default_executor._max_workers == 3
            loop.call_soon(lambda: 1 / 0)
            await asyncio.sleep(0)
            server.register_exception_handler(lambda loop, context: seen.append(context["exception"]))
            server.setup_event_loop()
            loop.call_soon(lambda: {}["key"])
            await asyncio.sleep(0)
            assert repr(seen) == "[KeyError('key')]", seen
            server.register_signal_handler()
            assert loop.remove_signal_handler(__import__("signal").SIGTERM)
            print("ok")

        asyncio.run(main())
    """)
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == "ok", out.stdout + out.stderr
    assert "Caught exception: division by zero" in out.stdout + out.stderr
    assert "message: Exception in callback" in out.stdout + out.stderr
    assert "ZeroDivisionError" in out.stderr  # asyncio's own handler logs the traceback after ours


# --- InferRequest.from_inference_request, DataPlane and ModelRepositoryExtension ---------------------------------
def test_from_inference_request():
    from kserve_sdk.errors import InvalidInput
    from kserve_sdk.protocol.infer_type import InferRequest

    pydantic_like = SimpleNamespace(
        id="r1", parameters={"p": 1}, outputs=[SimpleNamespace(name="out", parameters={"binary_data": True})],
        inputs=[SimpleNamespace(name="x", shape=[2, 2], datatype="INT32", data=[1, 2, 3, 4], parameters=None)])
    request = InferRequest.from_inference_request(pydantic_like, "m")
    assert (request.id, request.model_name, request.parameters) == ("r1", "m", {"p": 1})
    np.testing.assert_array_equal(request.inputs[0].as_numpy(), np.array([[1, 2], [3, 4]], np.int32))
    assert [(o.name, o.parameters) for o in request.request_outputs] == [("out", {"binary_data": True})]
    as_dict = InferRequest.from_inference_request(
        {"id": "r2", "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [0.5]}]}, "m")
    assert as_dict.id == "r2" and as_dict.inputs[0].as_numpy().tolist() == [0.5]
    bad = SimpleNamespace(id=None, parameters=None, outputs=None,
                          inputs=[SimpleNamespace(name="x", shape=[3], datatype="INT32", data=[1, 2], parameters=None)])
    with pytest.raises(InvalidInput) as e:
        InferRequest.from_inference_request(bad, "m")
    assert "x" in str(e.value) and "3" in str(e.value), str(e.value)


def test_dataplane_and_repository_extension_import_paths():
    from kserve_sdk.dataplane import DataPlane as OurDataPlane
    from kserve_sdk.errors import ModelNotFound, ModelNotReady
    from kserve_sdk.model import Model
    from kserve_sdk.model_repository import ModelRepository
    from kserve_sdk.protocol.dataplane import DataPlane
    from kserve_sdk.protocol.model_repository_extension import ModelRepositoryExtension

    assert DataPlane is OurDataPlane

    class Loading(ModelRepository):
        def load(self, name):
            if name == "broken":
                raise OSError("no weights")
            model = Model(name)
            model.ready = name != "lazy"
            self.update(model)
            return True

    repository = Loading()
    extension = ModelRepositoryExtension(model_registry=repository)

    async def scenario():
        await extension.load("a")
        with pytest.raises(ModelNotReady) as not_ready:
            await extension.load("lazy")
        with pytest.raises(ModelNotReady) as broken:
            await extension.load("broken")
        listed = await extension.index(), await extension.index(filter_ready=True)
        await extension.unload("a")
        with pytest.raises(ModelNotFound):
            await extension.unload("a")
        return listed, str(not_ready.value), str(broken.value)

    (everything, ready), not_ready, broken = asyncio.run(scenario())
    assert everything == [{"name": "a", "state": "Ready", "reason": ""},
                          {"name": "lazy", "state": "NotReady", "reason": ""}]
    assert ready == [{"name": "a", "state": "Ready", "reason": ""}]
    assert "Model with name lazy is not ready." in not_ready
    assert "Model with name broken is not ready" in broken and "OSError" in broken and "no weights" in broken
    assert repository.get_model("a") is None


# --- docs/kserve-compat.md says which kserve modules exist -----------------------------------------------------
def compat_tables():
    """(module, names) of each row of the page's two tables: the modules provided, then those missing."""
    with open(os.path.join(ROOT, "docs", "kserve-compat.md")) as f:
        page = f.read()
    tables, rows = [], None
    for line in page.splitlines():
        if line.startswith("| `kserve` module"):
            rows = []
        elif rows is not None and line.startswith("| `kserve"):
            cells = line.split("|")
            modules = re.findall(r"`(kserve[\w.]*)`", cells[1])
            described = cells[2]
            while re.search(r"\([^()]*\)", described):  # names in parentheses are explanations, not exports
                described = re.sub(r"\([^()]*\)", "", described)
            names = re.findall(r"`([A-Za-z_][\w.]*)`", described)
            rows.append((modules, names))
        elif rows is not None and not line.startswith("|"):
            tables.append(rows)
            rows = None
    return tables


def test_the_documented_modules_are_what_imports():
    provided, missing = compat_tables()
    assert len(provided) > 20 and len(missing) >= 5
    out = run_python("""
        import importlib, json, sys
        import kserve_sdk.as_kserve
        provided, missing = json.loads(sys.argv[1])
        for modules, names in provided:
            (module,) = modules
            imported = importlib.import_module(module)
            assert imported is importlib.import_module(module.replace("kserve", "kserve_sdk", 1)), module
            for name in names:
                target = imported
                for part in name.split("."):
                    target = getattr(target, part)  # AttributeError names what the page promises wrongly
        for modules, _ in missing:
            for module in modules:
                try:
                    importlib.import_module(module)
                except ModuleNotFoundError as e:
                    assert "kserve_sdk has no module" in str(e), str(e)
                else:
                    raise AssertionError(module + " imports, but the page says it does not exist")
        print("ok")
    """, json.dumps([provided, missing]))
    assert out.returncode == 0 and out.stdout == "ok\n", out.stderr

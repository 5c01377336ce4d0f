"""``--event-loop``: uvloop or asyncio under REST and gRPC, as KServe's flag chooses."""
import sys

import numpy as np
import pytest
import tritonclient.grpc as tgrpc

from helpers import post_json
from kserve_sdk.model_server import loop_factory


@pytest.mark.parametrize("choice,loop", [("uvloop", "uvloop"), ("asyncio", "asyncio"), ("auto", "uvloop")])
def test_the_chosen_loop_serves_rest_and_grpc(start_server, choice, loop):
    server = start_server("tests/models/zoo.py", "--event-loop", choice, env={"ZOO_MODELS": "echo"})
    assert f"(event loop: {loop})" in server.log()
    doc = {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [2.5]}]}
    assert post_json(server.http_port, "/v2/models/echo/infer", doc)[2]["outputs"][0]["data"] == [2.5]
    tensor = tgrpc.InferInput("INPUT0", [1, 2], "FP32")
    tensor.set_data_from_numpy(np.array([[1, 2]], dtype=np.float32))
    result = tgrpc.InferenceServerClient(server.grpc_url).infer("echo", [tensor])
    assert result.as_numpy("OUTPUT0").tolist() == [[1.0, 2.0]]


def test_uvloop_that_is_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert loop_factory("auto") is None
    with pytest.raises(RuntimeError,
                       match=r"--event-loop uvloop needs the uvloop package: pip install 'kserve-sdk\[uvloop\]'"):
        loop_factory("uvloop")

"""--enable_predictor_health_check (KServe's flag): a transformer is ready only while its predictor is. Its
model's readiness (v1 GET /v1/models/<m>, v2 /v2/models/<m>/ready, gRPC ModelReady) asks the predictor for the
same model, and the server's (v2 /v2/health/ready, gRPC ServerReady) asks the predictor server; without the
flag, readiness stays the transformer's own. Predictions never wait on the check."""
import grpc
import pytest

from helpers import free_port, request
from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve_sdk.protocol.grpc.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub

ROUTES = ("/v1/models/iris", "/v2/models/iris/ready", "/v2/health/ready")


@pytest.fixture(scope="module")
def predictor(start_server):
    return start_server("samples/custom_model/model.py", "--model_name", "iris", grpc=False)


def _transformer(start_server, host: str, protocol: str, *flags: str):
    return start_server("samples/transformer/model.py", "--model_name", "iris", "--predictor_host", host,
                        "--predictor_protocol", protocol, *flags)


def _statuses(server) -> list:
    return [request(server.http_port, "GET", path)[0] for path in ROUTES]


def _grpc_ready(server) -> tuple:
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = GRPCInferenceServiceStub(channel)
        return (stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready,
                stub.ModelReady(pb.ModelReadyRequest(name="iris"), timeout=10).ready)


@pytest.mark.parametrize("protocol", ["v1", "v2"])
def test_a_transformer_is_ready_while_its_predictor_is(start_server, predictor, protocol):
    server = _transformer(start_server, f"127.0.0.1:{predictor.http_port}", protocol,
                          "--enable_predictor_health_check")
    assert _statuses(server) == [200, 200, 200]
    assert _grpc_ready(server) == (True, True)


@pytest.mark.parametrize("protocol", ["v1", "v2", "grpc-v2"])
def test_a_transformer_whose_predictor_is_down_is_not_ready(start_server, protocol):
    server = _transformer(start_server, f"127.0.0.1:{free_port()}", protocol, "--enable_predictor_health_check",
                          "--predictor_request_timeout_seconds", "2")
    assert _statuses(server) == [503, 503, 503]
    assert _grpc_ready(server) == (False, False)
    status, _, body = request(server.http_port, "GET", "/v1/models/iris")
    assert b"Model with name iris is not ready." in body, body


def test_a_transformer_whose_predictor_lacks_the_model_is_not_ready(start_server, predictor):
    server = start_server("samples/transformer/model.py", "--model_name", "other", "--predictor_host",
                          f"127.0.0.1:{predictor.http_port}", "--predictor_protocol", "v2",
                          "--enable_predictor_health_check")
    assert request(server.http_port, "GET", "/v2/models/other/ready")[0] == 503
    assert request(server.http_port, "GET", "/v2/health/ready")[0] == 200  # the predictor server is ready


def test_without_the_flag_readiness_is_the_transformers_own(start_server):
    server = _transformer(start_server, f"127.0.0.1:{free_port()}", "v2")
    assert _statuses(server) == [200, 200, 200]
    assert _grpc_ready(server) == (True, True)

"""errors.py: each error's HTTP status and gRPC code, the resolvers for any exception, the HTTP <-> gRPC table,
and how a model's own exception becomes a ModelError naming the model."""
import grpc
import pytest

from kserve_sdk import errors
from kserve_sdk.errors import (
    DeadlineExceeded,
    InferenceError,
    InvalidInput,
    ModelError,
    ModelMissingError,
    ModelNotFound,
    ModelNotReady,
    PayloadTooLarge,
    ServerBusy,
    ServerNotLive,
    ServerNotReady,
    SharedMemoryForbidden,
    UnsupportedProtocol,
    UpstreamError,
    grpc_code_for_http,
    grpc_code_of,
    http_status_for_grpc,
    model_error,
    naming_the_model,
    status_of,
)

#: an instance of each typed error -> (HTTP status, gRPC code, message)
TYPED = [
    (ModelMissingError("/mnt/models/x"), 404, "NOT_FOUND", "/mnt/models/x"),
    (InferenceError("boom"), 500, "INTERNAL", "boom"),
    (InferenceError("boom", status="FAILED"), 500, "INTERNAL", "[FAILED] boom"),
    (InvalidInput("bad"), 400, "INVALID_ARGUMENT", "bad"),
    (PayloadTooLarge("too big"), 413, "RESOURCE_EXHAUSTED", "too big"),
    (ServerBusy(8), 503, "UNAVAILABLE",
     "The server is busy: 8 requests are in flight in this worker (--max_concurrent_requests); retry later."),
    (DeadlineExceeded("m", 1.5, "--request_timeout_seconds"), 504, "DEADLINE_EXCEEDED",
     "model 'm' did not answer within 1.5 s (--request_timeout_seconds); the call was cancelled"),
    (ModelNotFound("m"), 404, "NOT_FOUND",
     "Request for unknown model: 'm' is not found. Model with name m does not exist."),
    (ModelNotReady("m"), 503, "UNAVAILABLE", "Model with name m is not ready."),
    (ModelNotReady("m", "loading"), 503, "UNAVAILABLE", "Model with name m is not ready. loading"),
    (UnsupportedProtocol("v3"), 501, "UNIMPLEMENTED", "Unsupported protocol v3."),
    (ServerNotReady(), 503, "UNAVAILABLE", "Server is not ready."),
    (ServerNotReady("m loading"), 503, "UNAVAILABLE", "Server is not ready. m loading"),
    (ServerNotLive("stopping"), 503, "UNAVAILABLE", "Server is not live. stopping"),
    (SharedMemoryForbidden(), 403, "PERMISSION_DENIED",
     "system shared memory is off on this server; start it with --allow_client_shm true to use it"),
    (ModelError("m", ValueError("v")), 500, "INTERNAL", "ValueError : v (model 'm')"),
    (UpstreamError(404, "no such model"), 404, "NOT_FOUND", "no such model"),
    (UpstreamError(302, "redirected"), 502, "INTERNAL", "redirected"),
    (UpstreamError(429, "slow down"), 429, "RESOURCE_EXHAUSTED", "slow down"),
]


@pytest.mark.parametrize("exc,status,code,message", TYPED, ids=lambda v: type(v).__name__ if isinstance(
    v, BaseException) else None)
def test_a_typed_error_carries_its_status_code_and_message(exc, status, code, message):
    assert status_of(exc) == (status, message)
    assert grpc_code_of(exc) == code
    assert code in grpc.StatusCode.__members__  # a name grpc.StatusCode[...] takes


@pytest.mark.parametrize("exc,status,code,message", [
    (NotImplementedError(), 501, "UNIMPLEMENTED", "Not implemented"),
    (NotImplementedError("later"), 501, "UNIMPLEMENTED", "later"),
    (ValueError("v"), 500, "INTERNAL", "ValueError : v"),
    (KeyError("k"), 500, "INTERNAL", "KeyError : 'k'"),
    (RuntimeError(), 500, "INTERNAL", "RuntimeError : "),
])
def test_any_other_exception_is_resolved_by_type(exc, status, code, message):
    assert status_of(exc) == (status, message) and grpc_code_of(exc) == code


def test_server_busy_asks_to_retry_after_a_second():
    assert ServerBusy(1).retry_after == 1


def test_a_models_own_exception_becomes_a_model_error():
    error = model_error("m", ZeroDivisionError("division by zero"))
    assert isinstance(error, ModelError) and error.model_name == "m"
    assert str(error) == "ZeroDivisionError : division by zero (model 'm')"
    assert model_error("m", InvalidInput("x")) is None  # typed errors pass as they are
    assert model_error("m", NotImplementedError()) is None
    import asyncio

    assert model_error("m", asyncio.CancelledError()) is None  # a BaseException: cancellations pass


def test_naming_the_model_wraps_only_untyped_errors():
    with pytest.raises(ModelError, match=r"TypeError : t \(model 'm'\)") as info:
        with naming_the_model("m"):
            raise TypeError("t")
    assert isinstance(info.value.__cause__, TypeError)
    with pytest.raises(ModelNotReady):
        with naming_the_model("m"):
            raise ModelNotReady("m")
    with naming_the_model("m"):
        pass


@pytest.mark.parametrize("status,code", [(400, "INVALID_ARGUMENT"), (401, "UNAUTHENTICATED"),
                                         (403, "PERMISSION_DENIED"), (404, "NOT_FOUND"), (409, "ALREADY_EXISTS"),
                                         (413, "RESOURCE_EXHAUSTED"), (429, "RESOURCE_EXHAUSTED"),
                                         (499, "CANCELLED"), (500, "INTERNAL"), (501, "UNIMPLEMENTED"),
                                         (503, "UNAVAILABLE"), (504, "DEADLINE_EXCEEDED"), (418, "INTERNAL"),
                                         (200, "INTERNAL")])
def test_http_statuses_map_to_grpc_codes(status, code):
    assert grpc_code_for_http(status) == code


@pytest.mark.parametrize("code,status", [("INVALID_ARGUMENT", 400), ("RESOURCE_EXHAUSTED", 413), ("CANCELLED", 499),
                                         ("UNAVAILABLE", 503), ("DEADLINE_EXCEEDED", 504), ("DATA_LOSS", 500),
                                         ("NOT_FOUND", 404), ("UNKNOWN", 500)])
def test_grpc_codes_map_to_http_statuses(code, status):
    assert http_status_for_grpc(code) == status


def test_every_typed_errors_pair_is_in_the_table():
    """A typed error's HTTP status and gRPC code agree with the table the clients use to read them back."""
    classes = [c for c in vars(errors).values() if isinstance(c, type) and hasattr(c, "grpc_code")]
    assert len(classes) >= 10
    for cls in classes:
        assert grpc_code_for_http(int(cls.http_status)) == cls.grpc_code, cls.__name__


def test_the_classes_are_kserves():
    assert issubclass(InvalidInput, ValueError) and issubclass(InferenceError, RuntimeError)
    assert issubclass(PayloadTooLarge, InvalidInput) and issubclass(ModelError, InferenceError)
    assert issubclass(UpstreamError, InferenceError)

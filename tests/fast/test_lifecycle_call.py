"""lifecycle.py: one call's request id (taken or minted in UUID form), its close counted once, a failure answered
and logged by its type (500 with the traceback, 504 a warning, others one INFO line), cancellation when the client
leaves, and the Timings record's defaults."""
import asyncio
import logging
import re
import uuid

import pytest

from kserve_sdk.errors import DeadlineExceeded, InvalidInput, ModelNotFound, ServerBusy
from kserve_sdk.lifecycle import Call, Failure, Timings, failure_of, new_request_id, take_request_id, timings_of
from kserve_sdk.logging import logger


@pytest.fixture
def logged(caplog, monkeypatch):
    """The kserve logger's records of the test, at INFO and up (whatever a server's logging set up before)."""
    monkeypatch.setattr(logger, "propagate", True)
    with caplog.at_level(logging.INFO, logger=logger.name):
        yield caplog


def test_the_clients_request_id_is_taken():
    headers = {"x-request-id": "client-id"}
    call = Call("rest", "predict", headers)
    assert call.request_id == "client-id" and headers == {"x-request-id": "client-id"}


def test_a_request_id_is_minted_in_uuid_form_and_added_to_the_headers():
    headers = {}
    call = Call("grpc", "ModelInfer", headers)
    assert headers["x-request-id"] == call.request_id
    parsed = uuid.UUID(call.request_id)
    assert str(parsed) == call.request_id and parsed.version == 4 and parsed.variant == uuid.RFC_4122
    assert Call("rest", "predict").headers["x-request-id"] != call.request_id


def test_minted_ids_are_unique_and_uuids():
    ids = [new_request_id() for _ in range(1000)]
    assert len(set(ids)) == 1000
    for request_id in ids[:50]:
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", request_id)


def test_take_request_id_keeps_an_empty_id_the_client_sent():
    headers = {"x-request-id": ""}
    assert take_request_id(headers) == "" and headers == {"x-request-id": ""}


def test_close_is_counted_once_and_keeps_the_duration():
    labels = []
    call = Call("rest", "predict", model_name="m", label=lambda name: labels.append(name) or f"label-{name}")
    assert call.duration is None and call.model_label == "label-m"
    call.close("200")
    first = call.duration
    assert first is not None and first >= 0
    call.close("500")
    assert call.duration == first and call.model_label == "label-m"
    assert labels == ["m", "m"]  # once for the peek before close, once when closing; never again


@pytest.mark.parametrize("exc,expected", [
    (InvalidInput("bad"), Failure(400, "INVALID_ARGUMENT", "bad", None)),
    (ModelNotFound("m"), Failure(404, "NOT_FOUND", str(ModelNotFound("m")), None)),
    (ServerBusy(2), Failure(503, "UNAVAILABLE", ServerBusy(2).reason, 1)),
    (DeadlineExceeded("m", 2, "x"), Failure(504, "DEADLINE_EXCEEDED", str(DeadlineExceeded("m", 2, "x")), None)),
    (ValueError("v"), Failure(500, "INTERNAL", "ValueError : v", None)),
    (NotImplementedError(), Failure(501, "UNIMPLEMENTED", "Not implemented", None)),
])
def test_a_failure_is_decided_by_the_exceptions_type(exc, expected):
    assert failure_of(exc) == expected
    assert Call("rest", "predict").failed(exc) == expected


def test_a_server_fault_is_logged_as_an_error_with_its_traceback(logged):
    call = Call("rest", "predict", {"x-request-id": "r-500"})
    try:
        raise ValueError("broken")
    except ValueError as e:
        call.failed(e)
    [record] = logged.records
    assert record.levelno == logging.ERROR and record.exc_info and record.exc_info[0] is ValueError
    assert record.getMessage() == "rest predict failed (x-request-id r-500): broken"


def test_a_timeout_is_logged_as_a_warning_without_a_traceback(logged):
    Call("grpc", "ModelInfer", {"x-request-id": "r-504"}).failed(DeadlineExceeded("m", 1, "its deadline"))
    [record] = logged.records
    assert record.levelno == logging.WARNING and not record.exc_info
    assert record.getMessage() == ("grpc ModelInfer timed out (x-request-id r-504): model 'm' did not answer "
                                   "within 1 s (its deadline); the call was cancelled")


@pytest.mark.parametrize("exc,status", [(InvalidInput("bad"), 400), (ModelNotFound("m"), 404),
                                        (ServerBusy(1), 503), (NotImplementedError("no"), 501)])
def test_other_failures_are_one_info_line(logged, exc, status):
    Call("rest", "infer", {"x-request-id": "r"}).failed(exc, where="POST /v2/models/m/infer")
    [record] = logged.records
    assert record.levelno == logging.INFO and not record.exc_info
    assert record.getMessage() == f"POST /v2/models/m/infer -> {status} (x-request-id r): {status_message(exc)}"


def status_message(exc):
    return failure_of(exc).message


def test_info_lines_are_skipped_when_info_is_off(caplog, monkeypatch):
    monkeypatch.setattr(logger, "propagate", True)
    with caplog.at_level(logging.WARNING, logger=logger.name):
        Call("rest", "infer").failed(InvalidInput("bad"))
    assert caplog.records == []


def test_the_client_leaving_cancels_the_watched_task():
    async def scenario():
        call = Call("rest", "infer")
        task = asyncio.ensure_future(asyncio.sleep(10))
        call.watch(task)
        call.client_left()
        with pytest.raises(asyncio.CancelledError):
            await task
        quiet = Call("rest", "infer")
        other = asyncio.ensure_future(asyncio.sleep(0))
        quiet.watch(other)
        quiet.watch(None)  # stopped watching: leaving cancels nothing
        quiet.client_left()
        await other
        return call.gone, quiet.gone, other.cancelled()

    assert asyncio.run(asyncio.wait_for(scenario(), 5)) == (True, True, False)


def test_timings_defaults_and_record():
    timings = Timings()
    assert timings == {} and not timings
    assert (timings.queue_s, timings.executions, timings.traced) == (0.0, 0, False)
    timings["predict_ms"] = 1.5
    timings.executions += 1
    assert timings == {"predict_ms": 1.5} and timings.executions == 1 and Timings.executions == 0
    call = Call("rest", "infer")
    assert isinstance(call.timings, Timings) and timings_of(call) is call.timings
    assert timings_of(None) == {} and timings_of(None) is not timings_of(None)


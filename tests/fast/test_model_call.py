"""The one model-call path in process (kserve_sdk/model_call.py): what a ModelCall and a CountedStream record,
refuse and raise, and the deadline the scheduler gives a call (Scheduler.admit)."""
import asyncio
import time
import uuid

import pytest

from kserve_sdk.dataplane import DataPlane
from kserve_sdk.errors import DeadlineExceeded, InvalidInput, ModelError, ServerBusy, ServerNotReady
from kserve_sdk.lifecycle import Timings
from kserve_sdk.model_call import CountedStream, Deadline, ModelCall
from kserve_sdk.model_repository import ModelRepository
from kserve_sdk.protocol.infer_type import InferRequest
from kserve_sdk.triton.statistics import model_statistics


def _name() -> str:
    return f"m-{uuid.uuid4().hex[:8]}"


def _stats(name: str) -> dict:
    stats = model_statistics(name)
    return {"success": stats["inference_stats"]["success"]["count"], "fail": stats["inference_stats"]["fail"]["count"],
            "executions": stats["execution_count"]}


def _dataplane(**options) -> DataPlane:
    return DataPlane(ModelRepository(), enable_latency_logging=False, **options)


async def _words(*words, delay: float = 0.0, fail_at: int = -1):
    for i, word in enumerate(words):
        if i == fail_at:
            raise ValueError(f"no word {i}")
        await asyncio.sleep(delay)
        yield word


def test_a_call_that_succeeds_is_recorded_once_and_leaves_nothing_in_flight():
    dataplane, name = _dataplane(), _name()

    async def run():
        call = ModelCall(dataplane, name, Timings(), {})
        assert dataplane.calls_in_flight() == 1
        return await call.run(asyncio.sleep(0, "answer"))

    assert asyncio.run(run()) == "answer"
    assert dataplane.calls_in_flight() == 0
    assert _stats(name) == {"success": 1, "fail": 0, "executions": 0}


def test_a_call_run_once_outside_the_pipeline_counts_one_execution_and_its_time_as_predict():
    dataplane, name, timings = _dataplane(), _name(), Timings()
    asyncio.run(ModelCall(dataplane, name, timings, {}).run(asyncio.sleep(0.01), whole_is_one_execution=True))
    assert timings.executions == 1 and timings["predict_ms"] >= 10
    assert _stats(name)["executions"] == 1


def test_the_models_own_exception_becomes_the_models_error_and_a_failure():
    dataplane, name = _dataplane(), _name()

    async def broken():
        raise KeyError("weights")

    with pytest.raises(ModelError) as caught:
        asyncio.run(ModelCall(dataplane, name, Timings(), {}).run(broken()))
    assert name in str(caught.value) and "weights" in str(caught.value)
    assert _stats(name) == {"success": 0, "fail": 1, "executions": 0}
    assert dataplane.calls_in_flight() == 0


def test_our_own_errors_pass_as_they_are():
    dataplane, name = _dataplane(), _name()

    async def refuses():
        raise InvalidInput("bad tensor")

    with pytest.raises(InvalidInput, match="bad tensor"):
        asyncio.run(ModelCall(dataplane, name, Timings(), {}).run(refuses()))
    assert _stats(name)["fail"] == 1


def test_a_draining_server_refuses_a_call_before_counting_it():
    dataplane, name = _dataplane(), _name()
    dataplane.draining = True
    with pytest.raises(ServerNotReady, match="shutting down"):
        ModelCall(dataplane, name, Timings(), {})
    assert dataplane.calls_in_flight() == 0 and _stats(name) == {"success": 0, "fail": 0, "executions": 0}


def test_max_concurrent_requests_refuses_the_call_past_the_limit():
    dataplane, name = _dataplane(max_concurrent_requests=1), _name()
    first = ModelCall(dataplane, name, Timings(), {})
    with pytest.raises(ServerBusy):
        ModelCall(dataplane, name, Timings(), {})
    first.succeeded()
    ModelCall(dataplane, name, Timings(), {}).succeeded()
    assert _stats(name)["success"] == 2


def test_a_call_past_its_deadline_is_cancelled_and_named():
    dataplane, name = _dataplane(), _name()
    cancelled = []

    async def slow():
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def run():
        return await ModelCall(dataplane, name, Timings(), {}, deadline=Deadline.after(0.05, "the test")).run(slow())

    with pytest.raises(DeadlineExceeded, match=rf"model '{name}' did not answer within 0.05 s \(the test\)"):
        asyncio.run(run())
    assert cancelled == [True] and _stats(name)["fail"] == 1


def test_a_stream_answer_leaves_the_call_open_for_its_counted_stream():
    dataplane, name = _dataplane(), _name()

    async def run():
        timings = Timings()
        call = ModelCall(dataplane, name, timings, {})
        stream = await call.run(asyncio.sleep(0, _words("a", "b")), True, may_stream=True)
        assert dataplane.calls_in_flight() == 1 and _stats(name)["success"] == 0
        counted = CountedStream(dataplane, name, stream, {}, "rest_v2", timings, begun=call)
        return [word async for word in counted]

    assert asyncio.run(run()) == ["a", "b"]
    assert dataplane.calls_in_flight() == 0
    assert _stats(name) == {"success": 1, "fail": 0, "executions": 1}


@pytest.mark.parametrize("way", ["iterated", "pumped"])
def test_a_stream_is_one_call_in_flight_while_it_runs(way):
    dataplane, name = _dataplane(), _name()
    seen_in_flight = []

    async def run():
        stream = CountedStream(dataplane, name, _words("a", "b", "c"), {}, "rest_v2", Timings())
        if way == "iterated":
            async for _ in stream:
                seen_in_flight.append(dataplane.calls_in_flight())
        else:
            await stream.pump(lambda item: seen_in_flight.append(dataplane.calls_in_flight()))
        return stream.count

    assert asyncio.run(run()) == 3
    assert seen_in_flight == [1, 1, 1] and dataplane.calls_in_flight() == 0
    assert _stats(name) == {"success": 1, "fail": 0, "executions": 1}


@pytest.mark.parametrize("way", ["iterated", "pumped"])
def test_a_stream_that_fails_midway_is_the_models_error(way):
    dataplane, name = _dataplane(), _name()
    got = []

    async def run():
        stream = CountedStream(dataplane, name, _words("a", "b", "c", fail_at=1), {}, "rest_v2", Timings())
        if way == "iterated":
            async for word in stream:
                got.append(word)
        else:
            await stream.pump(got.append)

    with pytest.raises(ModelError, match="no word 1"):
        asyncio.run(run())
    assert got == ["a"] and dataplane.calls_in_flight() == 0
    assert _stats(name) == {"success": 0, "fail": 1, "executions": 1}


class _Countdown:
    """An async iterator that is not a generator: it has no aclose, as KServe allows a model's stream to be."""

    def __init__(self, n: int):
        self.n = n

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self.n == 0:
            raise StopAsyncIteration
        self.n -= 1
        return self.n


@pytest.mark.parametrize("way", ["iterated", "left", "never asked"])
def test_a_stream_of_any_async_iterator_ends_its_call(way):
    dataplane, name = _dataplane(), _name()

    async def run():
        stream = CountedStream(dataplane, name, _Countdown(3), {}, "rest_v2", Timings())
        if way == "iterated":
            return [n async for n in stream]
        answers = stream.__aiter__()
        if way == "left":
            assert await answers.__anext__() == 2
        await answers.aclose()
        return None

    assert asyncio.run(run()) == ([2, 1, 0] if way == "iterated" else None)
    assert dataplane.calls_in_flight() == 0 and _stats(name)["fail"] == 0


def test_a_client_that_leaves_is_no_failure_of_the_model():
    dataplane, name = _dataplane(), _name()

    async def run():
        answers = CountedStream(dataplane, name, _words("a", "b", "c"), {}, "rest_v2", Timings()).__aiter__()
        assert await answers.__anext__() == "a"
        await answers.aclose()

    asyncio.run(run())
    assert dataplane.calls_in_flight() == 0 and _stats(name) == {"success": 1, "fail": 0, "executions": 1}


def test_the_deadline_bounds_a_streams_first_answer_only():
    dataplane, quick, late = _dataplane(), _name(), _name()

    async def slow_then_quick():
        await asyncio.sleep(5)
        yield "never"

    async def quick_then_slow():
        yield "first"
        await asyncio.sleep(0.2)
        yield "second"

    async def run(name, items):
        stream = CountedStream(dataplane, name, items, {}, "rest_v2", Timings(),
                               deadline=Deadline.after(0.1, "--request_timeout_seconds"))
        return [item async for item in stream]

    assert asyncio.run(run(quick, quick_then_slow())) == ["first", "second"]
    with pytest.raises(DeadlineExceeded, match=rf"model '{late}' did not answer within 0.1 s"):
        asyncio.run(run(late, slow_then_quick()))
    assert _stats(quick)["success"] == 1 and _stats(late)["fail"] == 1


def test_a_handed_over_stream_never_asked_for_ends_its_call_when_closed():
    dataplane, name = _dataplane(), _name()

    async def run():
        call = ModelCall(dataplane, name, Timings(), {})
        await CountedStream(dataplane, name, _words("a"), {}, "rest_v2", Timings(), begun=call).aclose()

    asyncio.run(run())
    assert dataplane.calls_in_flight() == 0 and _stats(name)["success"] == 1


def test_a_model_answering_once_is_a_stream_of_one():
    dataplane, name = _dataplane(), _name()

    async def model(request, headers=None):
        return ({"echo": request}, {})

    async def run():
        stream = CountedStream(dataplane, name, None, {}, "grpc", Timings(), model=model, request=7)
        return [item async for item in stream]

    assert asyncio.run(run()) == [{"echo": 7}]


def _v2(parameters: dict) -> InferRequest:
    return InferRequest("m", infer_inputs=[], parameters=parameters)


@pytest.mark.parametrize("flag, parameters, expected", [
    (None, {}, None),
    (2.0, {}, (2.0, "--request_timeout_seconds")),
    (None, {"timeout": 500_000}, (0.5, "the request's timeout parameter")),
    (2.0, {"timeout": 500_000}, (0.5, "the request's timeout parameter")),
    (0.25, {"timeout": 500_000}, (0.25, "--request_timeout_seconds")),
    (None, {"timeout": 0}, None),
])
def test_the_deadline_is_the_shorter_of_the_flag_and_the_requests_timeout(flag, parameters, expected):
    dataplane = _dataplane(request_timeout_seconds=flag)

    async def deadline():
        return dataplane.scheduler.admit("m", None, _v2(parameters).parameters, {})[1]

    got = asyncio.run(deadline())
    assert (None if got is None else (got.seconds, got.source)) == expected


@pytest.mark.parametrize("timeout", [-1, 1.5, "10", True])
def test_a_timeout_parameter_that_is_not_a_whole_number_of_microseconds_is_refused(timeout):
    with pytest.raises(InvalidInput, match="the 'timeout' parameter must be a non-negative integer"):
        _dataplane().scheduler.admit("m", None, {"timeout": timeout}, {})


def test_a_scheduled_call_cut_short_keeps_its_slot_until_its_model_thread_has_ended():
    from kserve_sdk import executor
    from kserve_sdk.scheduling import SchedulingPolicy, Ticket
    from kserve_sdk.scheduling.queue import ModelQueue

    dataplane, name = _dataplane(), _name()
    ended = []

    def slow_stage():
        time.sleep(0.3)
        ended.append(time.perf_counter())

    async def stage():  # as a pipeline's coroutine: its stage goes to a thread once the call runs it
        return await executor.run_sync(slow_stage)

    async def cut_short(queue):
        call = ModelCall(dataplane, name, Timings(), {}, Ticket(queue, 0, None), Deadline.after(0.05, "the test"))
        await call.run(stage())

    async def scenario():
        queue = ModelQueue(name, SchedulingPolicy(instance_count=1).over(SchedulingPolicy()), 1)
        first = asyncio.create_task(cut_short(queue))
        await asyncio.sleep(0.01)
        entered = asyncio.create_task(queue.enter(0, None))
        with pytest.raises(DeadlineExceeded):
            await first
        assert not entered.done()  # the first call's stage still runs on its thread: its slot is not free
        await asyncio.wait_for(entered, 5)
        return time.perf_counter()

    admitted = asyncio.run(scenario())
    assert ended and admitted >= ended[0]


def test_a_call_refused_before_its_model_runs_leaves_nothing_in_flight():
    from kserve_sdk import Model
    from kserve_sdk.errors import SharedMemoryForbidden
    from kserve_sdk.protocol.infer_type import InferInput

    class Echo(Model):
        def predict(self, payload, headers=None):
            return payload

    dataplane, name = _dataplane(), _name()
    model = Echo(name)
    model.ready = True
    dataplane.model_registry.update(model)
    tensor = InferInput("x", [1], "FP32", parameters={"shared_memory_region": "r", "shared_memory_byte_size": 4})
    with pytest.raises(SharedMemoryForbidden):  # read before the model call begins: nothing to count
        asyncio.run(dataplane.infer(name, InferRequest(name, infer_inputs=[tensor])))
    assert dataplane.calls_in_flight() == 0

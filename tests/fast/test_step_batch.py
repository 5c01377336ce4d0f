"""@kserve_sdk.batch in process (kserve_sdk/batch.py): merging, when a step closes, failures per row and per step,
cancellation, and plain def methods on model threads."""
import asyncio
import threading
import time

import pytest

import kserve_sdk
from kserve_sdk.errors import InferenceError, ModelError


class Doubler(kserve_sdk.Model):
    def __init__(self, name="doubler", step_s=0.01, max_batch_size=8, max_wait_ms=200.0):
        super().__init__(name)
        self.step_s, self.threads = step_s, set()
        type(self).step.max_batch_size, type(self).step.max_wait_s = max_batch_size, max_wait_ms / 1000

    @kserve_sdk.batch(max_batch_size=8, max_wait_ms=200)
    async def step(self, rows):
        await asyncio.sleep(self.step_s)
        return [ValueError(f"no {r}") if r == "bad" else r * 2 for r in rows]


def test_concurrent_calls_are_merged_and_each_caller_gets_its_own_row():
    model = Doubler()

    async def run():
        return await asyncio.gather(*(model.step(i) for i in range(5)))

    assert asyncio.run(run()) == [0, 2, 4, 6, 8]
    assert model.step.stats() == {"steps": 1, "rows": 5, "max_rows": 5, "sizes": {5: 1}}


def test_a_step_holds_at_most_max_batch_size_rows():
    model = Doubler(max_batch_size=3)

    async def run():
        return await asyncio.gather(*(model.step(i) for i in range(7)))

    assert asyncio.run(run()) == [i * 2 for i in range(7)]
    assert model.step.stats()["max_rows"] == 3 and model.step.stats()["rows"] == 7


def test_streams_that_finished_a_step_together_do_not_wait_out_max_wait():
    model = Doubler(step_s=0.01, max_wait_ms=1000)

    async def stream(k):
        return [await model.step(k * 100 + i) for i in range(5)]

    async def run():
        return await asyncio.gather(*(stream(k) for k in range(4)))

    start = time.perf_counter()
    answers = asyncio.run(run())
    assert answers == [[2 * (k * 100 + i) for i in range(5)] for k in range(4)]
    assert time.perf_counter() - start < 0.5  # five steps of 10 ms, not five waits of 1 s
    assert model.step.stats()["sizes"] == {4: 5}


def test_a_stream_that_joins_late_is_served_from_the_next_step():
    model = Doubler(step_s=0.05)
    first_answer_at = {}

    async def stream(k, delay):
        await asyncio.sleep(delay)
        asked = time.perf_counter()
        for i in range(4):
            await model.step(i)
            first_answer_at.setdefault(k, time.perf_counter() - asked)

    async def run():
        await asyncio.gather(stream("early", 0), stream("late", 0.07))

    asyncio.run(run())
    assert first_answer_at["late"] < 2 * 0.05 + 0.04  # the rest of the running step, then its own


def test_an_exception_in_a_row_fails_that_caller_alone():
    model = Doubler()

    async def run():
        return await asyncio.gather(model.step(1), model.step("bad"), model.step(3), return_exceptions=True)

    good, bad, other = asyncio.run(run())
    assert (good, other) == (2, 6) and isinstance(bad, ValueError) and str(bad) == "no bad"


class Broken(kserve_sdk.Model):
    @kserve_sdk.batch(max_batch_size=4, max_wait_ms=10)
    async def step(self, rows):
        if "wrong length" in rows:
            return rows[:-1]
        if "not a list" in rows:
            return {"rows": rows}
        raise KeyError("weights")


@pytest.mark.parametrize("item, error, message", [
    ("anything", ModelError, "weights"),
    ("wrong length", InferenceError, "model 'broken': @batch method step() returned 1 results for 2 rows"),
    ("not a list", InferenceError, "model 'broken': @batch method step() returned dict, not a list of 2 results"),
])
def test_a_step_that_fails_fails_every_row_with_the_models_error(item, error, message):
    model = Broken("broken")

    async def run():
        return await asyncio.gather(model.step(item), model.step("other"), return_exceptions=True)

    answers = asyncio.run(run())
    assert all(isinstance(a, error) and message in str(a) for a in answers), answers


def test_a_cancelled_caller_loses_its_row_before_the_step_runs():
    model = Doubler(step_s=0.05)

    async def run():
        running = asyncio.ensure_future(model.step(1))  # the step in progress
        await asyncio.sleep(0.01)
        leaving = asyncio.ensure_future(model.step(2))
        staying = asyncio.ensure_future(model.step(3))
        await asyncio.sleep(0.01)
        leaving.cancel()
        return await running, await staying

    assert asyncio.run(run()) == (2, 6)
    assert model.step.stats()["sizes"] == {1: 2}  # the second step held the one row left


class OnThread(kserve_sdk.Model):
    threads: set = set()

    @kserve_sdk.batch(max_batch_size=4, max_wait_ms=10)
    def step(self, rows):
        self.threads.add(threading.current_thread().name)
        return [r + 1 for r in rows]


def test_a_plain_def_method_runs_on_a_model_thread():
    model = OnThread("on-thread")

    async def run():
        return await asyncio.gather(*(model.step(i) for i in range(3)))

    assert asyncio.run(run()) == [1, 2, 3]
    assert model.threads and threading.main_thread().name not in model.threads


def test_each_model_object_batches_on_its_own():
    one, two = Doubler("one"), Doubler("two")

    async def run():
        return await asyncio.gather(one.step(1), two.step(2))

    assert asyncio.run(run()) == [2, 4]
    assert one.step.stats()["rows"] == 1 and two.step.stats()["rows"] == 1


@pytest.mark.parametrize("options, message", [
    ({"max_batch_size": 0}, "max_batch_size=...) must be a whole number of at least 1, got 0"),
    ({"max_batch_size": 2.5}, "must be a whole number of at least 1, got 2.5"),
    ({"max_wait_ms": -1}, "max_wait_ms=...) must be a number of milliseconds of at least 0, got -1"),
])
def test_bad_options_are_refused_when_decorating(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        kserve_sdk.batch(**options)


def test_only_callables_can_be_decorated():
    with pytest.raises(TypeError, match="@batch decorates a model method"):
        kserve_sdk.batch()(42)

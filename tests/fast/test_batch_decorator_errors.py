"""``kserve_sdk.batch`` refuses bad options and bad targets when the class is written, before any model runs;
the smallest good options still work."""
import asyncio
import re

import pytest

import kserve_sdk


@pytest.mark.parametrize("max_batch_size", [0, -3, True, 2.5, "8", None])
def test_a_max_batch_size_below_1_or_not_whole_is_refused_at_decoration(max_batch_size):
    message = f"batch(max_batch_size=...) must be a whole number of at least 1, got {max_batch_size!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        kserve_sdk.batch(max_batch_size=max_batch_size)


@pytest.mark.parametrize("max_wait_ms", [-1, -0.5, True, "5", None])
def test_a_negative_or_non_number_max_wait_ms_is_refused_at_decoration(max_wait_ms):
    message = f"batch(max_wait_ms=...) must be a number of milliseconds of at least 0, got {max_wait_ms!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        kserve_sdk.batch(max_wait_ms=max_wait_ms)


def test_the_error_comes_when_the_class_is_written():
    with pytest.raises(ValueError, match=re.escape("got 0")):
        class Model(kserve_sdk.Model):  # its class statement fails: no model is ever made
            @kserve_sdk.batch(max_batch_size=0)
            async def step(self, rows):
                return rows


@pytest.mark.parametrize("target", [42, "step", staticmethod(lambda rows: rows), classmethod(lambda cls, rows: rows)],
                         ids=["int", "str", "staticmethod", "classmethod"])
def test_only_model_methods_can_be_decorated(target):
    with pytest.raises(TypeError, match=re.escape("@batch decorates a model method (def or async def), not ")):
        kserve_sdk.batch()(target)


class OneAtATime(kserve_sdk.Model):
    @kserve_sdk.batch(max_batch_size=1, max_wait_ms=0)
    async def step(self, rows):
        return [row + 1 for row in rows]


def test_the_smallest_options_run_one_row_per_step():
    model = OneAtATime("one-at-a-time")

    async def run():
        return await asyncio.gather(*(model.step(i) for i in range(3)))

    assert asyncio.run(run()) == [1, 2, 3]
    assert model.step.stats() == {"steps": 3, "rows": 3, "max_rows": 1, "sizes": {1: 3}}

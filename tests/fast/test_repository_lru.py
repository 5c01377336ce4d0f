"""The eviction planner (kserve_sdk.repository.LoadedSet): least recently used idle, unpinned models go first,
busy and pinned ones never, and a load that cannot fit is refused 503 with the reason; the hit path keeps
nothing per call. And how a model's size is measured."""
import tracemalloc

import pytest

from kserve_sdk.errors import grpc_code_of, status_of
from kserve_sdk.repository import LoadedSet, NoRoom, lru, model_size, rss_bytes

MB = 2**20


def loaded(*keys, size=MB) -> LoadedSet:
    models = LoadedSet()
    for key in keys:
        models.add(key, size)
    return models


def test_the_least_recently_used_idle_model_goes_first():
    models = loaded(("a", "1"), ("b", "1"), ("c", "1"))
    assert models.plan_room(3, 0) == [("a", "1")]
    models.touch(("a", "1"))
    assert list(models) == [("b", "1"), ("c", "1"), ("a", "1")]
    assert models.plan_room(3, 0) == [("b", "1")]
    assert models.plan_room(2, 0) == [("b", "1"), ("c", "1")]  # two must go for one more to fit in 2
    assert models.plan_room(4, 0) == [] and models.plan_room(0, 0) == []  # room already; 0: no limit


def test_busy_and_pinned_models_are_skipped():
    models = loaded("a", "b", "c", "d")
    models.add("a", MB, pinned=True)  # adding again updates: pinned now, and most recently used
    models.begin("b")  # a call in flight: busy (and used now)
    assert list(models) == ["c", "d", "a", "b"]
    assert models.plan_room(3, 0) == ["c", "d"]
    models.begin("c")
    assert models.plan_room(4, 0) == ["d"]
    models.end("c")
    assert not models.busy("c") and models.busy("b")
    assert models.plan_room(3, 0) == ["d", "c"]  # c's call made it more recently used than d


def test_nothing_can_go_refuses_with_503_and_the_reason():
    models = loaded("a", "b")
    models.add("a", MB, pinned=True)
    models.begin("b")
    with pytest.raises(NoRoom) as caught:
        models.plan_room(2, 0, incoming="model 'c'")
    assert str(caught.value) == "no room for model 'c': 2 loaded models busy or pinned (--max_loaded_models 2); " \
                                "retry later"
    assert status_of(caught.value) == (503, str(caught.value))
    assert grpc_code_of(caught.value) == "UNAVAILABLE" and caught.value.retry_after == 1
    models.end("b")
    assert models.plan_room(2, 0) == ["b"]  # once its call ended, it can go


def test_the_memory_budget_counts_sizes_and_the_incoming_estimate():
    models = LoadedSet()
    models.add("big", 300 * MB)
    models.add("small", 100 * MB)
    models.add("mid", 200 * MB)
    assert models.total_bytes == 600 * MB
    assert models.plan_room(0, 1000 * MB, 400 * MB) == []
    assert models.plan_room(0, 1000 * MB, 500 * MB) == ["big"]
    assert models.plan_room(0, 1000 * MB, 800 * MB) == ["big", "small"]
    assert models.plan_room(0, 1000 * MB, 900 * MB) == ["big", "small", "mid"]
    models.begin("big")
    assert models.plan_room(0, 1000 * MB, 500 * MB) == ["small"]
    with pytest.raises(NoRoom, match=r"^no room for the model: 1 loaded model busy or pinned "
                                     r"\(--max_model_memory_mb 1000\); retry later$"):
        models.plan_room(0, 1000 * MB, 800 * MB)
    with pytest.raises(NoRoom, match=r"^no room for model 'huge': it takes about 2000 MB, more than the whole "
                                     r"--max_model_memory_mb 1000$"):
        models.plan_room(0, 1000 * MB, 2000 * MB, incoming="model 'huge'")
    models.resize("mid", 50 * MB)
    models.remove("small")
    models.remove("small")  # unknown keys are ignored
    assert models.total_bytes == 350 * MB and len(models) == 2 and "small" not in models
    models.end("gone")  # an end after the model was removed is ignored


def test_both_limits_at_once():
    models = loaded("a", "b", size=400 * MB)
    assert models.plan_room(3, 1000 * MB, 100 * MB) == []
    assert models.plan_room(2, 1000 * MB, 100 * MB) == ["a"]  # the count binds
    assert models.plan_room(3, 1000 * MB, 300 * MB) == ["a"]  # the bytes bind


def test_a_load_in_progress_is_counted_and_never_evicted():
    models = loaded("a", "b")
    models.add("c", 0)  # the load starts: reserved, busy
    models.begin("c")
    assert models.plan_room(3, 0) == ["a"]
    models.resize("c", 5 * MB)
    models.end("c")
    assert models.total_bytes == 7 * MB


def test_the_hit_path_keeps_nothing_per_call():
    models = loaded(*[("m", str(v)) for v in range(100)])
    key = ("m", "42")
    for _ in range(100):  # warm any lazily made internals first
        models.begin(key)
        models.end(key)
    # only what the LRU's own code allocates counts: other threads of the test process (servers' helpers of
    # tests that ran before) allocate meanwhile
    only_lru = [tracemalloc.Filter(True, lru.__file__)]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces(only_lru)
        for _ in range(10_000):
            models.begin(key)
            models.touch(key)
            models.end(key)
        after = tracemalloc.take_snapshot().filter_traces(only_lru)
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert grown < 1024, grown  # nothing kept per call (10,000 calls of any allocation would be far more)


# --- a model's size -------------------------------------------------------------------------------------------
class Sized:
    def __init__(self, answer):
        self.answer = answer

    def memory_bytes(self):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_a_model_size_is_what_it_says_else_the_rss_growth_never_negative():
    assert model_size(Sized(123), 1000, 5000) == 123
    assert model_size(Sized(2.5e6), 0, 0) == 2_500_000
    assert model_size(object(), 1000, 5000) == 4000
    assert model_size(object(), 5000, 1000) == 0  # memory freed while loading: not a negative size
    assert model_size(Sized(-1), 1000, 3000) == 2000  # a nonsense answer: the growth instead
    assert model_size(Sized(None), 1000, 3000) == 2000
    assert model_size(Sized(RuntimeError("no")), 1000, 3000) == 2000


def test_rss_is_read_from_proc_and_grows_with_memory():
    before = rss_bytes()
    assert before > 1 * MB
    block = bytearray(64 * MB)  # touched: zero-filled pages are resident once written
    for offset in range(0, len(block), 4096):
        block[offset] = 1
    assert rss_bytes() - before > 32 * MB
    del block

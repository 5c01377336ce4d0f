"""Triton's batch_stats of @kserve_sdk.batch steps (kserve_sdk/triton/statistics.py), recorded and read in process."""
import secrets

from kserve_sdk.triton import statistics


def test_each_step_is_an_execution_under_its_batch_size():
    name = f"steps-{secrets.token_hex(4)}"  # a model no other test records
    for size, seconds in ((3, 0.01), (3, 0.02), (1, 0.005), (statistics.BATCH_SIZES + 500, 0.1)):
        statistics.record_batch_step(name, size, seconds)
    stats = statistics.model_statistics(name)
    assert stats["execution_count"] == 4 and stats["inference_count"] == 0
    assert [(e["batch_size"], e["compute_infer"]) for e in stats["batch_stats"]] == [
        (1, {"count": 1, "ns": 5_000_000}), (3, {"count": 2, "ns": 30_000_000}),
        (statistics.BATCH_SIZES, {"count": 1, "ns": 100_000_000})]  # a larger step counts under the last size
    assert all(e["compute_input"] == e["compute_output"] == {"count": 0, "ns": 0} for e in stats["batch_stats"])


def test_a_model_without_steps_has_no_batch_stats():
    assert statistics.model_statistics(f"none-{secrets.token_hex(4)}")["batch_stats"] == []

"""A model's scheduling policy in Triton's model configuration (GET /v2/models/<m>/config, gRPC ModelConfig):
``instance_group`` and ``dynamic_batching``'s priorities and ``default_queue_policy``, merged from the model's
own ``scheduling`` (a kserve_sdk.SchedulingPolicy or a dict) over the server's flags, beside the batching
fields the adaptive batcher shows. Real servers, read with tritonclient HTTP and gRPC.

A policy that limits nothing adds nothing to the configuration (docs/scheduling.md).
"""
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.grpc import model_config_pb2 as pb

from helpers import post_json

MODELS = '''
import asyncio

import kserve_sdk as kserve


class Sleepy(kserve.Model):
    """v1: the instances come back after ``delay`` seconds; FP32 [-1, 2] in and out."""

    def __init__(self, name, scheduling=None, max_batch_size=None, delay=0.0):
        super().__init__(name, max_batch_size=max_batch_size)
        if scheduling is not None:
            self.scheduling = scheduling
        self.max_latency_ms, self.delay, self.ready = 5, delay, True

    def get_input_types(self):
        return [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 2]}]

    def get_output_types(self):
        return [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 2]}]

    async def predict(self, payload, headers=None):
        await asyncio.sleep(self.delay)
        return {"predictions": payload["instances"]}


if __name__ == "__main__":
    kserve.ModelServer().start([
        Sleepy("plain"),
        Sleepy("batched", max_batch_size=4),
        Sleepy("limited", kserve.SchedulingPolicy(
            instance_count=2, max_queue_size=4, priority_levels=3, default_priority_level=2,
            default_timeout_microseconds=250000, timeout_action="DELAY", allow_timeout_override=False)),
        Sleepy("batched_limited", kserve.SchedulingPolicy(instance_count=1, priority_levels=2), max_batch_size=4),
        Sleepy("as_dict", {"instance_count": 1, "priority_levels": 2}, delay=1.0),
    ])
'''

TENSORS = {"input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1, 2]}],
           "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1, 2]}]}
BATCHED_TENSORS = {"input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [2]}],
                   "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [2]}]}


def config(name: str, max_batch_size: int = 0, **fields) -> dict:
    """The configuration REST answers for model ``name`` with these scheduling/batching ``fields``."""
    tensors = BATCHED_TENSORS if max_batch_size else TENSORS
    return {"name": name, "platform": "kserve_sdk", "backend": "kserve_sdk", "max_batch_size": max_batch_size,
            **tensors, **fields}


def group(name: str, count: int) -> list:
    return [{"name": name, "kind": "KIND_CPU", "count": count}]


def queue_policy(action: str = "REJECT", timeout_us: int = 0, override: bool = True, size: int = 0) -> dict:
    return {"timeout_action": action, "default_timeout_microseconds": timeout_us, "allow_timeout_override": override,
            "max_queue_size": size}


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("scheduling") / "models.py"
    path.write_text(MODELS)
    return str(path)


@pytest.fixture(scope="module")
def server(start_server, script):
    return start_server(script)


@pytest.fixture(scope="module")
def flagged(start_server, script):
    """The same models on a server whose flags set every model's default instance count and queue size."""
    return start_server(script, "--model_instance_count", "2", "--max_queue_size", "5")


# What the server without scheduling flags shows, per model, over REST.
EXPECTED = {
    "plain": config("plain"),  # no policy: no instance group, no dynamic batching
    "batched": config("batched", 4, dynamic_batching={"max_queue_delay_microseconds": 5000}),
    "limited": config("limited", instance_group=group("limited", 2), dynamic_batching={
        "priority_levels": 3, "default_priority_level": 2,
        "default_queue_policy": queue_policy("DELAY", 250000, False, 4)}),
    "batched_limited": config("batched_limited", 4, instance_group=group("batched_limited", 1), dynamic_batching={
        "max_queue_delay_microseconds": 5000, "priority_levels": 2, "default_priority_level": 0,
        "default_queue_policy": queue_policy()}),
    "as_dict": config("as_dict", instance_group=group("as_dict", 1), dynamic_batching={
        "priority_levels": 2, "default_priority_level": 0, "default_queue_policy": queue_policy()}),
}

# The same models under --model_instance_count 2 --max_queue_size 5: a field the model sets wins.
EXPECTED_FLAGGED = {
    "plain": config("plain", instance_group=group("plain", 2), dynamic_batching={
        "priority_levels": 0, "default_priority_level": 0, "default_queue_policy": queue_policy(size=5)}),
    "batched": config("batched", 4, instance_group=group("batched", 2), dynamic_batching={
        "max_queue_delay_microseconds": 5000, "priority_levels": 0, "default_priority_level": 0,
        "default_queue_policy": queue_policy(size=5)}),
    "limited": EXPECTED["limited"],  # sets both itself
    "as_dict": config("as_dict", instance_group=group("as_dict", 1), dynamic_batching={
        "priority_levels": 2, "default_priority_level": 0, "default_queue_policy": queue_policy(size=5)}),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_rest_config_shows_the_merged_policy_in_tritons_names(server, name):
    got = thttp.InferenceServerClient(f"127.0.0.1:{server.http_port}").get_model_config(name)
    assert got == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED_FLAGGED))
def test_rest_config_shows_the_flags_under_the_models_own_fields(flagged, name):
    got = thttp.InferenceServerClient(f"127.0.0.1:{flagged.http_port}").get_model_config(name)
    assert got == EXPECTED_FLAGGED[name]


def test_grpc_config_is_the_same_policy_in_the_message(server):
    client = tgrpc.InferenceServerClient(server.grpc_url)
    message = client.get_model_config("limited").config
    (instances,) = message.instance_group
    assert (instances.name, instances.kind, instances.count) == ("limited", pb.ModelInstanceGroup.KIND_CPU, 2)
    batching = message.dynamic_batching
    assert (batching.priority_levels, batching.default_priority_level) == (3, 2)
    policy = batching.default_queue_policy
    assert (policy.timeout_action, policy.default_timeout_microseconds, policy.allow_timeout_override,
            policy.max_queue_size) == (pb.ModelQueuePolicy.DELAY, 250000, False, 4)
    # proto3 JSON: 64-bit numbers as text, fields at their default left out
    as_json = client.get_model_config("batched_limited", as_json=True)["config"]
    assert as_json["instance_group"] == [{"name": "batched_limited", "kind": "KIND_CPU", "count": 1}]
    assert as_json["dynamic_batching"] == {"max_queue_delay_microseconds": "5000", "priority_levels": "2",
                                           "default_queue_policy": {"allow_timeout_override": True}}
    plain = client.get_model_config("plain", as_json=True)["config"]
    assert "instance_group" not in plain and "dynamic_batching" not in plain


def test_grpc_config_shows_the_flags(flagged):
    as_json = tgrpc.InferenceServerClient(flagged.grpc_url).get_model_config("plain", as_json=True)["config"]
    assert as_json["instance_group"] == [{"name": "plain", "kind": "KIND_CPU", "count": 2}]
    assert as_json["dynamic_batching"] == {"default_queue_policy": {"allow_timeout_override": True,
                                                                    "max_queue_size": 5}}


def test_a_policy_given_as_a_dict_limits_the_calls(server):
    """"as_dict" (1 s a call) declares instance_count 1 as a dict: two calls sent together run one after the
    other, and the one that waited shows its wait in the model's statistics."""
    def call(_):
        return post_json(server.http_port, "/v1/models/as_dict:predict", {"instances": [[1.0, 2.0]]})[0]

    began = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(call, range(2))) == [200, 200]
    assert time.monotonic() - began >= 1.95  # 2 × 1 s, not side by side
    stats = thttp.InferenceServerClient(f"127.0.0.1:{server.http_port}").get_inference_statistics("as_dict")
    queue = stats["model_stats"][0]["inference_stats"]["queue"]
    assert queue["count"] == 2 and queue["ns"] > 0, stats

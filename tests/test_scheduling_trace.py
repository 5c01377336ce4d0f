"""The wait in a model's queue in a call's trace: a ``queue`` span, child of the call's server span, from when the
call began to wait until its turn came (then its stages follow), and ``kserve.scheduler.wait_ms`` on both.

A real server exports to an OTLP/gRPC trace receiver run by this module; each call sends its own trace id.
"""
import secrets
from concurrent import futures
from typing import List

import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp

from helpers import Span, SpanCollector, triton_input

MODELS = '''
import asyncio

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferResponse


class SlowEcho(kserve.Model):
    """v2: INPUT0 comes back as OUTPUT0 after a second."""

    def __init__(self, name, scheduling=None):
        super().__init__(name)
        if scheduling is not None:
            self.scheduling = scheduling
        self.ready = True

    async def predict(self, payload, headers=None):
        await asyncio.sleep(1.0)
        array = payload.inputs[0].as_numpy()
        out = InferOutput("OUTPUT0", list(array.shape), payload.inputs[0].datatype)
        out.set_data_from_numpy(array, binary_data=False)
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[out])


if __name__ == "__main__":
    kserve.ModelServer().start([SlowEcho("one_at_a_time", kserve.SchedulingPolicy(instance_count=1)),
                                SlowEcho("unlimited")])
'''

SERVER_KIND = SpanCollector.SERVER_KIND
INTERNAL_KIND = 1


@pytest.fixture(scope="module")
def receiver():
    kept = SpanCollector().start()
    yield kept
    kept.stop()


@pytest.fixture(scope="module")
def server(start_server, receiver, tmp_path_factory):
    script = tmp_path_factory.mktemp("scheduling_trace") / "models.py"
    script.write_text(MODELS)
    return start_server(str(script), env=receiver.env("scheduling"))


def traced_infer(server, protocol: str, model: str) -> str:
    """One traced v2 inference through tritonclient; its trace id."""
    trace_id = secrets.token_hex(16)
    headers = {"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}
    module = tgrpc if protocol == "grpc" else thttp
    url = server.grpc_url if protocol == "grpc" else f"127.0.0.1:{server.http_port}"
    data = np.array([[1.0, 2.0]], dtype=np.float32)
    result = module.InferenceServerClient(url).infer(model, [triton_input(module, "INPUT0", data)], headers=headers)
    assert (result.as_numpy("OUTPUT0") == data).all()
    return trace_id


def named(spans: List[Span], name: str) -> List[Span]:
    return [s for s in spans if s.name == name]


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_a_call_that_waited_shows_its_wait_as_a_queue_span(server, receiver, protocol):
    # "one_at_a_time" runs one call at a time, for a second each: of two calls sent together, one waits.
    with futures.ThreadPoolExecutor(2) as pool:
        trace_ids = list(pool.map(lambda _: traced_infer(server, protocol, "one_at_a_time"), range(2)))
    traces = [receiver.trace(trace_id) for trace_id in trace_ids]
    waited = [spans for spans in traces if named(spans, "queue")]
    assert len(waited) == 1, [[s.name for s in spans] for spans in traces]
    (spans,), (ran_first,) = waited, [spans for spans in traces if spans is not waited[0]]

    (call,) = [s for s in spans if s.kind == SERVER_KIND]
    (queue,), (preprocess,) = named(spans, "queue"), named(spans, "preprocess")
    wait_ms = queue.attributes["kserve.scheduler.wait_ms"]
    assert (queue.parent, queue.kind, call.attributes["kserve.scheduler.wait_ms"]) == (
        call.span_id, INTERNAL_KIND, wait_ms)
    assert abs((queue.end_ns - queue.start_ns) / 1e6 - wait_ms) < 0.01  # the span lasts the wait
    assert call.start_ns <= queue.start_ns and queue.end_ns <= preprocess.start_ns + 1000  # then the stages
    # the wait covered the other call's run: its turn came once the other's predict was over
    (other_predict,) = named(ran_first, "predict")
    assert queue.start_ns < other_predict.end_ns <= queue.end_ns + 1000

    (first_call,) = [s for s in ran_first if s.kind == SERVER_KIND]
    assert "kserve.scheduler.wait_ms" not in first_call.attributes


def test_a_model_without_a_policy_shows_no_queue(server, receiver):
    with futures.ThreadPoolExecutor(2) as pool:
        trace_ids = list(pool.map(lambda _: traced_infer(server, "rest", "unlimited"), range(2)))
    for trace_id in trace_ids:
        spans = receiver.trace(trace_id)
        (call,) = [s for s in spans if s.kind == SERVER_KIND]
        assert sorted(s.name for s in spans if s.parent == call.span_id) == ["postprocess", "predict", "preprocess"]
        assert "kserve.scheduler.wait_ms" not in call.attributes

"""MLServer custom runtime for stream_bench.py: the counter of hack/bench/stream_model.py.

The request's INT32 tensor [start, count] is answered through ``predict_stream`` with `count`
responses, the i-th holding one INT32 output "y" = [start + i]. No sleeps.
"""

from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceResponse, ResponseOutput


class Counter(MLModel):
    async def load(self) -> bool:
        return True

    async def predict_stream(self, payloads):
        payload = await payloads.__anext__()
        start, count = (int(v) for v in NumpyCodec.decode_input(payload.inputs[0]).reshape(-1)[:2])
        for i in range(count):
            yield InferenceResponse(model_name=self.name, id=payload.id,
                                    outputs=[ResponseOutput(name="y", shape=[1], datatype="INT32",
                                                            data=[start + i])])

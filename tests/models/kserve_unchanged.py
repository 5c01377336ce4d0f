"""A custom model written for KServe 0.21, exactly as its users write them: every import is `kserve`.

tests/test_kserve_compat.py runs this file unedited with `python -m kserve_sdk`, and a copy of it whose
first line is `import kserve_sdk.as_kserve`, and talks to it over v1, v2 and gRPC.

- predict multiplies the rows by --multiplier (this script's own flag, its parser having the server's as a
  parent); a negative value is refused with kserve.errors.InvalidInput;
- a row starting with 13 schedules a callback that raises: the loop's exception handler registered with
  register_exception_handler logs "loop exception handler: <the exception>" and the request is answered;
- a v2 request whose parameters say "rebuild" is rebuilt through InferRequest.from_inference_request.
"""
import argparse
import asyncio
from types import SimpleNamespace

import kserve
from kserve import Model, ModelServer, logging, model_server
from kserve.errors import InvalidInput
from kserve.logging import logger
from kserve.protocol.infer_type import InferRequest
from kserve.utils.utils import generate_uuid, get_predict_input, get_predict_response


class Multiplier(Model):
    """Multiplies every value it is given by ``multiplier``."""

    def __init__(self, name: str, multiplier: int):
        super().__init__(name)
        self.multiplier = multiplier
        self.ready = False
        self.load()

    def load(self) -> bool:
        self.ready = True
        return self.ready

    async def predict(self, payload, headers=None, response_headers=None):
        if isinstance(payload, InferRequest) and (payload.parameters or {}).get("rebuild"):
            payload = InferRequest.from_inference_request(as_pydantic_like(payload), self.name)
        rows = get_predict_input(payload)
        if (rows < 0).any():
            raise InvalidInput("negative values are not allowed")
        if rows.size and rows.flat[0] == 13:
            asyncio.get_running_loop().call_soon(unlucky)
        response = get_predict_response(payload, rows * self.multiplier, self.name)
        if isinstance(response, dict):
            response["id"] = generate_uuid()
        return response


def as_pydantic_like(request: InferRequest) -> SimpleNamespace:
    """The request as KServe's InferenceRequest presents it: attributes, data as plain lists."""
    inputs = [SimpleNamespace(name=t.name, shape=list(t.shape), datatype=t.datatype,
                              data=t.as_numpy().flatten().tolist(), parameters=None) for t in request.inputs]
    return SimpleNamespace(id=request.id, parameters=None, inputs=inputs, outputs=None)


def unlucky() -> None:
    raise RuntimeError("thirteen is unlucky")


def loop_exception_handler(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    logger.info("loop exception handler: %r", context.get("exception"))


parser = argparse.ArgumentParser(parents=[model_server.parser])
parser.add_argument("--multiplier", default=2, type=int, help="What every value is multiplied by.")
args, _ = parser.parse_known_args()

if __name__ == "__main__":
    if args.configure_logging:
        logging.configure_logging(args.log_config_file)
    server = ModelServer()
    server.register_exception_handler(loop_exception_handler)
    logger.info("kserve is %s", kserve.__name__)
    server.start([Multiplier(args.model_name, args.multiplier)])

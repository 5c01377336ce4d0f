"""A server with a REST API of its own, added in one line (tests/test_api_plugin.py).

``POST /v2/echo_headers/<model>`` with ``{"instances": [...]}``: the model's predictions and the request
headers it received (``x-*`` ones), through the data plane inside the request's call. Its calls are labelled
``protocol="echo_api"``, ``endpoint="echo_headers"``; its errors are ``{"problem": {"status", "detail"}}``.
"""
import argparse
import json

import kserve_sdk as kserve
from kserve_sdk import model_server
from kserve_sdk.errors import InvalidInput
from kserve_sdk.handlers.api import MODEL, RestAPI
from kserve_sdk.handlers.base import BaseHandler, cancel_on_disconnect


def problem_document(status: int, message: str) -> bytes:
    """This API's error shape."""
    return json.dumps({"problem": {"status": status, "detail": message}}).encode()


class EchoHeadersHandler(BaseHandler):
    """``POST /v2/echo_headers/<model>``."""

    protocol, endpoint = "echo_api", "echo_headers"
    error_document = staticmethod(problem_document)  # its handler's errors, as the API's 413

    @cancel_on_disconnect
    async def post(self, name: str) -> None:
        model = await self.dataplane.ready_model(name)
        doc = json.loads(self.request.body or b"null")
        if not isinstance(doc, dict) or not isinstance(doc.get("instances"), list):
            raise InvalidInput('the body must be a JSON object {"instances": [...]}')
        response, _ = await self.dataplane.infer(name, doc, self.call.headers, model, self.call)
        self.send_json({"model": name, **response})


class HeaderEcho(kserve.Model):
    """Predictions: the instances; ``headers``: the ``x-*`` headers the model received."""

    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload, headers=None):
        seen = {k: v for k, v in (headers or {}).items() if k.startswith("x-")}
        return {"predictions": payload["instances"], "headers": seen}


ECHO_API = RestAPI("echo_api", [(rf"/v2/echo_headers/{MODEL}", EchoHeadersHandler)], problem_document)

if __name__ == "__main__":
    args, _ = argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
    model_server.REST_APIS.append(ECHO_API)
    kserve.ModelServer().start([HeaderEcho("echo")])

"""The proxy server of tests/test_openai_proxy.py: OpenAIProxyModels in front of openai_upstream.py.

    python tests/models/openai_proxy.py --upstream http://127.0.0.1:P --dead http://127.0.0.1:Q --http_port 8080

  echo         validates the upstream's answers and re-frames its streams (health: the upstream's model route)
  echo-fast    skip_upstream_validation: streams passed through as the upstream sent them
  hooked       the six hooks: the prompt upper-cased on the way out, "!" added to answers on the way back;
               a completion goes with the headers its hook put under raw_request["upstream_headers"]
  ghost        a name the upstream does not serve (its 404 comes back)
  down         an upstream nobody listens on, no health endpoint (the request itself fails: 503)
  down-health  the same with the default /health endpoint (the model is not ready: 503)
  impatient    a 0.5 s timeout (a slow upstream: 504)
  nully        validates the upstream's answers, whose optional fields are null (health: none)
  junk         the upstream's /v2 routes, which know no /v1/completions (an answer that is not OpenAI's: 502)
"""
import argparse

import kserve_sdk as kserve
from kserve_sdk.protocol.rest.openai import OpenAIProxyModel


class HookedProxy(OpenAIProxyModel):
    """Every hook changes what passes through it, so a test sees that each one ran."""

    def preprocess_completion_request(self, request, raw_request=None):
        request.prompt = str(request.prompt).upper()
        raw_request.scope["upstream_headers"] = {"x-request-id": "set-by-the-hook"}  # KServe's convention

    def postprocess_completion(self, completion, request, raw_request=None):
        completion.choices[0].text += "!"

    def postprocess_completion_chunk(self, completion, request, raw_request=None):
        if completion.choices and completion.choices[0].text:
            completion.choices[0].text += "!"

    async def preprocess_chat_completion_request(self, request, raw_request=None):  # a hook may be async
        request.messages[-1]["content"] = str(request.messages[-1]["content"]).upper()

    def postprocess_chat_completion(self, chat_completion, request, raw_request=None):
        chat_completion.choices[0].message.content += "!"

    def postprocess_chat_completion_chunk(self, chat_completion_chunk, request, raw_request=None):
        delta = chat_completion_chunk.choices[0].delta if chat_completion_chunk.choices else None
        if delta is not None and delta.content:
            delta.content += "!"


def main() -> None:
    parser = argparse.ArgumentParser(parents=[kserve.model_server.parser])
    parser.add_argument("--upstream", required=True, help="the upstream server's address")
    parser.add_argument("--dead", required=True, help="an address nothing listens on")
    args, _ = parser.parse_known_args()
    up, dead = args.upstream + "/openai", args.dead  # the upstream's OpenAI routes are under /openai
    kserve.ModelServer().start([
        OpenAIProxyModel("echo", up, health_endpoint="/v1/models/echo"),
        OpenAIProxyModel("echo-fast", up, skip_upstream_validation=True, health_endpoint="/v1/models/echo-fast"),
        HookedProxy("hooked", up, health_endpoint=None),
        OpenAIProxyModel("ghost", up, health_endpoint=None),
        OpenAIProxyModel("down", dead, health_endpoint=None),
        OpenAIProxyModel("down-health", dead),
        OpenAIProxyModel("impatient", up, health_endpoint=None, timeout=0.5),
        OpenAIProxyModel("nully", up, health_endpoint=None),
        OpenAIProxyModel("junk", args.upstream + "/v2", health_endpoint=None),
    ])


if __name__ == "__main__":
    main()

"""The OpenAI streaming model of openai_bench.py on LitServe (its OpenAISpec: /v1/chat/completions only).

    /tmp/bench-venvs/litserve/bin/python hack/bench/litserve_openai.py --port 8080

predict streams token_source.tokens(prompt) for the last message, the same generator as
openai_model.py; LitServe frames each token as a chat.completion.chunk.
"""
import argparse

import litserve as ls
from litserve.specs.openai import OpenAISpec
from token_source import tokens


class TokensAPI(ls.LitAPI):
    def setup(self, device):
        pass

    def decode_request(self, request):
        return request.messages[-1].content

    def predict(self, prompt):
        yield from tokens(prompt)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    server = ls.LitServer(TokensAPI(spec=OpenAISpec()), accelerator="cpu", workers_per_device=1)
    server.run(host="127.0.0.1", port=args.port, generate_client_file=False)

"""Streaming load client of openai_bench.py: stream_client.py's SSE driver on OpenAI's routes.

    python hack/bench/openai_client.py --proto sse --server ours --port P --route chat \
        --prefix /openai --model tok --count 200 --conc 8 --duration 8

A stream sends the prompt "START COUNT" and is correct when exactly COUNT chunks with text arrive,
holding START, START + 1, ... in order (token_source.py); chunks without text (a role-only first
chunk, the last chunk's finish_reason) and ``[DONE]`` are not counted, and an error event fails the
stream. The number is found by a regular expression rather than a JSON parse, so the client's cost
per chunk stays well below the servers'.
  chat         POST {prefix}/v1/chat/completions, the number in choices[0].delta.content
  completions  POST {prefix}/v1/completions, the number in choices[0].text
  generate     POST /v2/models/<m>/generate_stream, the number in text_output
Prints stream_client.py's `STREAM_RESULT {json}` line.
"""
import asyncio
import json
import re

import orjson
import stream_client
from stream_client import Problem, SSEConnection

#: the token's number in a chunk: choices[0].text (completions), choices[0].delta.content (chat) or text_output
NUMBER = re.compile(rb'"(?:text|content|text_output)":\s*" (\d+)"')


def connection_for(route: str, prefix: str):
    """The SSEConnection class of ``route``."""

    class OpenAIStream(SSEConnection):
        def request(self, sid, start, count):
            prompt = f"{start} {count}"
            if route == "generate":
                return f"/v2/models/{self.model}/generate_stream", orjson.dumps({"text_input": prompt})
            doc = {"model": self.model, "stream": True, "max_tokens": count}
            if route == "chat":
                doc["messages"] = [{"role": "user", "content": prompt}]
                return f"{prefix}/v1/chat/completions", orjson.dumps(doc)
            doc["prompt"] = prompt
            return f"{prefix}/v1/completions", orjson.dumps(doc)

        def parse_event(self, data):
            # a regular expression, not a JSON parse: the client must cost less per chunk than the
            # servers it measures (the numbers are the only text fields whose value starts with a space)
            found = NUMBER.search(data)
            if found is None:
                if b'"error"' in data:
                    raise Problem(f"error event: {data[:300]!r}")
                return None
            return int(found.group(1))

    return OpenAIStream


def main():
    ap = stream_client.parser()
    ap.add_argument("--route", choices=["chat", "completions", "generate"], required=True)
    ap.add_argument("--prefix", default="/openai", help="where the OpenAI routes are ('' for LitServe)")
    args = ap.parse_args()
    stats = asyncio.run(stream_client.run(args, connection_for(args.route, args.prefix)))
    print("STREAM_RESULT " + json.dumps(stats), flush=True)


if __name__ == "__main__":
    main()

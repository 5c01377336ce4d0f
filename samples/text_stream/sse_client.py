"""Stream a completion over REST: POST input.json to generate_stream and print each word as it arrives.

    python sse_client.py --url http://localhost:8080 input.json

Each Server-Sent Event is one JSON object whose "text_output" is the next word.
"""
import argparse
import json
import sys

import httpx
from httpx_sse import connect_sse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("request", nargs="?", default="input.json", help='{"text_input": ..., "parameters": ...}')
    parser.add_argument("--url", default="http://localhost:8080", help="the server's HTTP address")
    parser.add_argument("--model", default="bigram", help="the model name")
    parser.add_argument("--host", default=None, help="a Host header (a KServe service's host name)")
    args = parser.parse_args()

    with open(args.request) as f:
        request = json.load(f)
    headers = {"Host": args.host} if args.host else {}
    print(request["text_input"], end="", flush=True)
    with httpx.Client(timeout=60, headers=headers) as client:
        url = f"{args.url}/v2/models/{args.model}/generate_stream"
        with connect_sse(client, "POST", url, json=request) as events:
            events.response.raise_for_status()
            for event in events.iter_sse():
                data = json.loads(event.data)
                if "error" in data:
                    sys.exit(f"\nerror: {data['error']}")
                print(data["text_output"], end="", flush=True)
    print()


if __name__ == "__main__":
    main()

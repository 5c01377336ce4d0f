"""Chat with the character model through the `openai` client: send input.json, print the answer as it streams.

    python chat_client.py --url http://localhost:8080 input.json

input.json holds the `messages` (and any other chat parameter, such as `max_tokens`). The model goes on with
the text of the last user message, so that text is printed first, then each character of the answer as its
chunk arrives.
"""
import argparse
import json

from openai import OpenAI


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("request", nargs="?", default="input.json", help='{"messages": [...], ...}')
    parser.add_argument("--url", default="http://localhost:8080", help="the server's HTTP address")
    parser.add_argument("--model", default="charlm", help="the model name")
    parser.add_argument("--host", default=None, help="a Host header (a KServe service's host name)")
    args = parser.parse_args()

    with open(args.request) as f:
        request = json.load(f)
    headers = {"Host": args.host} if args.host else None
    # the server needs no key; the client insists on one
    client = OpenAI(base_url=f"{args.url}/openai/v1", api_key="none", default_headers=headers)
    print(request["messages"][-1]["content"], end="", flush=True)
    stream = client.chat.completions.create(model=args.model, stream=True, **request)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
    print()


if __name__ == "__main__":
    main()

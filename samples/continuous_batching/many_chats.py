"""Many chats at once: stream the answer to every message of input-many.json at the same time, with the
`openai` client's AsyncOpenAI, then print each message and its answer, in order.

    python many_chats.py --url http://localhost:8080 input-many.json

All the streams are live together, so the server computes their next characters in shared steps: see the
`kserve_batch_size` histogram on /metrics afterwards. Every answer is the one the message gets alone.
"""
import argparse
import asyncio
import json
from typing import List

from openai import AsyncOpenAI


async def answer(client: AsyncOpenAI, model: str, message: str, max_tokens: int) -> str:
    """The streamed answer to one user message, put together."""
    stream = await client.chat.completions.create(model=model, stream=True, max_tokens=max_tokens,
                                                  messages=[{"role": "user", "content": message}])
    return "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])


async def chat_all(url: str, model: str, messages: List[str], max_tokens: int, host: str = None) -> List[str]:
    headers = {"Host": host} if host else None
    client = AsyncOpenAI(base_url=f"{url}/openai/v1", api_key="none", default_headers=headers)
    async with client:
        return await asyncio.gather(*(answer(client, model, m, max_tokens) for m in messages))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("request", nargs="?", default="input-many.json", help='{"messages": ["...", ...], ...}')
    parser.add_argument("--url", default="http://localhost:8080", help="the server's HTTP address")
    parser.add_argument("--model", default="charlm", help="the model name")
    parser.add_argument("--host", default=None, help="a Host header (a KServe service's host name)")
    args = parser.parse_args()

    with open(args.request) as f:
        request = json.load(f)
    messages = request["messages"]
    answers = asyncio.run(chat_all(args.url, args.model, messages, request.get("max_tokens", 100), args.host))
    for message, text in zip(messages, answers, strict=True):
        print(message + text)


if __name__ == "__main__":
    main()

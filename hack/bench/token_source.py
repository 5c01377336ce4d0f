"""The one token generator every target of openai_bench.py streams: no model, only the server's cost.

A prompt "START COUNT" is answered with COUNT tokens " START", " START+1", ...: the load client checks
that each stream brings exactly those, in order. Plain Python, so every peer's venv can import it.
"""
from typing import Iterator


def tokens(prompt: str) -> Iterator[str]:
    """The tokens that answer ``prompt`` ("START COUNT")."""
    start, count = (int(v) for v in prompt.split()[:2])
    for i in range(count):
        yield f" {start + i}"

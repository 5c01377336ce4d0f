"""A token-streaming text model: a word bigram model learnt from corpus.txt, streamed word by word.

It continues a prompt one word at a time: after each word it writes the word that most often
followed it in the corpus (one it has not used yet after that word, when there is one), and stops at
the end of a sentence or after ``max_tokens`` words. Small and deterministic, but it streams exactly
like a large language model would:

  REST  POST /v2/models/<name>/generate_stream  {"text_input": "...", "parameters": {"max_tokens": 12}}
        -> one Server-Sent Event per word: data: {"model_name": ..., "text_output": " word"}
  gRPC  ModelStreamInfer with a BYTES input "text_input" (and the request parameter max_tokens)
        -> one response per word, output "text_output" BYTES [1]
"""
import argparse
import asyncio
import os
import re
from collections import Counter, defaultdict
from itertools import pairwise

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse, model_server
from kserve_sdk.errors import InvalidInput

HERE = os.path.dirname(os.path.abspath(__file__))
WORD = re.compile(r"[\w']+|[.,:;!?]")


class BigramTextModel(kserve.Model):
    def __init__(self, name: str, corpus: str, delay_ms: float = 20):
        super().__init__(name)
        self.corpus = corpus
        self.delay = delay_ms / 1000
        self.successors = {}
        self.load()

    def load(self) -> bool:
        with open(self.corpus) as f:
            words = WORD.findall(f.read().lower())
        counts = defaultdict(Counter)
        for word, following in pairwise(words):
            counts[word][following] += 1
        # most frequent first; among equals, the one seen first in the corpus (Counter keeps that order)
        self.successors = {word: [w for w, _ in c.most_common()] for word, c in counts.items()}
        self.ready = True
        return self.ready

    def continuation(self, prompt: str, max_tokens: int):
        """The words that follow ``prompt``, one at a time."""
        words = WORD.findall(prompt.lower())
        if not words:
            raise InvalidInput("the prompt has no words")
        used = defaultdict(set)
        word = words[-1]
        for _ in range(max_tokens):
            options = self.successors.get(word)
            if not options:
                return
            fresh = [w for w in options if w not in used[word]]
            following = fresh[0] if fresh else options[0]
            used[word].add(following)
            yield following
            if following in ".!?":
                return
            word = following

    async def predict(self, payload, headers=None):
        if isinstance(payload, InferRequest):  # gRPC ModelStreamInfer, or a v2 tensor request
            prompt = payload.inputs[0].as_string()[0]
            params = payload.parameters or {}
        else:                                   # REST generate form
            prompt, params = payload["text_input"], payload.get("parameters") or {}
        for word in self.continuation(prompt, int(params.get("max_tokens", 20))):
            text = word if word in ".,:;!?" else " " + word
            if isinstance(payload, InferRequest):
                out = InferOutput("text_output", [1], "BYTES")
                out.set_data_from_numpy(np.array([text.encode()], dtype=np.object_))
                yield InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[out])
            else:
                yield {"text_output": text}
            await asyncio.sleep(self.delay)  # a real model spends this time computing the next token


def main() -> None:
    parser = argparse.ArgumentParser(parents=[model_server.parser])
    parser.add_argument("--delay_ms", type=float, default=20, help="pause between words")
    args, _ = parser.parse_known_args()
    model = BigramTextModel(args.model_name, os.path.join(HERE, "corpus.txt"), args.delay_ms)
    kserve.ModelServer().start([model])


if __name__ == "__main__":
    main()

"""A chat model and an encoder served over OpenAI's API, with no weights to download.

- ``markov``: a word-level Markov chain learnt from corpus.txt when the server starts. It continues a
  prompt one word at a time, the word that most often came next in the corpus after the last two
  (``temperature`` > 0: drawn at random in proportion to how often, repeatable with ``seed``), up to
  the end of a sentence or ``max_tokens`` words. Served with ``OpenAIChatAdapterModel``: the server
  turns a chat request into a completion of the prompt ``apply_chat_template`` makes, and streams the
  words as ``chat.completion.chunk`` events.
- ``hashing``: scikit-learn's ``HashingVectorizer`` as an ``OpenAIEncoderModel``: ``/v1/embeddings``
  (one L2-normalised vector of word counts per text) and ``/v1/rerank`` (documents by cosine
  similarity to the query of the words they share, English stop words left out).

    python model.py --http_port 8080        # then see README.md
"""
import argparse
import asyncio
import base64
import os
import random
import re
from collections import Counter, defaultdict
from itertools import pairwise
from typing import AsyncIterator, Dict, Iterator, List, Optional, Tuple

import numpy as np
from sklearn.feature_extraction.text import HashingVectorizer

import kserve_sdk as kserve
from kserve_sdk.errors import InvalidInput
from kserve_sdk.protocol.rest.openai import (
    ChatCompletionRequest,
    ChatPrompt,
    CompletionRequest,
    OpenAIChatAdapterModel,
    OpenAIEncoderModel,
)
from kserve_sdk.protocol.rest.openai.types import (
    Completion,
    CompletionChoice,
    CompletionChunk,
    CompletionChunkChoice,
    Embedding,
    EmbeddingResponseData,
    Rerank,
    RerankDocument,
    RerankResult,
    RerankUsage,
    UsageInfo,
)

HERE = os.path.dirname(os.path.abspath(__file__))
WORD = re.compile(r"[\w']+|[.,:;!?]")
SENTENCE_END = {".", "!", "?"}


class MarkovChain:
    """Which word follows which two words (and, to fall back on, which one word) in a text."""

    def __init__(self, text: str):
        words = WORD.findall(text.lower())
        self.after_two: Dict[Tuple[str, str], Counter] = defaultdict(Counter)
        self.after_one: Dict[str, Counter] = defaultdict(Counter)
        for a, b, c in zip(words, words[1:], words[2:], strict=False):  # the word triples
            self.after_two[(a, b)][c] += 1
        for a, b in pairwise(words):
            self.after_one[a][b] += 1
        starts = Counter(b for a, b in pairwise(["."] + words) if a in SENTENCE_END)
        self.first_word = starts.most_common(1)[0][0]

    def options(self, history: List[str]) -> Counter:
        """The words seen after the end of ``history``, with how often."""
        if len(history) >= 2 and tuple(history[-2:]) in self.after_two:
            return self.after_two[tuple(history[-2:])]
        return self.after_one.get(history[-1], Counter()) if history else Counter()

    def seed(self, prompt: str) -> List[str]:
        """The prompt's words up to the last one the chain knows (or a sentence start when it knows none)."""
        words = WORD.findall(prompt.lower())
        while words and words[-1] not in self.after_one:
            words.pop()
        return words or [self.first_word]

    def continuation(self, history: List[str], max_tokens: int, temperature: Optional[float],
                     seed: Optional[int]) -> Iterator[str]:
        """The next words, one at a time."""
        history, rng, seen = list(history), random.Random(seed), set()
        for _ in range(max_tokens):
            counts = self.options(history)
            if not counts:
                return
            word = self._choose(counts, history, seen, temperature, rng)
            seen.add((*history[-2:], word))
            history.append(word)
            yield word
            if word in SENTENCE_END:
                return

    @staticmethod
    def _choose(counts: Counter, history: List[str], seen: set, temperature: Optional[float],
                rng: random.Random) -> str:
        if temperature:
            words = list(counts)
            weights = [counts[w] ** (1.0 / temperature) for w in words]
            return rng.choices(words, weights)[0]
        # greedy: the most frequent (the first seen among equals), avoiding a step already taken, so
        # the words do not go round in a loop
        ranked = [w for w, _ in counts.most_common()]
        fresh = [w for w in ranked if (*history[-2:], w) not in seen]
        return (fresh or ranked)[0]


def detokenize(words: List[str], new_line: bool) -> str:
    """Words as text: a space before each word but not before punctuation; an answer on a new line
    starts with a capital and no space."""
    text = "".join(w if w in ".,:;!?" else " " + w for w in words)
    return text[1:2].upper() + text[2:] if new_line and text.startswith(" ") else text


class MarkovChatModel(OpenAIChatAdapterModel):
    """The Markov chain behind /v1/completions, and /v1/chat/completions through the chat adapter."""

    def __init__(self, name: str, corpus: str, delay_ms: float = 20):
        super().__init__(name)
        self.corpus, self.delay = corpus, delay_ms / 1000
        self.chain: Optional[MarkovChain] = None
        self.load()

    def load(self) -> bool:
        with open(self.corpus) as f:
            self.chain = MarkovChain(f.read())
        self.ready = True
        return self.ready

    def apply_chat_template(self, request: ChatCompletionRequest) -> ChatPrompt:
        # a Markov chain remembers no conversation: it answers the last user message, on a new line
        users = [m for m in request.messages if m.get("role") == "user"]
        if not users:
            raise InvalidInput("the conversation has no user message")
        return ChatPrompt(prompt=message_text(users[-1]) + "\n", response_role="assistant")

    async def create_completion(self, request: CompletionRequest, raw_request=None, context=None):
        if not isinstance(request.prompt, str):
            raise InvalidInput("prompt must be a string: this model reads text, not token ids")
        history = self.chain.seed(request.prompt)
        words = self.chain.continuation(history, request.max_tokens or 16, request.temperature, request.seed)
        # a prompt ending on a new line is answered as a new sentence (the chat template's)
        new_line = request.prompt.endswith("\n")
        if request.stream:
            return self._stream(request, words, new_line)
        out = list(words)
        return Completion(model=self.name, usage=usage(request.prompt, len(out)), choices=[CompletionChoice(
            index=0, text=detokenize(out, new_line), finish_reason=finish_reason(out))])

    async def _stream(self, request: CompletionRequest, words: Iterator[str],
                      new_line: bool) -> AsyncIterator[CompletionChunk]:
        """One chunk per word (the server frames each as an event); the last says why it stopped and
        carries the usage."""
        out: List[str] = []
        for word in words:
            text = detokenize([word], new_line and not out)
            out.append(word)
            yield CompletionChunk(id=request.request_id, model=self.name,
                                  choices=[CompletionChunkChoice(index=0, text=text)])
            await asyncio.sleep(self.delay)  # a real model spends this time computing the next token
        yield CompletionChunk(id=request.request_id, model=self.name, usage=usage(request.prompt, len(out)),
                              choices=[CompletionChunkChoice(index=0, text="", finish_reason=finish_reason(out))])


def usage(prompt: str, completion_tokens: int) -> UsageInfo:
    """Tokens are words and punctuation marks, as the chain counts them."""
    prompt_tokens = len(WORD.findall(prompt))
    return UsageInfo(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                     total_tokens=prompt_tokens + completion_tokens)


def finish_reason(words: List[str]) -> str:
    return "stop" if not words or words[-1] in SENTENCE_END else "length"


def message_text(message: dict) -> str:
    """A message's text: its content, or the text parts of a content list."""
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    return " ".join(part.get("text", "") for part in content if part.get("type") == "text")


#: Rerank hashes words into this many features, so that two different words of a request practically never
#: land on the same one (in 256, "mill" and "at" share one: "The train leaves at eight." ranked above "The
#: baker sells bread on Saturday." for "bread from the mill").
RERANK_FEATURES = 2 ** 20


class HashingEncoder(OpenAIEncoderModel):
    """Texts as hashed word-count vectors (``dimensions`` of them, 256 unless asked); rerank by the content
    words a document shares with the query."""

    def __init__(self, name: str, dimensions: int = 256):
        super().__init__(name)
        self.dimensions = dimensions
        self.ready = True

    def vectors(self, texts: List[str], dimensions: Optional[int] = None) -> np.ndarray:
        n = dimensions or self.dimensions
        if not 1 <= n <= 4096:
            raise InvalidInput(f"dimensions must be between 1 and 4096, not {n}")
        vectorizer = HashingVectorizer(n_features=n, alternate_sign=False, norm="l2")
        return vectorizer.transform(texts).toarray().astype(np.float32)

    async def create_embedding(self, request, raw_request=None, context=None) -> Embedding:
        texts = getattr(request, "input", None)
        texts = [texts] if isinstance(texts, str) else texts
        if not texts or not all(isinstance(t, str) for t in texts):
            raise InvalidInput("input must be a text or a list of texts")
        rows = self.vectors(texts, request.dimensions)
        data = [EmbeddingResponseData(index=i, embedding=encode(row, request.encoding_format))
                for i, row in enumerate(rows)]
        tokens = sum(len(WORD.findall(t)) for t in texts)
        return Embedding(model=self.name, data=data, usage=UsageInfo(prompt_tokens=tokens, total_tokens=tokens))

    async def create_rerank(self, request, raw_request=None, context=None) -> Rerank:
        # Words like "the" or "from" would make every document look a little relevant: they are left out.
        vectorizer = HashingVectorizer(n_features=RERANK_FEATURES, alternate_sign=False, norm="l2",
                                       stop_words="english")
        rows = vectorizer.transform([request.query, *request.documents])  # sparse: 2**20 columns
        scores = (rows[1:] @ rows[0].T).toarray().ravel()
        order = sorted(range(len(request.documents)), key=lambda i: -scores[i])[:request.top_n or None]
        tokens = sum(len(WORD.findall(t)) for t in [request.query, *request.documents])
        return Rerank(model=self.name, usage=RerankUsage(total_tokens=tokens), results=[
            RerankResult(index=i, document=RerankDocument(text=request.documents[i]),
                         relevance_score=round(float(scores[i]), 6)) for i in order])


def encode(row: np.ndarray, encoding_format: str):
    """A vector as OpenAI sends it: a list of floats, or (``base64``, what the openai client asks for)
    its little-endian float32 bytes in base64."""
    if encoding_format == "base64":
        return base64.b64encode(row.astype("<f4").tobytes()).decode()
    return [round(float(v), 6) for v in row]


def main() -> None:
    parser = argparse.ArgumentParser(parents=[kserve.model_server.parser])
    parser.add_argument("--delay_ms", type=float, default=20, help="pause between streamed words")
    args, _ = parser.parse_known_args()
    chat = MarkovChatModel("markov", os.path.join(HERE, "corpus.txt"), args.delay_ms)
    kserve.ModelServer().start([chat, HashingEncoder("hashing")])


if __name__ == "__main__":
    main()

"""An OpenAI-compatible model written against KServe's ``openai_model`` module, unchanged: run with
``python echo_llm.py``.

Completions answer the prompt's words in reverse order (cut to ``max_tokens``); chat completions answer the
last message's words the same way. A streamed completion sends one chunk per word, then ``[DONE]``.
"""
import argparse
import time
from typing import AsyncIterator, Optional

from kserve import ModelServer, logging, model_server
from kserve.protocol.rest.openai.openai_model import OpenAIGenerativeModel
from kserve.protocol.rest.openai.types import (
    ChatCompletion,
    ChatCompletionChoice,
    ChatCompletionRequest,
    ChatMessage,
    Completion,
    CompletionChoice,
    CompletionChunk,
    CompletionChunkChoice,
    CompletionRequest,
    UsageInfo,
)


def reversed_words(text: str, max_tokens: Optional[int]):
    words = text.split()
    answer = list(reversed(words))[:max_tokens] if max_tokens else list(reversed(words))
    usage = UsageInfo(prompt_tokens=len(words), completion_tokens=len(answer),
                      total_tokens=len(words) + len(answer))
    return answer, usage


class EchoLLM(OpenAIGenerativeModel):
    async def create_completion(self, request: CompletionRequest, raw_request=None, context=None):
        answer, usage = reversed_words(str(request.prompt), request.max_tokens)
        if request.stream:
            return self.stream(answer)
        return Completion(id="cmpl-echo", created=int(time.time()), model=self.name, usage=usage,
                          choices=[CompletionChoice(index=0, text=" ".join(answer), finish_reason="stop")])

    async def stream(self, words) -> AsyncIterator[str]:
        for i, word in enumerate(words):
            chunk = CompletionChunk(id="cmpl-echo", created=int(time.time()), model=self.name, choices=[
                CompletionChunkChoice(index=0, text=word if i == 0 else " " + word,
                                      finish_reason="stop" if i == len(words) - 1 else None)])
            yield f"data: {chunk.model_dump_json()}\n\n"
        yield "data: [DONE]\n\n"

    async def create_chat_completion(self, request: ChatCompletionRequest, raw_request=None, context=None):
        answer, usage = reversed_words(str(request.messages[-1]["content"]), request.max_tokens)
        message = ChatMessage(role="assistant", content=" ".join(answer))
        return ChatCompletion(id="chatcmpl-echo", created=int(time.time()), model=self.name, usage=usage,
                              choices=[ChatCompletionChoice(index=0, message=message, finish_reason="stop")])


parser = argparse.ArgumentParser(parents=[model_server.parser])
args, _ = parser.parse_known_args()

if __name__ == "__main__":
    if args.configure_logging:
        logging.configure_logging(args.log_config_file)
    ModelServer().start([EchoLLM(args.model_name)])

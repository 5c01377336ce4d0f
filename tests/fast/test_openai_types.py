"""The OpenAI types and model classes at KServe's import paths: every name KServe's ``types`` exports, vllm's
field defaults and ``object`` values, documents of the OpenAI API validating, and user code written for
KServe building and reading them. (That pydantic is loaded only when they are: tests/test_openai_lazy_import.py,
which needs a fresh interpreter.)"""
import asyncio
import json

import pytest
from pydantic import ValidationError

import kserve_sdk as kserve
from kserve_sdk.protocol.rest.openai import types

#: ``kserve.protocol.rest.openai.types.__all__`` in KServe 0.21
KSERVE_TYPE_NAMES = [
    "ChatCompletion", "ChatCompletionChoice", "ChatCompletionChunk", "CompletionChunk", "CompletionChunkChoice",
    "ChatMessage", "ChatCompletionLogProb", "ChatCompletionLogProbs", "ChoiceDelta", "ChunkChoice", "Completion",
    "CompletionChoice", "ChatCompletionRequest", "CompletionRequest", "ChatCompletionContentPartParam",
    "CustomChatCompletionMessageParam", "ChatCompletionMessageParam", "ChatCompletionToolMessageParam",
    "ChatCompletionContentPartTextParam", "ChatCompletionAssistantMessageParam", "ConversationMessage", "Error",
    "ErrorResponse", "CompletionLogProbs", "UsageInfo", "ChatCompletionLogProbsContent", "Embedding",
    "EmbeddingCompletionRequest", "EmbeddingRequest", "EmbeddingResponseData", "Model", "ModelList",
    "RerankRequest", "Rerank",
]
#: ``kserve.protocol.rest.openai.__all__``, and OpenAIError of its ``errors``
KSERVE_NAMES = ["OpenAIEncoderModel", "OpenAIGenerativeModel", "OpenAIModel", "OpenAIChatAdapterModel",
                "ChatPrompt", "CompletionRequest", "ChatCompletionRequest", "ChatCompletionMessageParam", "OpenAIError"]


def test_every_name_of_kserve_is_exported():
    assert set(KSERVE_TYPE_NAMES) <= set(types.__all__)
    for name in KSERVE_TYPE_NAMES:
        assert getattr(types, name) is not None
    package = kserve.protocol.rest.openai  # reached from the top package, as in KServe
    for name in KSERVE_NAMES:
        assert getattr(package, name) is not None, name
    assert "OpenAIProxyModel" in package.__all__
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = package.Nope


def test_response_defaults_and_object_values():
    completion = types.Completion(model="m", choices=[types.CompletionChoice(index=0, text="hi")],
                                  usage=types.UsageInfo())
    assert completion.object == "text_completion" and completion.id.startswith("cmpl-") and completion.created > 0
    assert completion.choices[0].finish_reason is None and completion.choices[0].logprobs is None
    assert types.CompletionChunk(model="m", choices=[]).object == "text_completion"
    chat = types.ChatCompletion(model="m", usage=types.UsageInfo(), choices=[
        types.ChatCompletionChoice(index=0, message=types.ChatMessage(role="assistant", content="x"))])
    assert chat.object == "chat.completion" and chat.id.startswith("chatcmpl-")
    assert chat.choices[0].finish_reason == "stop" and chat.choices[0].message.tool_calls == []
    chunk = types.ChatCompletionChunk(model="m", choices=[types.ChunkChoice(index=0, delta=types.ChoiceDelta())])
    assert chunk.object == "chat.completion.chunk" and chunk.usage is None
    assert (types.UsageInfo().prompt_tokens, types.UsageInfo().completion_tokens) == (0, 0)
    assert types.EmbeddingResponseData(index=0, embedding=[1.0]).object == "embedding"
    assert types.Embedding(model="m", data=[], usage=types.UsageInfo()).object == "list"
    assert types.ModelList().object == "list" and types.Model(id="m").object == "model"
    assert types.ChatCompletionLogProb(token="a").logprob == -9999.0
    with pytest.raises(ValidationError):
        types.Error(message="no code or param", type="x")  # both are required, as in KServe


def test_request_defaults_and_unknown_fields():
    completion = types.CompletionRequest.model_validate({"prompt": "p", "model": "m", "frobnicate": 1})
    assert (completion.max_tokens, completion.n, completion.stream, completion.stop, completion.echo) == (
        16, 1, False, [], False)
    assert completion.frobnicate == 1 and len(completion.request_id) == 32
    chat = types.ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}])
    assert (chat.max_tokens, chat.n, chat.logprobs, chat.top_logprobs, chat.tool_choice) == (None, 1, False, 0, "none")
    assert chat.messages[0]["content"] == "hi" and chat.add_generation_prompt is True
    embedding = types.EmbeddingCompletionRequest(input="x")
    assert embedding.encoding_format == "float" and embedding.dimensions is None
    rerank = types.RerankRequest(query="q", documents=["a"])
    assert rerank.top_n == 0
    assert types.ChatCompletionRequest.model_validate(
        {"messages": [], "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {}}}}
    ).response_format.json_schema.json_schema == {}


def test_an_openai_stream_line_validates():
    line = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
            "choices": [{"text": "AI", "index": 0, "logprobs": None, "finish_reason": None}]}
    chunk = types.CompletionChunk.model_validate_json(json.dumps(line))
    assert chunk.choices[0].text == "AI" and chunk.usage is None


def test_null_in_a_field_with_a_default_reads_as_the_default():
    """As OpenAI's API and LitServe send chunks: null in list fields vllm's types refuse null in."""
    line = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "system_fingerprint": None,
            "usage": None, "choices": [{"index": 0, "finish_reason": None, "logprobs": None, "delta": {
                "role": "assistant", "content": "hi", "tool_calls": None, "function_call": None, "refusal": None}}]}
    chunk = types.ChatCompletionChunk.model_validate_json(json.dumps(line))
    delta = chunk.choices[0].delta
    assert (delta.content, delta.tool_calls, delta.refusal, delta.function_call) == ("hi", [], None, None)
    assert chunk.usage is None and chunk.choices[0].logprobs is None
    message = {"role": "assistant", "content": None, "tool_calls": None, "refusal": None}
    assert types.ChatMessage.model_validate(message).tool_calls == []
    assert message["tool_calls"] is None  # the caller's document is left as it was
    logprobs = types.CompletionLogProbs.model_validate(
        {"text_offset": None, "token_logprobs": None, "tokens": None, "top_logprobs": None})
    assert (logprobs.text_offset, logprobs.token_logprobs, logprobs.tokens, logprobs.top_logprobs) == ([], [], [], [])
    content = types.ChatCompletionLogProbsContent.model_validate(
        {"token": "a", "logprob": -0.5, "bytes": None, "top_logprobs": None})
    assert (content.logprob, content.bytes, content.top_logprobs) == (-0.5, None, [])
    stop = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "delta": None}]}
    assert types.ChatCompletionChunk.model_validate(stop).choices[0].delta == types.ChoiceDelta()


def test_optional_fields_keep_null_and_required_fields_still_refuse_it():
    choice = types.ChatCompletionChoice.model_validate(
        {"index": 0, "message": {"role": "assistant"}, "finish_reason": None})
    assert choice.finish_reason is None  # Optional with a default of "stop": null is None, as in vllm
    request = types.CompletionRequest.model_validate({"prompt": "p", "n": None, "echo": None, "max_tokens": None})
    assert (request.n, request.echo, request.max_tokens) == (1, None, None)  # the API's "integer or null"
    with pytest.raises(ValidationError, match="index"):
        types.ChunkChoice.model_validate({"index": None, "delta": {}})
    with pytest.raises(ValidationError, match="text"):
        types.CompletionChoice.model_validate({"index": 0, "text": None})
    with pytest.raises(ValidationError, match="tool_calls.0"):
        types.ChoiceDelta.model_validate({"tool_calls": [None]})  # inside a list, null is no default


def test_user_code_builds_the_objects_as_before_and_with_none():
    assert types.ChoiceDelta(content="x", tool_calls=None).tool_calls == []
    assert types.ChatMessage(role="assistant", content="x").tool_calls == []
    built = types.ChoiceDelta(tool_calls=[types.DeltaToolCall(index=0, function=types.DeltaFunctionCall(name="f"))])
    assert built.tool_calls[0].function.name == "f"
    assert types.CompletionRequest(prompt="p", n=None).n == 1
    logprobs = types.CompletionLogProbs(tokens=["a"], token_logprobs=[None])
    assert (logprobs.tokens, logprobs.token_logprobs, logprobs.text_offset) == (["a"], [None], [])
    assert types.ChatCompletionChunk.model_json_schema()["$defs"]["ChoiceDelta"]["properties"]["tool_calls"][
        "type"] == "array"  # the documented type is still a list


class KServeDummy(kserve.protocol.rest.openai.OpenAIChatAdapterModel):
    """As KServe's own tests write an adapter model: create_completion without context."""

    def apply_chat_template(self, request):
        return kserve.protocol.rest.openai.ChatPrompt(prompt="hello")

    async def create_completion(self, request, raw_request=None):
        chunk = types.CompletionChunk(id="c", model="m", choices=[types.CompletionChunkChoice(index=0, text="hi")])
        if request.stream:
            async def stream():
                for _ in range(3):
                    yield f"data: {chunk.model_dump_json()}\n\n"
                yield "data: [DONE]\n\n"

            return stream()
        return types.Completion(id="c", model="m", usage=types.UsageInfo(total_tokens=2), choices=[
            types.CompletionChoice(index=0, text="hi there", finish_reason="length")])


def test_the_chat_adapter_maps_requests_and_answers():
    model = KServeDummy("dummy")
    request = types.ChatCompletionRequest(messages=[{"role": "user", "content": "x"}], max_completion_tokens=5,
                                          logprobs=True, top_logprobs=2, temperature=0.5)
    params = model.chat_completion_params_to_completion_params(request, "the prompt")
    assert (params.prompt, params.max_tokens, params.logprobs, params.temperature) == ("the prompt", 5, 2, 0.5)
    assert params.request_id == request.request_id
    chat = asyncio.run(model.create_chat_completion(request))
    assert chat.object == "chat.completion" and chat.choices[0].message.content == "hi there"
    assert chat.choices[0].finish_reason == "length" and chat.usage.total_tokens == 2

    async def streamed():
        stream = await model.create_chat_completion(types.ChatCompletionRequest(messages=[], stream=True))
        return [line async for line in stream]

    lines = asyncio.run(streamed())
    assert lines[-1] == "data: [DONE]\n\n" and len(lines) == 4
    chunks = [json.loads(line[len("data: "):]) for line in lines[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert [c["choices"][0]["delta"] for c in chunks][0]["content"] == "hi"


def test_the_chat_adapter_maps_logprobs():
    logprobs = types.CompletionLogProbs(tokens=["a", "é"], token_logprobs=[-0.5, -1.0],
                                        top_logprobs=[{"a": -0.5, "b": -2.0}, None])
    content = KServeDummy.to_choice_logprobs(logprobs).content
    assert [(c.token, c.bytes, c.logprob) for c in content] == [("a", [97], -0.5), ("é", [195, 169], -1.0)]
    assert [(t.token, t.logprob) for t in content[0].top_logprobs] == [("a", -0.5), ("b", -2.0)]
    assert content[1].top_logprobs == []


def test_the_chat_adapter_refuses_n_other_than_1():
    with pytest.raises(kserve.errors.InvalidInput, match="n != 1 is not supported"):
        asyncio.run(KServeDummy("dummy").create_chat_completion(types.ChatCompletionRequest(messages=[], n=2)))


def test_openai_error_status():
    from kserve_sdk.protocol.rest.openai.errors import OpenAIError, create_error_response

    assert OpenAIError(create_error_response("m", status_code=404)).http_status == 404
    assert OpenAIError("plain").http_status == 500 and str(OpenAIError("plain")) == "plain"
    odd = types.ErrorResponse(error=types.Error(code="teapot", message="m", param=None, type="t"))
    assert OpenAIError(odd).http_status == 500 and str(OpenAIError(odd)) == "m"

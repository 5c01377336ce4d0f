"""protocol/rest/openai/codec.py and error_body.py: request bodies decoded per endpoint (every bad body a 400
naming its field), answers and stream events encoded, usage read back, errors in OpenAI's shape."""
import orjson
import pytest

from kserve_sdk.errors import InvalidInput
from kserve_sdk.protocol.rest.openai import types
from kserve_sdk.protocol.rest.openai.codec import (
    DONE_EVENT,
    InvalidField,
    decode_request,
    encode_answer,
    encode_event,
    usage_of,
)
from kserve_sdk.protocol.rest.openai.error_body import error_answer, error_body, error_type
from kserve_sdk.protocol.rest.openai.errors import OpenAIError, create_error_response


@pytest.mark.parametrize("endpoint,doc,kind", [
    ("completions", {"model": "m", "prompt": "hi"}, types.CompletionRequest),
    ("chat_completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, types.ChatCompletionRequest),
    ("embeddings", {"model": "m", "input": "hi"}, types.EmbeddingCompletionRequest),
    ("embeddings", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, types.EmbeddingChatRequest),
    ("rerank", {"model": "m", "query": "q", "documents": ["a", "b"]}, types.RerankRequest),
])
def test_each_endpoint_reads_its_request_type(endpoint, doc, kind):
    request = decode_request(endpoint, orjson.dumps(doc))
    assert type(request) is kind and request.model == "m"


@pytest.mark.parametrize("body,message", [
    (b"", "the request body is empty"),
    (b"{", "Unrecognized request format"),
    (b"[1]", "the request body must be a JSON object, got list"),
    (b'"text"', "the request body must be a JSON object, got str"),
])
def test_a_body_that_is_not_a_json_object_is_refused(body, message):
    with pytest.raises(InvalidInput, match=message):
        decode_request("completions", body)


@pytest.mark.parametrize("endpoint,doc,message,param", [
    ("chat_completions", {"model": "m"}, "invalid request: messages is required", "messages"),
    ("chat_completions", {"model": "m", "messages": [{"content": "x"}]}, "messages[0].role is required",
     "messages[0].role"),
    ("completions", {"model": "m", "prompt": "p", "max_tokens": "many"},
     "max_tokens: Input should be a valid integer", "max_tokens"),
    ("completions", {"model": "m", "prompt": "p", "stream": "perhaps"}, "stream: Input should be a valid boolean",
     "stream"),
    ("rerank", {"model": "m", "query": "q"}, "documents is required", "documents"),
])
def test_a_field_that_does_not_validate_is_named_and_is_the_param(endpoint, doc, message, param):
    with pytest.raises(InvalidField) as info:
        decode_request(endpoint, orjson.dumps(doc))
    assert message in str(info.value) and info.value.param == param and info.value.http_status == 400


def test_the_count_of_other_problems_is_told():
    with pytest.raises(InvalidField, match=r"; and 1 more problem$"):
        decode_request("completions", orjson.dumps({"prompt": "p", "max_tokens": "x", "n": "y"}))


def test_an_answer_object_drops_its_nulls_and_a_dict_is_written_as_is():
    completion = types.Completion(id="c", model="m", created=1, usage=types.UsageInfo(),
                                  choices=[types.CompletionChoice(index=0, text="hi")])
    doc = orjson.loads(encode_answer(completion))
    assert doc["choices"][0] == {"index": 0, "text": "hi"} and doc["object"] == "text_completion"
    assert orjson.loads(encode_answer({"id": "x", "usage": None})) == {"id": "x", "usage": None}
    with pytest.raises(TypeError, match="the answer is a list, not an OpenAI response object or a dict"):
        encode_answer([1])


@pytest.mark.parametrize("item,event", [
    ('data: {"a": 1}\n\n', b'data: {"a": 1}\n\n'),
    ("plain text", b"data: plain text\n\n"),
    (b"  padded bytes \n", b"data: padded bytes\n\n"),
    (b'data: {"b": 2}\n\n', b'data: {"b": 2}\n\n'),
    ("data: [DONE]\n\n", b""),
    (DONE_EVENT, b""),
    ({"k": [1]}, b'data: {"k":[1]}\n\n'),
    (types.ChoiceDelta(content="x"), b'data: {"content":"x","tool_calls":[]}\n\n'),
])
def test_stream_items_become_one_event_each(item, event):
    assert encode_event(item) == event


@pytest.mark.parametrize("item,usage", [
    ({"usage": {"total_tokens": 3}}, {"total_tokens": 3}),
    ({"choices": []}, None),
    ('data: {"usage": {"prompt_tokens": 1}}\n\n', {"prompt_tokens": 1}),
    (b'data: {"id": "c", "usage": {"prompt_tokens": 2}}\n\n', {"prompt_tokens": 2}),
    ('data: {"usage":null}', None),
    ('data: {"usage": null}', None),
    ('data: {"no": "usage here"}', None),
    ('data: "usage" {broken', None),
    (7, None),
])
def test_usage_is_read_from_answers_and_events(item, usage):
    assert usage_of(item) == usage


def test_usage_of_a_response_object():
    chunk = types.CompletionChunk(model="m", choices=[], usage=types.UsageInfo(prompt_tokens=4, total_tokens=4))
    assert usage_of(chunk)["prompt_tokens"] == 4
    assert usage_of(types.CompletionChunk(model="m", choices=[])) is None


@pytest.mark.parametrize("status,kind", [(400, "BadRequestError"), (404, "NotFoundError"),
                                         (500, "InternalServerError"), (503, "ServiceUnavailableError"),
                                         (413, "RequestEntityTooLargeError"), (599, "Error")])
def test_error_types_are_named_after_the_status(status, kind):
    assert error_type(status) == kind


def test_error_bodies_are_in_openais_shape():
    assert orjson.loads(error_body(404, "gone", "model")) == {"error": {"message": "gone", "type": "NotFoundError",
                                                                       "param": "model", "code": "404"}}
    status, body = error_answer(InvalidField("bad n", "n"), 400, "bad n")
    assert status == 400 and orjson.loads(body)["error"]["param"] == "n"


def test_an_openai_error_with_its_own_response_is_sent_as_it_is():
    raised = OpenAIError(create_error_response("slow down", "RateLimitError", status_code=429))
    status, body = error_answer(raised, 500, "ignored")
    assert status == 429 and orjson.loads(body)["error"] == {"message": "slow down", "type": "RateLimitError",
                                                             "param": "", "code": "429"}
    status, body = error_answer(OpenAIError("plain"), 500, "plain")
    assert status == 500 and orjson.loads(body)["error"]["message"] == "plain"

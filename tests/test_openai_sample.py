"""samples/openai_chat served from this checkout and queried with the real `openai` client: the Markov
chat model (completions and chat, streamed and not) and the HashingVectorizer encoder (embeddings in both
encodings, rerank), and the sample's two client scripts printing what the README says.

tests/test_samples.py runs the same sample as a user does (its README in a fresh environment)."""
import base64
import os
import subprocess
import sys

import numpy as np
import openai
import pytest

from helpers import ROOT

SAMPLE = os.path.join(ROOT, "samples", "openai_chat")
ANSWER = "Wakes before the sun and climbs the stairs to the lamp room."


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("samples/openai_chat/model.py", "--delay_ms", "0", grpc=False)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/openai/v1", api_key="none", max_retries=0, timeout=30)


def test_completion_continues_the_prompt(client):
    done = client.completions.create(model="markov", prompt="The lighthouse keeper", max_tokens=8)
    assert done.object == "text_completion"
    assert done.choices[0].text == " wakes before the sun and climbs the stairs"
    assert done.choices[0].finish_reason == "length"
    assert (done.usage.prompt_tokens, done.usage.completion_tokens, done.usage.total_tokens) == (3, 8, 11)


def test_completion_stream_one_word_per_chunk(client):
    chunks = list(client.completions.create(model="markov", prompt="The lighthouse keeper", stream=True))
    words = [c.choices[0].text for c in chunks[:-1]]
    assert words[:3] == [" wakes", " before", " the"] and "".join(words) == " " + ANSWER[0].lower() + ANSWER[1:]
    assert chunks[-1].choices[0].finish_reason == "stop" and chunks[-1].usage.completion_tokens == len(words)


def test_chat_answers_the_last_user_message(client):
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Tell me about the lighthouse keeper"}]
    done = client.chat.completions.create(model="markov", messages=messages)
    assert done.object == "chat.completion"
    assert done.choices[0].message.role == "assistant" and done.choices[0].message.content == ANSWER
    chunks = list(client.chat.completions.create(model="markov", messages=messages, stream=True))
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ANSWER


def test_temperature_and_seed_repeat_a_draw(client):
    ask = dict(model="markov", prompt="The river", max_tokens=12, temperature=1.5, seed=7)
    assert client.completions.create(**ask).choices[0].text == client.completions.create(**ask).choices[0].text


def test_a_chat_without_a_user_message_is_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="markov", messages=[{"role": "system", "content": "hi"}])
    assert e.value.response.json()["error"]["message"] == "the conversation has no user message"


def test_embeddings_float_and_base64(client):
    texts = ["the sea is calm", "the sea is calm", "bread from the mill"]
    floats = client.embeddings.create(model="hashing", input=texts, encoding_format="float")
    vectors = np.array([d.embedding for d in floats.data])
    assert floats.object == "list" and vectors.shape == (3, 256)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1) and vectors[0] @ vectors[1] == pytest.approx(1)
    assert vectors[0] @ vectors[2] < 0.5
    # the openai client asks for base64 unless told, and decodes it
    decoded = np.array([d.embedding for d in client.embeddings.create(model="hashing", input=texts).data])
    assert np.allclose(decoded, vectors, atol=1e-6)
    raw = client.embeddings.with_raw_response.create(model="hashing", input="x", encoding_format="base64", dimensions=8)
    assert len(base64.b64decode(raw.parse().data[0].embedding)) == 8 * 4


def test_rerank_by_raw_http(server):
    import httpx
    got = httpx.post(server.url + "/openai/v1/rerank", json={
        "model": "hashing", "query": "bread from the mill", "top_n": 2,
        "documents": ["The train leaves at eight.", "The baker sells bread from the mill.", "Bees and roses."]},
        timeout=30).json()
    assert [r["index"] for r in got["results"]] == [1, 0]
    assert got["results"][0]["document"]["text"] == "The baker sells bread from the mill."
    assert got["results"][0]["relevance_score"] > got["results"][1]["relevance_score"]


RERANK_DOCUMENTS = ["The train leaves at eight.", "The baker sells bread on Saturday.", "Bees visit the roses in June.",
                    "Fishing boats come home at dusk."]


def rerank(server, query: str, documents, **extra) -> dict:
    import httpx
    answer = httpx.post(server.url + "/openai/v1/rerank", timeout=30,
                        json={"model": "hashing", "query": query, "documents": documents, **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_rerank_of_the_readme_puts_the_bread_first(server):
    """The README's curl: only the baker's sentence shares a word with the query ("bread"); with 256 hashing
    features "mill" and "at" collided and the train came first."""
    got = rerank(server, "bread from the mill", RERANK_DOCUMENTS[:2])
    assert [(r["index"], r["relevance_score"]) for r in got["results"]] == [(1, 0.5), (0, 0.0)]


@pytest.mark.parametrize("query, best", [("bread from the mill", 1), ("the train to the city", 0),
                                         ("roses and bees", 2), ("when do the fishing boats come home", 3)])
def test_rerank_puts_the_only_matching_document_first(server, query, best):
    """Each query shares content words with one document only: that one first, every other scored 0 (words
    like "the", "at" and "from" count for nothing), the rest in their given order."""
    got = rerank(server, query, RERANK_DOCUMENTS)
    others = [i for i in range(len(RERANK_DOCUMENTS)) if i != best]
    assert [r["index"] for r in got["results"]] == [best, *others]
    assert got["results"][0]["relevance_score"] > 0.4
    assert [r["relevance_score"] for r in got["results"][1:]] == [0.0, 0.0, 0.0]
    assert got["results"][0]["document"]["text"] == RERANK_DOCUMENTS[best]


def test_the_client_scripts_print_what_the_readme_says(server):
    with open(os.path.join(SAMPLE, "output.txt")) as f:
        expected = f.read().strip()
    def printed(*argv: str) -> str:
        return subprocess.run([sys.executable, *argv], cwd=SAMPLE, capture_output=True, text=True, timeout=60,
                              check=True).stdout.strip()

    assert printed("chat_client.py", "--url", server.url, "input.json") == expected
    assert printed("search_client.py", "--url", server.url, "When do the fishing boats come home?") == \
        "Fishing boats leave the harbour at dawn and come home when the wind turns cold."


def test_the_docs_example_serves_as_written(start_server, tmp_path):
    """docs/openai.md's model example, saved as a file and served; its curl and openai client examples."""
    import re
    with open(os.path.join(ROOT, "docs", "openai.md")) as f:
        blocks = re.findall(r"^```(\w+)\n(.*?)^```", f.read(), re.M | re.S)
    model = next(code for lang, code in blocks if lang == "python" and "__main__" in code)
    (tmp_path / "parrot.py").write_text(model)
    served = start_server(str(tmp_path / "parrot.py"), grpc=False)
    local = lambda text: text.replace("localhost:8080", f"127.0.0.1:{served.http_port}")  # noqa: E731
    curls = [line for lang, code in blocks if lang == "sh" for line in code.replace("\\\n", " ").splitlines()
             if line.startswith("curl") and "parrot" in line]
    assert len(curls) == 2
    for command in curls:
        out = subprocess.run(local(command), shell=True, capture_output=True, text=True, timeout=30, check=True).stdout
        assert "hello" in out and "there" in out, (command, out)
    client = next(code for lang, code in blocks if lang == "python" and "OpenAI(base_url" in code and "parrot" in code)
    out = subprocess.run([sys.executable, "-c", local(client)], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout == "hello there\nhello there ", out

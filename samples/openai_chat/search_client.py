"""Find the corpus sentence closest to a question with the encoder: embeddings through the `openai` client.

    python search_client.py --url http://localhost:8080 "When do the fishing boats come home?"

Each sentence of corpus.txt and the question are embedded by the `hashing` model; the sentence whose
vector points most the same way as the question's (the largest dot product of the unit vectors) is printed.
"""
import argparse
import os
import re

import numpy as np
from openai import OpenAI

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question")
    parser.add_argument("--url", default="http://localhost:8080", help="the server's HTTP address")
    parser.add_argument("--model", default="hashing", help="the encoder's model name")
    args = parser.parse_args()

    with open(os.path.join(HERE, "corpus.txt")) as f:
        sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", f.read()) if s.strip()]
    client = OpenAI(base_url=f"{args.url}/openai/v1", api_key="none")
    answer = client.embeddings.create(model=args.model, input=[args.question, *sentences])
    vectors = np.array([item.embedding for item in answer.data])
    scores = vectors[1:] @ vectors[0]
    print(sentences[int(np.argmax(scores))])


if __name__ == "__main__":
    main()

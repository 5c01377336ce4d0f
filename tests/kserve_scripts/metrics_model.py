"""A model that records metrics of its own with ``kserve.metrics``' names, unchanged: run with
``python metrics_model.py``.

It counts the words of each text as prompt tokens (``LLMStats``) into a counter labelled by ``PROM_LABELS``,
and times its tokenizer, scorer, formatter and explainer under its own label (``get_labels`` of
"<model>-tokenizer" and so on) in KServe's four stage histograms.
"""
import argparse
from typing import Dict

from kserve import Model, ModelServer, logging, model_server
from kserve.metrics import (
    EXPLAIN_HIST_TIME,
    POST_HIST_TIME,
    PRE_HIST_TIME,
    PREDICT_HIST_TIME,
    PROM_LABELS,
    LLMStats,
    get_labels,
)
from prometheus_client import Counter

PROMPT_TOKENS = Counter("word_count_prompt_tokens", "Words the model was given", PROM_LABELS)


class WordCountModel(Model):
    def __init__(self, name: str):
        super().__init__(name)
        self.load()

    def load(self):
        self.ready = True

    def preprocess(self, payload: Dict, headers: Dict[str, str] = None) -> Dict:
        with PRE_HIST_TIME.labels(**get_labels(f"{self.name}-tokenizer")).time():
            return {"tokens": [str(text).split() for text in payload["instances"]]}

    def predict(self, payload: Dict, headers: Dict[str, str] = None) -> Dict:
        stats = LLMStats()
        with PREDICT_HIST_TIME.labels(**get_labels(f"{self.name}-scorer")).time():
            counts = [len(words) for words in payload["tokens"]]
        stats.num_prompt_tokens = sum(counts)
        PROMPT_TOKENS.labels(**get_labels(self.name)).inc(stats.num_prompt_tokens)
        return {"predictions": counts, "usage": stats.model_dump()}

    def postprocess(self, response: Dict, headers: Dict[str, str] = None) -> Dict:
        with POST_HIST_TIME.labels(**get_labels(f"{self.name}-formatter")).time():
            return response

    def explain(self, payload: Dict, headers: Dict[str, str] = None) -> Dict:
        with EXPLAIN_HIST_TIME.labels(**get_labels(f"{self.name}-explainer")).time():
            return {"explanations": [{word: 1 for word in words} for words in payload["tokens"]]}


parser = argparse.ArgumentParser(parents=[model_server.parser])
args, _ = parser.parse_known_args()

if __name__ == "__main__":
    if args.configure_logging:
        logging.configure_logging(args.log_config_file)
    ModelServer().start([WordCountModel(args.model_name)])

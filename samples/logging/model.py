"""A word-counting model whose logs follow a logging config file: --log_config_file log_config.json or .yaml.

v1:  POST /v1/models/words:predict  {"instances": ["one two three", "four"]} -> {"predictions": [3, 1]}

It logs through the "kserve" logger, as the server does, so one config formats both.
"""
import argparse
import logging

import kserve_sdk as kserve
from kserve_sdk import model_server
from kserve_sdk.errors import InvalidInput

logger = logging.getLogger("kserve")


class WordCounter(kserve.Model):
    def __init__(self, name: str):
        super().__init__(name)
        self.load()

    def load(self) -> bool:
        logger.info("model %s loaded", self.name)
        self.ready = True
        return self.ready

    def predict(self, payload, headers=None):
        texts = payload.get("instances")
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise InvalidInput('"instances" must be a list of strings')
        counts = [len(text.split()) for text in texts]
        logger.debug("counted the words of %d texts", len(texts))
        return {"predictions": counts}


def main() -> None:
    parser = argparse.ArgumentParser(parents=[model_server.parser])
    args, _ = parser.parse_known_args()
    kserve.ModelServer().start([WordCounter(args.model_name)])


if __name__ == "__main__":
    main()

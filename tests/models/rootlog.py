"""A user script that configures the root logger itself and starts the server with --configure_logging false."""
import argparse
import logging

logging.basicConfig(format="ROOTCFG %(name)s %(message)s", level=logging.INFO)

import kserve_sdk as kserve  # noqa: E402
from kserve_sdk import model_server  # noqa: E402


class Hello(kserve.Model):
    def __init__(self, name):
        super().__init__(name)
        logging.getLogger("kserve").info("model %s built", name)
        self.ready = True

    def predict(self, payload, headers=None):
        return {"predictions": ["hello"]}


if __name__ == "__main__":
    args, _ = argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
    kserve.ModelServer().start([Hello("hello")])

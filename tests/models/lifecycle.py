"""The models of zoo.py and streaming.py that tests/test_lifecycle.py calls, in one server."""
import argparse

import streaming
import zoo

import kserve_sdk as kserve
from kserve_sdk import model_server

if __name__ == "__main__":
    argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
    models = {"echo": zoo.Echo, "failing": zoo.Failing, "faulty": zoo.Faulty, "toggle": zoo.Toggle,
              "tokens": streaming.Tokens, "broken": streaming.Broken, "summer": streaming.Summer}
    kserve.ModelServer().start([cls(name) for name, cls in models.items()])

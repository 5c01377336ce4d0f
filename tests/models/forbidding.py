"""A predictor whose model refuses every call with a 403-typed error of the user's own (an exception that
says its HTTP status and gRPC code, as kserve_sdk's typed errors do), for the transformer tests."""
import argparse
from http import HTTPStatus

import kserve_sdk as kserve
from kserve_sdk import model_server


class Forbidden(Exception):
    http_status = HTTPStatus.FORBIDDEN
    grpc_code = "PERMISSION_DENIED"


class Refusing(kserve.Model):
    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        raise Forbidden(f"caller may not use model {self.name}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(parents=[model_server.parser])
    args, _ = parser.parse_known_args()
    kserve.ModelServer().start([Refusing(args.model_name)])

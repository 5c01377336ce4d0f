"""A transformer in the style of KServe's feast driver-transformer sample, unchanged: run with
``python driver_transformer.py --predictor_host HOST:PORT [--protocol v2 --predictor_protocol v2]``.

It looks up each driver id's features (a table here, where the sample asks a Feast server) and sends them to
its predictor: ``{"instances": rows}`` over v1, an ``InferRequest`` of FP32 "INPUT_0" over v2 and gRPC. Like
the sample, it keeps the protocol itself: ``self.protocol = protocol``.
"""
import argparse
from typing import Dict, List, Union

import kserve
import numpy as np
from kserve import InferInput, InferRequest, InferResponse, logging
from kserve.errors import InvalidInput
from kserve.logging import logger

DRIVER_FEATURES = {
    1001: [0.5, 0.25, 2.0],
    1002: [1.0, 4.0, 0.0],
    1003: [3.0, 1.0, 1.5],
}


class DriverTransformer(kserve.Model):
    def __init__(self, name: str, predictor_host: str, protocol: str):
        super().__init__(name)
        self.predictor_host = predictor_host
        self.protocol = protocol
        self.ready = True
        logger.info("Model name = %s", name)
        logger.info("Protocol = %s", self.protocol)
        logger.info("Predictor host = %s", predictor_host)

    def build_rows(self, inputs: Dict) -> List[List[float]]:
        rows = []
        for instance in inputs["instances"]:
            for driver_id in instance:
                if driver_id not in DRIVER_FEATURES:
                    raise InvalidInput(f"unknown driver id {driver_id}")
                rows.append(DRIVER_FEATURES[driver_id])
        return rows

    def preprocess(self, inputs: Dict, headers: Dict[str, str] = None) -> Union[Dict, InferRequest]:
        rows = self.build_rows(inputs)
        # The default protocol is v1
        request = {"instances": rows}
        if self.protocol in ("v2", "grpc-v2"):
            data = np.array(rows, dtype=np.float32)
            infer_inputs = [InferInput(name="INPUT_0", datatype="FP32", shape=list(data.shape),
                                       data=data.flatten().tolist())]
            request = InferRequest(model_name=self.name, infer_inputs=infer_inputs)
        logger.info("The input for model predict is %s", request)
        return request

    def postprocess(self, response: Union[Dict, InferResponse], headers: Dict[str, str] = None) -> Dict:
        if isinstance(response, InferResponse):
            return {"predictions": response.outputs[0].as_numpy().tolist()}
        return response


parser = argparse.ArgumentParser(parents=[kserve.model_server.parser])
args, _ = parser.parse_known_args()

if __name__ == "__main__":
    if args.configure_logging:
        logging.configure_logging(args.log_config_file)
    transformer = DriverTransformer(name=args.model_name, predictor_host=args.predictor_host, protocol=args.protocol)
    server = kserve.ModelServer()
    server.start(models=[transformer])

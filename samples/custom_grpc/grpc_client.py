"""Send a v2 request (a JSON file like input.json) to the model over gRPC with tritonclient.

    python grpc_client.py --url localhost:8081 input.json

Prints the outputs as JSON: classes as they are, probabilities rounded to two decimals.
Through a KServe ingress, pass the InferenceService's host name with --host.
"""
import argparse
import json

import numpy as np
import tritonclient.grpc as grpcclient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("request", nargs="?", default="input.json", help="a v2 request as JSON")
    parser.add_argument("--url", default="localhost:8081", help="host:port of the gRPC server")
    parser.add_argument("--model", default="iris", help="the model name")
    parser.add_argument("--host", default=None, help="the :authority to send (a KServe service's host name)")
    args = parser.parse_args()

    with open(args.request) as f:
        request = json.load(f)
    inputs = []
    for spec in request["inputs"]:
        tensor = grpcclient.InferInput(spec["name"], spec["shape"], spec["datatype"])
        dtype = np.float32 if spec["datatype"] == "FP32" else None
        tensor.set_data_from_numpy(np.array(spec["data"], dtype=dtype).reshape(spec["shape"]))
        inputs.append(tensor)

    channel_args = [("grpc.default_authority", args.host)] if args.host else None
    client = grpcclient.InferenceServerClient(url=args.url, channel_args=channel_args)
    try:
        result = client.infer(args.model, inputs, request_id=request.get("id", ""))
    finally:
        client.close()
    print(json.dumps({
        "id": result.get_response().id,
        "output-0": result.as_numpy("output-0").tolist(),
        "probabilities": [[round(float(p), 2) for p in row] for row in result.as_numpy("probabilities")],
    }))


if __name__ == "__main__":
    main()

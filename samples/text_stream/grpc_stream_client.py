"""Stream a completion over gRPC: send input.json on a ModelStreamInfer stream and print each word as it arrives.

    python grpc_stream_client.py --url localhost:8081 input.json

Uses tritonclient's gRPC streaming API: start_stream with a callback, async_stream_infer, stop_stream
(which waits until the server has sent every response).
"""
import argparse
import json
import sys

import numpy as np
import tritonclient.grpc as grpcclient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("request", nargs="?", default="input.json", help='{"text_input": ..., "parameters": ...}')
    parser.add_argument("--url", default="localhost:8081", help="host:port of the gRPC server")
    parser.add_argument("--model", default="bigram", help="the model name")
    parser.add_argument("--host", default=None, help="the :authority to send (a KServe service's host name)")
    args = parser.parse_args()

    with open(args.request) as f:
        request = json.load(f)
    errors = []

    def on_response(result, error):
        if error is not None:
            errors.append(error)
        else:
            print(result.as_numpy("text_output")[0].decode(), end="", flush=True)

    prompt = grpcclient.InferInput("text_input", [1], "BYTES")
    prompt.set_data_from_numpy(np.array([request["text_input"].encode()], dtype=np.object_))
    channel_args = [("grpc.default_authority", args.host)] if args.host else None
    client = grpcclient.InferenceServerClient(url=args.url, channel_args=channel_args)
    print(request["text_input"], end="", flush=True)
    try:
        client.start_stream(callback=on_response)
        client.async_stream_infer(args.model, [prompt], request_id="stream-1",
                                  parameters=request.get("parameters") or {})
        client.stop_stream()  # closes our side and waits for the last response
    finally:
        client.close()
    print()
    if errors:
        sys.exit(f"error: {errors[0]}")


if __name__ == "__main__":
    main()

"""KServe's REST and gRPC inference clients, used the way KServe's docs and source use them, against the
``doubler`` model of model.py; prints one JSON record of what came back and what was raised.

Run with KServe installed (``python clients_check.py``) or with ours (``python -m kserve_sdk clients_check.py``):
compare.py compares the two records. URLs are kept to their path (the ports differ from run to run).

    python clients_check.py --rest_url http://127.0.0.1:8080 --grpc_url 127.0.0.1:8081
"""
import argparse
import asyncio
import json
from typing import Any, Awaitable, Dict

import grpc
import httpx
import numpy as np
from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig

MODEL = "doubler"
#: the types KServe's clients raise, by the names a record gives them
KSERVE_TYPES = {"httpx.HTTPStatusError": httpx.HTTPStatusError, "httpx.HTTPError": httpx.HTTPError,
                "grpc.aio.AioRpcError": grpc.aio.AioRpcError, "grpc.RpcError": grpc.RpcError}


def raised(error: BaseException) -> Dict[str, Any]:
    """What a record keeps of an error: its type's name, the KServe types it is, and what the server said."""
    seen: Dict[str, Any] = {"type": type(error).__name__,
                            "is": [name for name, kind in KSERVE_TYPES.items() if isinstance(error, kind)]}
    if isinstance(error, httpx.HTTPStatusError):
        seen.update(status=error.response.status_code, error=error.response.json()["error"],
                    request=f"{error.request.method} {error.request.url.path}")
    elif isinstance(error, grpc.aio.AioRpcError):
        seen.update(code=error.code().name, details=error.details())
    return seen


async def outcome(call: Awaitable) -> Dict[str, Any]:
    try:
        return {"returned": await call}
    except Exception as e:  # the record says what it was
        return {"raised": raised(e)}


def v2_request(values: np.ndarray, request_id: str) -> InferRequest:
    tensor = InferInput(name="input-0", shape=list(values.shape), datatype="FP32")
    tensor.set_data_from_numpy(values)
    return InferRequest(model_name=MODEL, infer_inputs=[tensor], request_id=request_id)


def outputs(response) -> list:
    return [{"name": o.name, "datatype": o.datatype, "shape": list(o.shape), "data": o.as_numpy().tolist()}
            for o in response.outputs]


async def rest_v1(base_url: str) -> Dict[str, Any]:
    client = InferenceRESTClient(RESTConfig(protocol="v1", timeout=httpx.Timeout(5)))
    answer_headers: Dict[str, str] = {}
    answer = await client.infer(httpx.URL(base_url), {"instances": [[1, 2], [3, 4]]}, model_name=MODEL,
                                response_headers=answer_headers)
    record = {
        "infer": answer["predictions"],
        "response_headers": {"x-doubled": answer_headers.get("x-doubled")},
        "is_server_live": await outcome(client.is_server_live(base_url)),
        "is_model_ready": await outcome(client.is_model_ready(base_url, MODEL)),
        "is_model_ready_unknown": await outcome(client.is_model_ready(base_url, "nope")),
        "infer_unknown_model": await outcome(client.infer(base_url, {"instances": [[1]]}, model_name="nope")),
        "infer_bad_input": await outcome(client.infer(base_url, {"instances": [[1, -2]]}, model_name=MODEL)),
    }
    await client.close()
    return record


async def rest_v2(base_url: str) -> Dict[str, Any]:
    async with InferenceRESTClient(RESTConfig(protocol="v2", retries=2, timeout=30)) as client:
        answer_headers: Dict[str, str] = {}
        values = np.array([[1, 2], [3, 4]], dtype=np.float32)
        response = await client.infer(base_url, v2_request(values, "rest-v2"), model_name=MODEL,
                                      headers={"x-check": "rest-v2"}, response_headers=answer_headers)
        bad = v2_request(np.array([[1, -2]], dtype=np.float32), "bad")
        return {
            "infer": {"id": response.id, "model_name": response.model_name, "outputs": outputs(response)},
            "response_headers": {"x-doubled": answer_headers.get("x-doubled")},
            "is_server_ready": await outcome(client.is_server_ready(base_url)),
            "is_server_live": await outcome(client.is_server_live(base_url)),
            "is_model_ready": await outcome(client.is_model_ready(base_url, MODEL)),
            "is_model_ready_unknown": await outcome(client.is_model_ready(base_url, "nope")),
            "infer_unknown_model": await outcome(client.infer(base_url, v2_request(values, "x"), model_name="nope")),
            "infer_bad_input": await outcome(client.infer(base_url, bad, model_name=MODEL)),
        }


async def grpc_v2(url: str) -> Dict[str, Any]:
    client = InferenceGRPCClient(url, retries=2, timeout=30)
    values = np.array([[1.5, 2], [3, 4]], dtype=np.float32)
    response = await client.infer(v2_request(values, "grpc"), headers=(("x-check", "grpc"),))
    unknown = InferRequest(model_name="nope", infer_inputs=v2_request(values, "x").inputs)
    record = {
        "infer": {"id": response.id, "model_name": response.model_name, "outputs": outputs(response)},
        "infer_timeout_keyword": outputs(await client.infer(infer_request=v2_request(values, "t"), timeout=10)),
        "is_server_ready": await outcome(client.is_server_ready()),
        "is_server_live": await outcome(client.is_server_live()),
        "is_model_ready": await outcome(client.is_model_ready(MODEL)),
        "is_model_ready_unknown": await outcome(client.is_model_ready("nope")),
        "infer_unknown_model": await outcome(client.infer(unknown)),
        "infer_bad_input": await outcome(client.infer(v2_request(np.array([[-1]], dtype=np.float32), "bad"))),
    }
    await client.close()
    return record


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rest_url", required=True, help="the server's REST base URL")
    parser.add_argument("--grpc_url", required=True, help="the server's gRPC host:port")
    args = parser.parse_args()
    record = {"rest_v1": await rest_v1(args.rest_url), "rest_v2": await rest_v2(args.rest_url),
              "grpc": await grpc_v2(args.grpc_url)}
    print(json.dumps(record, indent=2, sort_keys=True))


if __name__ == "__main__":
    asyncio.run(main())

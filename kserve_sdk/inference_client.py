"""KServe's ``kserve.inference_client`` import path for the REST and gRPC clients."""
from .clients.grpc import InferenceGRPCClient
from .clients.rest import InferenceRESTClient, RESTConfig

__all__ = ["InferenceGRPCClient", "InferenceRESTClient", "RESTConfig"]

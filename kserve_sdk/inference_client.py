"""KServe's ``kserve.inference_client`` import path for the REST and gRPC clients and ``USE_CLIENT_DEFAULT``."""
from .clients.defaults import USE_CLIENT_DEFAULT, _UseClientDefault
from .clients.grpc import InferenceGRPCClient
from .clients.rest import InferenceRESTClient, RESTConfig

__all__ = ["InferenceGRPCClient", "InferenceRESTClient", "RESTConfig", "USE_CLIENT_DEFAULT", "_UseClientDefault"]

"""KServe's import path for the v2 gRPC messages; they are tritonclient's (``grpc_service.proto``)."""
from tritonclient.grpc.service_pb2 import *  # noqa: F401,F403
from tritonclient.grpc.service_pb2 import DESCRIPTOR  # noqa: F401

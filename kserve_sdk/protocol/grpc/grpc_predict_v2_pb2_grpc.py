"""KServe's import path for the v2 gRPC service stubs; they are tritonclient's."""
from tritonclient.grpc.service_pb2_grpc import (  # noqa: F401
    GRPCInferenceService,
    GRPCInferenceServiceServicer,
    GRPCInferenceServiceStub,
    add_GRPCInferenceServiceServicer_to_server,
)

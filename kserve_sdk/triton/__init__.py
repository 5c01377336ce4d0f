"""Triton's extensions of the Open Inference Protocol: per-model statistics, system shared memory, the
logging settings and the model configuration. The v2 data plane uses them; their REST routes are in
``kserve_sdk.triton.api`` and their gRPC methods in ``kserve_sdk.handlers.grpc``."""

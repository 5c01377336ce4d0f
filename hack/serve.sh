#!/usr/bin/env bash
# Install kserve_sdk (with the samples extra: scikit-learn) into .venv (Python 3.11) and serve the default
# sample: HTTP 8080, gRPC 8081.
# Extra arguments go to the server, e.g. `hack/serve.sh --http_port 9000`.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=samples source hack/venv.sh
exec .venv/bin/python -m samples.custom_model "$@"

#!/usr/bin/env bash
# Install kserve_sdk with its test extras into .venv (Python 3.11) and run the whole test suite.
# Extra arguments go to pytest, e.g. `hack/test.sh -k grpc`.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=test source hack/venv.sh
exec .venv/bin/python -m pytest "$@"

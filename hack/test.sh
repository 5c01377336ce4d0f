#!/usr/bin/env bash
# Install kserve_sdk with its test extras into .venv (Python 3.11) and run the whole test suite.
# Extra arguments go to pytest, e.g. `hack/test.sh -k grpc`.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=test source hack/venv.sh
# System packages some tests need, from Debian, where we can install them (root with apt):
# chromium renders /docs; nodejs + npm run Azurite, the Azure Blob emulator of the storage tests.
missing=""
command -v chromium >/dev/null || missing="$missing chromium"
command -v node >/dev/null || missing="$missing nodejs"
command -v npm >/dev/null || missing="$missing npm"
if [ -n "$missing" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing) >/dev/null
fi
exec .venv/bin/python -m pytest "$@"

#!/usr/bin/env bash
# Install kserve_sdk with its test extras into .venv (Python 3.11) and run the whole test suite.
# Extra arguments go to pytest, e.g. `hack/test.sh -k grpc`.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=test source hack/venv.sh
# The /docs test renders the page in headless Chromium (Debian's package); install it where we can.
if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium) >/dev/null
fi
exec .venv/bin/python -m pytest "$@"

#!/usr/bin/env bash
# Install kserve_sdk with its test extras into .venv (Python 3.11) and run the whole test suite, then a
# subset with KSERVE_SDK_INTERNALS=off. Extra arguments run pytest with them instead, e.g. `hack/test.sh -k grpc`.
# `hack/test.sh --fast [pytest arguments]` runs the fast tier alone: tests/fast, in process, in one pytest process.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=test source hack/venv.sh
if [ "${1:-}" = "--fast" ]; then  # the fast tier needs none of the system packages below
  shift
  exec .venv/bin/python -m pytest -q -p no:xdist tests/fast "$@"
fi
# System packages some tests need, from Debian, where we can install them (root with apt):
# chromium renders /docs; nodejs + npm run Azurite, the Azure Blob emulator of the storage tests;
# redis-server is the store the durable-jobs tests run against beside SQLite; git clones the storage tests'
# loopback repositories.
missing=""
command -v git >/dev/null || missing="$missing git"
command -v redis-server >/dev/null || missing="$missing redis-server"
command -v chromium >/dev/null || missing="$missing chromium"
command -v node >/dev/null || missing="$missing nodejs"
command -v npm >/dev/null || missing="$missing npm"
if [ -n "$missing" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing) >/dev/null
fi
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
# Two pytest workers on a machine with two cores or more, each taking whole test files (a file's servers
# and fixtures stay in one process): most tests wait on servers they start, so the pair halves the waits.
WORKERS=$(( $(nproc 2>/dev/null || echo 1) >= 2 ? 2 : 0 ))
.venv/bin/python -m pytest -n "$WORKERS" --dist loadfile
# Again with the library-internals tricks off (kserve_sdk/internals/), over the tests of what they touch:
# metrics, access and latency logs, the body limit, statistics, every path of the call lifecycle (about
# 45 s). tests/test_internals.py, in the run above, also serves two workers with the tricks off. The whole
# suite passes that way too:
# KSERVE_SDK_INTERNALS=off .venv/bin/python -m pytest
# The drain tests are left out there: draining touches none of the tricks, and they are the slow ones.
KSERVE_SDK_INTERNALS=off exec .venv/bin/python -m pytest -q -n "$WORKERS" --dist loadfile \
  tests/test_operations.py tests/test_fast_path.py tests/test_rest_errors.py tests/test_statistics.py \
  tests/test_concurrency.py tests/test_lifecycle.py \
  -k "not sigterm and not grace_period and not 64_slow_requests"

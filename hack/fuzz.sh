#!/usr/bin/env bash
# The property-based and schemathesis tests of tests/test_fuzz.py with a long budget (the suite runs them
# with 150 examples per property and 8 per API operation). Extra arguments go to pytest.
#   FUZZ_EXAMPLES=20000 SCHEMATHESIS_EXAMPLES=200 bash hack/fuzz.sh     # about 10 minutes on 2 cores
set -euo pipefail
cd "$(dirname "$0")/.."
export FUZZ_EXAMPLES="${FUZZ_EXAMPLES:-5000}" SCHEMATHESIS_EXAMPLES="${SCHEMATHESIS_EXAMPLES:-100}"
exec .venv/bin/python -m pytest -q -p no:randomly tests/test_fuzz.py -o timeout=3600 "$@"

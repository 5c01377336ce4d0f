#!/usr/bin/env bash
# Create throwaway virtualenvs for the peer servers the benches start, and one for py-spy (profile.py).
# These are NEVER dependencies of the project; they live outside the repo.
# Idempotent: a venv that already has the pinned version is left alone.
#
#   BENCH_VENVS   where the venvs go (default /tmp/bench-venvs)
#   PYTHON        interpreter to build them with (default python3.11)
#   BENCH_PEERS   which venvs to make, space separated (default: all of
#                 "kserve mlserver litserve bentoml kserve-llm tools"), e.g. BENCH_PEERS=kserve
set -euo pipefail

VENVS="${BENCH_VENVS:-/tmp/bench-venvs}"
PY="${PYTHON:-python3.11}"
KSERVE_VERSION="${KSERVE_VERSION:-0.21.0}"
MLSERVER_VERSION="${MLSERVER_VERSION:-1.7.1}"
LITSERVE_VERSION="${LITSERVE_VERSION:-0.2.19}"
BENTOML_VERSION="${BENTOML_VERSION:-1.4.40}"
PY_SPY_VERSION="${PY_SPY_VERSION:-0.4.3}"

PEERS=" ${BENCH_PEERS:-kserve mlserver litserve bentoml kserve-llm tools} "

mkdir -p "$VENVS"
status=0

wanted() { [[ "$PEERS" == *" $1 "* ]]; }

# make_venv NAME DIST[EXTRAS] VERSION [EXTRA_PIP_ARGS...]
make_venv() {
    local name="$1" spec="$2" version="$3"; shift 3
    local dist="${spec%%\[*}" dir="$VENVS/$name"
    wanted "$name" || return 0
    if [ -x "$dir/bin/python" ] && "$dir/bin/python" - "$dist" "$version" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if version(sys.argv[1]) == sys.argv[2] else 1)
PY
    then
        echo "[setup_peers] $name: $dist==$version already installed in $dir"
        return 0
    fi
    echo "[setup_peers] $name: creating $dir with $spec==$version"
    rm -rf "$dir"
    "$PY" -m venv "$dir"
    "$dir/bin/python" -m pip install -q --upgrade pip
    if ! "$dir/bin/python" -m pip install -q "$spec==$version" "$@"; then
        echo "[setup_peers] $name: pip install $spec==$version FAILED" >&2
        status=1
        return 0
    fi
    "$dir/bin/python" -m pip show "$dist" | sed -n '1,2p'
}

make_venv kserve kserve "$KSERVE_VERSION"
make_venv mlserver mlserver "$MLSERVER_VERSION"
make_venv litserve litserve "$LITSERVE_VERSION"     # the peers users pick instead (issue 21); also openai_bench's
make_venv bentoml bentoml "$BENTOML_VERSION"
# openai_bench.py's KServe: its OpenAI routes need the llm extra (vllm and torch, ~10 GB, ~10 min), in a venv
# of its own
make_venv kserve-llm "kserve[llm]" "$KSERVE_VERSION"

# add_to_venv NAME PKG...: what runtime_bench.py's peers need beside the server: KServe's sklearnserver
# (run from a KServe source tree) imports kserve_storage, joblib and pandas; both load the model file that
# this repo's scikit-learn (the test extra's pin) writes. pip leaves what is already there alone.
add_to_venv() {
    local dir="$VENVS/$1"; shift
    wanted "$(basename "$dir")" && [ -x "$dir/bin/python" ] || return 0
    if ! "$dir/bin/python" -m pip install -q "$@"; then
        echo "[setup_peers] $(basename "$dir"): pip install $* FAILED" >&2
        status=1
    fi
}
add_to_venv kserve "kserve-storage==$KSERVE_VERSION" scikit-learn==1.9.1 "joblib>=1.4" "pandas>=2.2"
add_to_venv mlserver "mlserver-sklearn==$MLSERVER_VERSION" scikit-learn==1.9.1
add_to_venv litserve numpy                    # the add-one model of litserve_server.py and bentoml_addone/
add_to_venv bentoml numpy
make_venv tools py-spy "$PY_SPY_VERSION"      # profile.py's sampler, a binary in a wheel

exit $status

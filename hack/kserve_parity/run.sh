#!/usr/bin/env bash
# KServe's own client code against a real KServe 0.21 server and against ours: the same program
# (clients_check.py) and the same model script (model.py) both ways; the two records are written, diffed and
# compared (compare.py: the same answers and exception types; KServe's error messages found in ours).
#
#   bash hack/kserve_parity/run.sh            # records in $OUT (default /tmp/kserve-parity), then the diff
#   bash hack/kserve_parity/run.sh --record   # also writes KServe's record to hack/kserve_parity/kserve-0.21.0.json
#
# KServe runs in a throwaway venv ($KSERVE_VENV, default /tmp/kserve-parity-venv; made with pip install
# kserve==0.21.0 unless it already holds that version); ours runs in the checkout's .venv.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ours_python="$root/.venv/bin/python"
kserve_venv=${KSERVE_VENV:-/tmp/kserve-parity-venv}
out=${OUT:-/tmp/kserve-parity}
version=0.21.0
record=false
[[ "${1:-}" == "--record" ]] && record=true
mkdir -p "$out"

if ! "$kserve_venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('kserve') != '$version')" \
        2>/dev/null; then
    echo "making $kserve_venv with kserve==$version" >&2
    rm -rf "$kserve_venv"
    "$ours_python" -m venv "$kserve_venv"
    "$kserve_venv/bin/pip" install --quiet "kserve==$version"
fi

free_port() {
    "$ours_python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

server_pid=""
stop_server() {
    if [[ -n "$server_pid" ]]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        server_pid=""
    fi
}
trap stop_server EXIT

# check <name> <python> <python args before the script...>: serve model.py, run clients_check.py against it
# with the same python and args, stop the server
check() {
    local name=$1 python=$2
    shift 2
    local http_port grpc_port
    http_port=$(free_port)
    grpc_port=$(free_port)
    (cd "$out" && exec "$python" "$@" "$here/model.py" --model_name doubler \
        --http_port "$http_port" --grpc_port "$grpc_port") > "$out/$name-server.log" 2>&1 &
    server_pid=$!
    if ! "$ours_python" - "$http_port" <<'EOF'
import sys, time, urllib.request
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v2/models/doubler/ready", timeout=2):
            sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit(1)
EOF
    then
        echo "the $name server did not get ready; its log:" >&2
        cat "$out/$name-server.log" >&2
        exit 1
    fi
    (cd "$out" && "$python" "$@" "$here/clients_check.py" --rest_url "http://127.0.0.1:$http_port" \
        --grpc_url "127.0.0.1:$grpc_port") > "$out/$name.json"
    stop_server
    echo "$name: $out/$name.json" >&2
}

PYTHONPATH="" check "kserve-$version" "$kserve_venv/bin/python"
PYTHONPATH="$root" check ours "$ours_python" -m kserve_sdk
if $record; then
    cp "$out/kserve-$version.json" "$here/kserve-$version.json"
    echo "recorded $here/kserve-$version.json" >&2
fi
diff -u "$out/kserve-$version.json" "$out/ours.json" || true  # what differs in words, then whether it counts
"$ours_python" "$here/compare.py" "$out/kserve-$version.json" "$out/ours.json"

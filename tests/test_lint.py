"""pyflakes over the package: no undefined names, no unused imports (re-export modules excepted)."""
import os
import subprocess
import sys

from conftest import ROOT

RE_EXPORTS = ("grpc_predict_v2_pb2.py", "grpc_predict_v2_pb2_grpc.py")


def test_pyflakes_is_clean():
    out = subprocess.run([sys.executable, "-m", "pyflakes", "kserve_sdk", "samples", "hack"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    problems = [line for line in out.stdout.splitlines()
                if not any(os.sep + name in line for name in RE_EXPORTS)]
    assert problems == [], "\n".join(problems)

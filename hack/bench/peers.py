"""The frameworks people pick instead of KServe, as bench targets: how each starts and is probed.

  litserve  litserve_server.py on LitServe (its LitAPI hooks, default settings, fast_queue), from the
            `litserve` venv of setup_peers.sh; POST /predict; ready when GET /health answers 200
  bentoml   `bentoml serve service:AddOne` in a copy of bentoml_addone/, from the `bentoml` venv,
            usage tracking off (BENTOML_DO_NOT_TRACK); POST /predict; ready when GET /readyz answers 200
Both serve HTTP only, on their own JSON route: the bench sends them the body of KServe's v1 protocol
({"instances": ...} -> {"predictions": ...}), which is also what their add-one models take. The
streaming counter (peer_api "stream") exists for LitServe only.
"""

import os
import shutil

import benchlib

HTTP_ONLY = ("litserve", "bentoml")
ROUTE = "/predict"


def configure(t, args, workdir, proto, peer_api):
    """Fill in Target t (named litserve or bentoml) for benchlib.build_targets."""
    if t.name == "litserve":
        _litserve(t, args, peer_api)
    else:
        _bentoml(t, args, workdir, peer_api)
    t.port, t.path = t.http_port, ROUTE
    if proto == "grpc":
        t.unavailable = t.unavailable or f"{t.name} serves no gRPC (its own JSON route over HTTP only)"


def _venv(args, name, dist):
    """(the venv's python, the installed version or None)."""
    py = os.path.join(args.venvs, name, "bin", "python")
    return py, benchlib.venv_version(py, dist) if os.path.exists(py) else None


def _litserve(t, args, peer_api):
    py, ver = _venv(args, "litserve", "litserve")
    if ver is None:
        t.unavailable = f"no litserve in {args.venvs}/litserve: run hack/bench/setup_peers.sh"
    t.cmd = [py, os.path.join(benchlib.HERE, "litserve_server.py"), "--port", str(t.http_port),
             "--api", peer_api]
    t.ready = benchlib.http_ready("/health")
    t.desc = f"litserve {ver}, LitAPI ({peer_api}), default settings + fast_queue=True"


def _bentoml(t, args, workdir, peer_api):
    py, ver = _venv(args, "bentoml", "bentoml")
    if ver is None:
        t.unavailable = f"no bentoml in {args.venvs}/bentoml: run hack/bench/setup_peers.sh"
    if peer_api != "addone":
        t.unavailable = t.unavailable or "the BentoML flavor serves the add-one model only"
    t.cmd = [os.path.join(os.path.dirname(py), "bentoml"), "serve", "service:AddOne",
             "--host", benchlib.HOST, "--port", str(t.http_port)]
    t.cwd = _copy_service(workdir)
    # No usage report leaves the machine, and BentoML's home (its store, its config) stays in the workdir.
    t.env = {"BENTOML_DO_NOT_TRACK": "True", "BENTOML_HOME": os.path.join(workdir, "bentoml-home")}
    t.ready = benchlib.http_ready("/readyz")
    t.desc = f"bentoml {ver}, @bentoml.service with one @bentoml.api, default settings (1 worker)"


def _copy_service(workdir):
    """bentoml_addone/ copied into workdir, so that nothing is written into the repo."""
    dst = os.path.join(workdir, "bentoml_addone")
    shutil.copytree(os.path.join(benchlib.HERE, "bentoml_addone"), dst, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return dst

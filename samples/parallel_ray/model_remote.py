"""Two CPU-bound models, each a Ray Serve deployment, behind one kserve_sdk server.

Each model runs in its own replica processes with a fraction of a CPU (or GPU), so requests to
different models (or to several replicas of one) run in parallel; one server answers REST and gRPC
for all of them by name. Set RAY_ADDRESS to deploy onto an existing Ray cluster instead of starting one.
"""
import argparse
import os

import numpy as np
import ray
from ray import serve

import kserve_sdk as kserve
from kserve_sdk import model_server
from kserve_sdk.errors import InvalidInput
from kserve_sdk.ray import RayModel
from kserve_sdk.ray import shutdown as ray_shutdown
from kserve_sdk.utils.utils import get_predict_input, get_predict_response

parser = argparse.ArgumentParser(parents=[model_server.parser])
parser.add_argument("--num_replicas", type=int, default=1, help="Replicas of each model.")
parser.add_argument("--num_cpus", type=float, default=0.5, help="CPUs per replica (fractions allowed).")
parser.add_argument("--num_gpus", type=float, default=0, help="GPUs per replica (fractions allowed).")
parser.add_argument("--ray_cpus", type=int, default=2, help="CPUs of the local Ray (not with RAY_ADDRESS).")
args, _ = parser.parse_known_args()


def _limits(payload) -> np.ndarray:
    limits = np.asarray(get_predict_input(payload)).reshape(-1)
    if limits.dtype.kind not in "iu" or (limits < 2).any() or (limits > 10_000_000).any():
        raise InvalidInput("each instance must be an integer between 2 and 10000000")
    return limits


@serve.deployment(name="primes", num_replicas=1, ray_actor_options={"num_cpus": 0.5, "num_gpus": 0})
class PrimeCounter(kserve.Model):
    """How many primes are below each n (plain Python: it holds its process's GIL while it counts)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.load()                    # load in __init__: Serve counts the replica as running after it

    def load(self) -> bool:
        self.ready = True              # load weights here (onto the GPU Ray assigned, if any)
        return self.ready

    def predict(self, payload, headers=None):
        counts = []
        for n in _limits(payload):
            count = 0
            for k in range(2, int(n)):
                d = 2
                while d * d <= k and k % d:
                    d += 1
                count += d * d > k
            counts.append(count)
        return get_predict_response(payload, np.array(counts, dtype=np.int64), self.name)


@serve.deployment(name="collatz", num_replicas=1, ray_actor_options={"num_cpus": 0.5, "num_gpus": 0})
class LongestCollatz(kserve.Model):
    """The start below each n with the longest Collatz chain."""

    def __init__(self, name: str):
        super().__init__(name)
        self.load()

    def predict(self, payload, headers=None):
        answers = []
        for n in _limits(payload):
            best, answer = -1, 1
            for start in range(1, int(n)):
                k, steps = start, 0
                while k != 1:
                    k, steps = (k // 2 if k % 2 == 0 else 3 * k + 1), steps + 1
                if steps > best:
                    best, answer = steps, start
            answers.append(answer)
        return get_predict_response(payload, np.array(answers, dtype=np.int64), self.name)


def main() -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    existing = bool(os.environ.get("RAY_ADDRESS"))
    if existing:
        ray.init()                     # joins the cluster at RAY_ADDRESS (head:6379, or auto on a node)
    else:                              # a local Ray reachable from this machine only, without dashboard
        ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=args.ray_cpus)
    names = []
    try:
        serve.start(proxy_location="Disabled")  # no Serve HTTP proxy: kserve_sdk serves HTTP and gRPC
        options = {"num_cpus": args.num_cpus, "num_gpus": args.num_gpus}
        models = []
        for deployment in (PrimeCounter, LongestCollatz):
            name = deployment.name
            app = deployment.options(num_replicas=args.num_replicas, ray_actor_options=options).bind(name)
            names.append(name)
            models.append(RayModel(name, serve.run(app, name=name, route_prefix=None)))
        for model in models:
            model.load()               # waits for the replicas; a model whose replicas fail is not served
        kserve.ModelServer().start(models)
    finally:                           # on a cluster, remove only these applications and leave it running
        ray_shutdown(names if existing else None)


if __name__ == "__main__":
    main()

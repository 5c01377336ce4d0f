"""A model for the supervisor tests (tests/test_supervisor.py), served with ``--workers N``.

``who`` doubles its input and says which worker answered (``pid``) and the log settings in force there.
Its ``start()``, which every worker calls after the fork, can make that worker crash (SIGSEGV) on purpose:

- ``CRASH_ALWAYS=<path>``: every worker starting while the file exists crashes;
- ``CRASH_ONCE=<path>``: the first worker starting while the file exists removes it and crashes.

Workers never write core files: a crash test must not leave cores in the working directory.
"""
import argparse
import os
import resource
import signal

import kserve_sdk as kserve
from kserve_sdk import model_server
from kserve_sdk.triton import log_settings


def _crash() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


class Who(kserve.Model):
    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True

    def start(self) -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        always, once = os.environ.get("CRASH_ALWAYS"), os.environ.get("CRASH_ONCE")
        if always and os.path.exists(always):
            _crash()
        if once:
            try:
                os.remove(once)
            except FileNotFoundError:
                return
            _crash()

    def predict(self, payload, headers=None):
        return {"predictions": [2 * x for x in payload["instances"]], "pid": os.getpid(),
                "log_settings": log_settings.current()}


if __name__ == "__main__":
    args, _ = argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
    kserve.ModelServer().start([Who("who")])

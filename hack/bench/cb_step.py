"""The language-model step of cb_bench.py, in numpy only: the kserve_sdk models (cb_model.py) and the LitServe
loop (litserve_cb.py) run this same step.

    python hack/bench/cb_step.py --rows 1,8,32,64      # unloaded step times: CB_STEP_MS {"1": ms, ...}

A stream is a `Row`: a hidden state of WIDTH floats and the next token it emits. One step advances a list of
rows together: a fixed part shared by the whole step (SHARED products of a WIDTH x WIDTH matrix, the cost of
reading the weights that a real decoder pays once per step whatever the batch), then the rows' hidden states
through LAYERS [rows, WIDTH] x [WIDTH, WIDTH] products. The token of a stream that started at `start` is
start, start + 1, ... so a client can check every stream; the products are real and not skipped.
"""

import argparse
import json
import os
import statistics
import time

import numpy as np

WIDTH = 256
LAYERS = 4
SHARED = 2


class Row:
    """One stream's state: its hidden vector and the token its next step emits."""

    __slots__ = ("hidden", "token")

    def __init__(self, hidden: np.ndarray, token: int):
        self.hidden, self.token = hidden, token


class StepModel:
    """The weights, seeded, and the batched step."""

    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        scale = np.float32(1 / np.sqrt(WIDTH))
        self.layers = [(rng.standard_normal((WIDTH, WIDTH), dtype=np.float32) * scale) for _ in range(LAYERS)]
        self.shared = rng.standard_normal((WIDTH, WIDTH), dtype=np.float32) * scale

    def row(self, start: int) -> Row:
        """A new stream whose first token is ``start``."""
        rng = np.random.default_rng(start)
        return Row(rng.standard_normal(WIDTH, dtype=np.float32), start)

    def step(self, rows: list) -> list:
        """Advance every row by one token; returns the tokens, in the rows' order."""
        shared = self.shared
        for _ in range(SHARED):
            shared = np.tanh(shared @ self.shared)
        hidden = np.stack([r.hidden for r in rows])
        for w in self.layers:
            hidden = np.tanh(hidden @ w + shared[0])
        tokens = []
        for r, h in zip(rows, hidden, strict=True):
            r.hidden = h
            tokens.append(r.token)
            r.token += 1
        return tokens


def step_ms(model: StepModel, rows: int, repeat: int = 200) -> float:
    """The median duration of one step of ``rows`` rows, in ms, after a warm-up."""
    batch = [model.row(i) for i in range(rows)]
    for _ in range(20):
        model.step(batch)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        model.step(batch)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="1,8,32,64", help="comma list of batch sizes to time")
    args = ap.parse_args()
    model = StepModel()
    found = {n: step_ms(model, int(n)) for n in args.rows.split(",")}
    print("CB_STEP_MS " + json.dumps({**found, "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS")}))


if __name__ == "__main__":
    main()

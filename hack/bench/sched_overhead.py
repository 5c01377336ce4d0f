"""Another kserve_sdk tree against this one in the same rounds: the small cells' ratio to the ceiling, before and after.

    git worktree add /tmp/before 7792f88
    .venv/bin/python hack/bench/sched_overhead.py --before /tmp/before [--rounds 7] [--duration 3]

Three targets take turns in every round of every cell: `bare` (the ceiling), `ours` (this repo's kserve_sdk, or
BENCH_SDK_TREE) and `before` (the kserve_sdk of --before, started the same way: addone_model.py of this harness,
this interpreter, PYTHONPATH and the working directory set to that tree). The cells are http_bench.py's
v2-json-small (wrk) and grpc_bench.py's grpc-small (h2load), at c1 and c32. Each ratio is the median of the rounds'
ratios (benchlib.paired_ratio), so a busy spell of the shared machine moves one round rather than one target.
Issue 31 asks that the scheduler's per-call admission lower neither cell's ratio to the ceiling by more than 0.03.
"""

import argparse
import dataclasses
import json
import os
import sys

import benchlib
import grpc_bench
import http_bench
from benchlib import REPO

CELLS = ((http_bench, "v2-json-small"), (grpc_bench, "grpc-small"))


def with_before(tree, proto):
    """make_targets for a Bench: bare, ours and `before` (ours on the other tree)."""
    def make(names, args, workdir):
        bare, ours, before = benchlib.build_targets(["bare", "ours", "ours"], args, workdir, proto)
        before.name, before.cwd = "before", tree
        before.env = {**before.env, "PYTHONPATH": tree}
        before.desc = before.desc.replace(REPO, tree)
        return [bare, ours, before]
    return make


def measure(module, case, opts):
    """{case@cN: the three ratios and every round's rate} of one bench module's case."""
    args = module.parser().parse_args([])
    args.targets, args.cases, args.rounds = "bare,ours,before", case, opts.rounds
    args.duration, args.warmup, args.python = opts.duration, opts.warmup, opts.python
    bench = module.spec(args)
    run = benchlib.run_bench(args, dataclasses.replace(bench, make_targets=with_before(opts.before, bench.proto)))
    out = {}
    for c in run.cases:
        rows = {t.name: run.rows[(t.name, c.key)] for t in run.targets}
        if any(r.rps is None for r in rows.values()):
            out[c.key] = {"error": "; ".join(f"{k}: {r.note}" for k, r in rows.items() if r.rps is None)}
            continue
        out[c.key] = {"ours_x_bare": benchlib.paired_ratio(rows["ours"], rows["bare"]),
                      "before_x_bare": benchlib.paired_ratio(rows["before"], rows["bare"]),
                      "ours_x_before": benchlib.paired_ratio(rows["ours"], rows["before"]),
                      "round_rps": {k: r.round_rps for k, r in rows.items()}}
    return out


def table(found):
    lines = ["| cell | before × ceiling | after × ceiling | after − before | after ÷ before (req/s) |",
             "|---|---|---|---|---|"]
    for key, c in found.items():
        if "error" in c:
            lines.append(f"| {key} | {c['error']} | | | |")
            continue
        lines.append(f"| {key} | {c['before_x_bare']:.3f} | {c['ours_x_bare']:.3f} | "
                     f"{c['ours_x_bare'] - c['before_x_bare']:+.3f} | {c['ours_x_before']:.3f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="the other tree (holding kserve_sdk/)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--warmup", type=float, default=1)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--json", default="", help="also write the figures to this file")
    opts = ap.parse_args()
    opts.before = os.path.abspath(opts.before)
    benchlib.raise_on_signals()
    found = {}
    for module, case in CELLS:
        found.update(measure(module, case, opts))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(found, f, indent=1)
    print(f"\nbefore: {opts.before}; after: {REPO}\n")
    print(table(found))


if __name__ == "__main__":
    main()

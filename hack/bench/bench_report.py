"""run_all.py's results as Markdown, and the acceptance checks against them.

acceptance(results) -> [check dict]; markdown(results) -> the whole bench.md; summary_markdown(results)
-> its summary part (also printed at the end of a run). Every ratio is req/s of kserve_sdk (`ours`)
divided by the reference's, measured in the same cell of the same run.
"""

SMALL = {"v2-json-small", "v1-small", "grpc-small"}
LOAD_GROUPS = ["http", "grpc", "stream", "batch", "workers", "shm"]
REF_TITLES = {"bare": "×ceiling (bare)", "kserve": "×KServe", "mlserver": "×MLServer",
              "batch-off": "×batching off", "ours-w1": "×1 worker"}


# --------------------------------------------------------------------------- acceptance

def cells(results, group, target=None):
    """The load cells of a group (optionally of one target)."""
    found = results["groups"].get(group, {}).get("cells", [])
    return [c for c in found if target is None or c["target"] == target]


def label(c):
    """case@cN of a cell."""
    return f"{c['case']}@c{c['conc']}"


def verdict(name, where, value, op, threshold):
    """One acceptance check; pass is None when the value is missing."""
    ok = None if value is None or threshold is None else (value >= threshold if op == ">=" else
                                     value <= threshold if op == "<=" else value < threshold)
    return {"check": name, "cell": where, "value": value, "op": op, "target": threshold, "pass": ok}


def ratio_checks(results):
    """Ceiling, KServe and MLServer ratios of the load cells."""
    out = []
    for group in ("http", "grpc"):
        for c in cells(results, group, "ours"):
            out.append(verdict("×ceiling", f"{group} {label(c)}", c["ratio"].get("bare"), ">=", 0.8))
            if c["case"] in SMALL:
                out.append(verdict("×KServe (small)", f"{group} {label(c)}", c["ratio"].get("kserve"), ">=", 2))
            if c["case"] == "v2-binary-1mib":
                out.append(verdict("×KServe (1 MiB binary)", f"{group} {label(c)}", c["ratio"].get("kserve"),
                                   ">=", 20))
    for c in cells(results, "stream", "ours"):
        if c["ratio"].get("bare") is not None:  # the gRPC stream cells have a ceiling
            out.append(verdict("×ceiling", f"stream {label(c)}", c["ratio"]["bare"], ">=", 0.8))
        out.append(verdict("×MLServer (streaming)", f"stream {label(c)}", c["ratio"].get("mlserver"), ">=", 3))
    return out


def p99_checks(results):
    """p99 at c32 of ours against KServe's, same cell."""
    out = []
    for group in ("http", "grpc"):
        kserve = {label(c): c for c in cells(results, group, "kserve")}
        for c in cells(results, group, "ours"):
            if c["conc"] != 32:
                continue
            ref = kserve.get(label(c), {}).get("p99_ms")
            out.append(verdict("p99 ≤ KServe's (ms)", f"{group} {label(c)}", c["p99_ms"], "<=", ref))
    return out


def startup_checks(results):
    """Start-to-ready under 1.5 s; idle RSS not above KServe's."""
    st = results["groups"].get("startup", {}).get("targets", {})
    ours, kserve = st.get("ours", {}), st.get("kserve", {})
    return [verdict("start to ready (s)", "startup ours", ours.get("ready_s"), "<", 1.5),
            verdict("idle RSS ≤ KServe's (MiB)", "startup ours", ours.get("idle_rss_mib"), "<=",
                    kserve.get("idle_rss_mib"))]


def acceptance(results):
    """Every acceptance check whose group ran."""
    ran = results["groups"]
    out = []
    if "http" in ran or "grpc" in ran or "stream" in ran:
        out += ratio_checks(results) + p99_checks(results)
    if "startup" in ran:
        out += startup_checks(results)
    return out


# --------------------------------------------------------------------------- formatting

def num(v, spec=".2f"):
    """A number for a table cell, '-' when missing."""
    return "-" if v is None else format(v, spec)


def result_word(ok):
    """PASS / FAIL / n/a."""
    return "n/a" if ok is None else ("**PASS**" if ok else "**FAIL**")


def table(headers, rows):
    """A Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(x).replace("|", "\\|").replace("\n", " ") for x in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def machine_md(results):
    """One paragraph: where and when it ran, and with what."""
    m = results["machine"]
    load = ", ".join(f"{x:.2f}" for x in m["loadavg_at_start"])
    dirty = " (+ uncommitted changes)" if m.get("kserve_sdk_uncommitted_changes") else ""
    s = results["settings"]
    return (f"{m['date']}, {m['cores']} cores, load average at start {load}, Linux {m['kernel']}, "
            f"Python {m['python']}. kserve_sdk {m['kserve_sdk_commit']}{dirty}, KServe {m['kserve']}, "
            f"MLServer {m['mlserver']}, {m['wrk']}, {m['h2load']}. "
            f"{s['warmup']} s warm-up + {s['duration']} s per cell"
            + (" (--quick)" if s.get("quick") else "") + ".\n")


# --------------------------------------------------------------------------- summary

def ratio_text(value, check):
    """A ratio, with its acceptance target and verdict beside when there is one."""
    if check is None:
        return num(value)
    return f"{num(value)} (≥ {check['target']}: {result_word(check['pass'])})"


def ratio_summary(results, checks):
    """ours' ratios per load cell, with the targets beside."""
    by_cell = {}
    for c in checks:
        by_cell[(c["cell"], c["check"].split(" ")[0])] = c
    rows = []
    for group in ("http", "grpc", "stream"):
        for c in cells(results, group, "ours"):
            where = f"{group} {label(c)}"
            rows.append([group, label(c), num(c["rps"], ".1f")] +
                        [ratio_text(c["ratio"].get(ref), by_cell.get((where, title)))
                         for ref, title in (("bare", "×ceiling"), ("kserve", "×KServe"), ("mlserver", "×MLServer"))])
    if not rows:
        return ""
    return table(["group", "cell", "ours req/s (stream: resp/s)", "×ceiling (bare)", "×KServe", "×MLServer"], rows)


def other_ratios(results):
    """Workers 2/1, batching on/off and shared memory / binary REST."""
    rows = []
    for c in cells(results, "workers", "ours-w2"):
        rows.append(["--workers 2 / --workers 1", f"REST {label(c)}", num(c["ratio"].get("ours-w1"))])
    for c in cells(results, "batch", "batch-on"):
        rows.append(["batching on / off", f"REST {label(c)}", num(c["ratio"].get("batch-off"))])
    shm = results["groups"].get("shm", {})
    if "cells" in shm:
        note = next((c["note"] for c in shm["cells"] if c["case"] == "shm-64mib" and c["rps"] is None), "")
        rows.append(["shared memory / binary REST", "64 MiB FP32 @c1",
                     num(shm.get("data", {}).get("shm_over_binary")) + (f" ({note})" if note else "")])
    return table(["ratio (req/s)", "cell", "value"], rows) if rows else ""


def acceptance_md(checks):
    """Every check: value, target, PASS/FAIL."""
    if not checks:
        return "No acceptance check applies to the groups that ran.\n"
    rows = [[c["check"], c["cell"], num(c["value"]), f"{c['op']} {num(c['target'])}", result_word(c["pass"])]
            for c in checks]
    counts = [sum(1 for c in checks if c["pass"] is v) for v in (True, False, None)]
    return "{} pass, {} fail, {} n/a (a reference or value missing).\n\n".format(*counts) + \
        table(["check", "cell", "value", "target", "result"], rows)


def summary_markdown(results):
    """The summary part of bench.md: ratios with targets, other ratios, acceptance, memory."""
    checks = results.get("acceptance") or acceptance(results)
    ratios = ratio_summary(results, checks)
    intro = "kserve_sdk (`ours`) req/s divided by each reference's, same cell, same run.\n" if ratios else ""
    parts = ["## Summary\n", intro, ratios, other_ratios(results), "## Acceptance\n", acceptance_md(checks),
             "## Start-up and memory\n", memory_md(results)]
    return "\n".join(p for p in parts if p)


# --------------------------------------------------------------------------- groups

def peak_by_target(results):
    """The highest peak MiB each target reached in any load cell."""
    peaks = {}
    for group in LOAD_GROUPS:
        for c in cells(results, group):
            if c["peak_mib"] is not None:
                peaks[c["target"]] = max(peaks.get(c["target"], 0), c["peak_mib"])
    return peaks


def memory_md(results):
    """Start-to-ready and idle RSS (startup group), peak RSS (load cells)."""
    st = results["groups"].get("startup", {}).get("targets", {})
    peaks = peak_by_target(results)
    names = list(st) + [t for t in peaks if t not in st]
    rows = []
    for name in names:
        s = st.get(name, {})
        times = ", ".join(num(x.get("ready_s")) for x in s.get("starts", []))
        rows.append([name, num(s.get("ready_s")), times or "-", num(s.get("idle_rss_mib"), ".1f"),
                     num(peaks.get(name), ".1f"), s.get("note", "")])
    if not rows:
        return ""
    return table(["target", "start to ready s (median)", "each start s", "idle RSS MiB (median)",
                  "peak RSS MiB (max over load cells)", "note"], rows)


def group_md(name, group):
    """One group's table: every cell of every target, with its ratios."""
    if "cells" not in group:
        return f"### {name}\n\n{group.get('error') or group.get('skipped') or 'not run'}\n"
    refs = sorted({r for c in group["cells"] for r in c["ratio"]}, key=list(REF_TITLES).index)
    rate_h, p50_h, p99_h = group["headers"]
    rows = [[c["case"], c["conc"], c["target"], num(c["rps"], ".1f"), num(c["p50_ms"]), num(c["p99_ms"]),
             num(c["cpu_ms_per_req"], ".3f"), num(c["peak_mib"], ".1f")] +
            [num(c["ratio"].get(r)) for r in refs] + [c["note"]] for c in group["cells"]]
    desc = "\n".join(f"- `{t}`: {d['desc']}" + (f" (unavailable: {d['unavailable'].splitlines()[0]})"
                                                  if d["unavailable"] else "")
                     for t, d in group["targets"].items())
    return f"### {name}\n\n{desc}\n\n" + table(
        ["case", "conc", "target", rate_h, p50_h, p99_h, "CPU ms/req", "peak MiB"] +
        [REF_TITLES[r] for r in refs] + ["note"], rows)


def markdown(results):
    """The whole bench.md."""
    parts = ["# kserve_sdk benchmarks (hack/bench/run_all.py)\n", machine_md(results)]
    if results.get("interrupted"):
        parts.append(f"**Interrupted ({results['interrupted']}): incomplete.**\n")
    parts.append(summary_markdown(results))
    parts.append("## Groups\n")
    parts += [group_md(name, results["groups"][name]) for name in LOAD_GROUPS if name in results["groups"]]
    return "\n".join(parts)

"""run_all.py's results as Markdown, and the acceptance checks against them.

acceptance(results) -> [check dict]; markdown(results) -> the whole bench.md; summary_markdown(results)
-> its summary part (also printed at the end of a run). Every ratio is req/s of kserve_sdk (`ours`)
divided by the reference's, measured in the same cell of the same run. The checks are issue 21's
targets, then two of the earlier issues' that still hold (binary 1 MiB against KServe, start-up), then issue
33's continuous-batching goals (the cb group: `cb` is @kserve_sdk.batch, its ratios are to `unbatched` and
`litserve`).
"""

SMALL = {"v2-json-small", "v1-small", "grpc-small"}
LOAD_GROUPS = ["http", "grpc", "stream", "batch", "workers", "shm"]
REF_TITLES = {"bare": "×ceiling (bare)", "kserve": "×KServe", "mlserver": "×MLServer", "litserve": "×LitServe",
              "bentoml": "×BentoML", "batch-off": "×batching off", "ours-w1": "×1 worker",
              "unbatched": "×unbatched"}
CEILING = 0.85                                  # every REST, gRPC and gRPC-stream cell
KSERVE_SMALL = {"http": 2, "grpc": 1.5}         # small cells
PEER_MIN = {"litserve": 2, "bentoml": 3}        # every cell they serve
MLSERVER_SSE = 3
GRPC_KINSTR = 680                               # thousand instructions per small gRPC request, ours
REST_OVER_BARE = 680 / 618                      # the same allowance over the bare server, read for REST v2
TAIL_TARGETS = ["bare", "ours", "kserve", "litserve", "bentoml"]
CB_UNBATCHED = 8                                # cb tokens/s over unbatched, at CB_CONC streams
CB_LITSERVE = 1.2                               # cb tokens/s over LitServe's loop, every concurrency
CB_TTFT_STEPS = 5                               # cb time-to-first-token p99 in unloaded steps, at CB_CONC streams
CB_CONC = 32


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


def served(results, group, target):
    """The case@cN labels where target has a rate in group (the cells a peer serves)."""
    return {label(c) for c in cells(results, group, target) if c["rps"] is not None}


def ratio_checks(results):
    """Ceiling and KServe ratios of the REST and gRPC cells; ceiling and MLServer ones of the streams."""
    out = []
    for group in ("http", "grpc"):
        bare = {label(c): c for c in cells(results, group, "bare")}  # the ceiling's own ratios, same cell
        for c in cells(results, group, "ours"):
            out.append(verdict("×ceiling", f"{group} {label(c)}", c["ratio"].get("bare"), ">=", CEILING))
            if c["case"] in SMALL:
                check = verdict("×KServe (small)", f"{group} {label(c)}", c["ratio"].get("kserve"), ">=",
                                KSERVE_SMALL[group])
                check["ceiling"] = bare.get(label(c), {}).get("ratio", {}).get("kserve")
                out.append(check)
            if c["case"] == "v2-binary-1mib":
                out.append(verdict("×KServe (1 MiB binary, earlier issue)", f"{group} {label(c)}",
                                   c["ratio"].get("kserve"), ">=", 20))
    for c in cells(results, "stream", "ours"):
        if c["case"] == "grpc-stream":
            out.append(verdict("×ceiling", f"stream {label(c)}", c["ratio"].get("bare"), ">=", CEILING))
        else:
            out.append(verdict("×MLServer (SSE)", f"stream {label(c)}", c["ratio"].get("mlserver"), ">=",
                               MLSERVER_SSE))
    return out


def peer_checks(results):
    """ours against LitServe (2×) and BentoML (3×) in every cell the peer served."""
    out = []
    for group in ("http", "stream"):
        for peer, need in PEER_MIN.items():
            where = served(results, group, peer)
            for c in cells(results, group, "ours"):
                if label(c) in where:
                    title = REF_TITLES[peer]
                    out.append(verdict(title, f"{group} {label(c)}", c["ratio"].get(peer), ">=", need))
    return out


def p99_checks(results):
    """p99 at c32 of ours against KServe's in the small cells, same cell."""
    out = []
    for group in ("http", "grpc"):
        kserve = {label(c): c for c in cells(results, group, "kserve")}
        for c in cells(results, group, "ours"):
            if c["conc"] != 32 or c["case"] not in SMALL:
                continue
            ref = kserve.get(label(c), {}).get("p99_ms")
            out.append(verdict("p99 ≤ KServe's (ms)", f"{group} {label(c)}", c["p99_ms"], "<=", ref))
    return out


def startup_checks(results):
    """Start-to-ready under 1.5 s; idle RSS not above KServe's."""
    st = results["groups"].get("startup", {}).get("targets", {})
    ours, kserve = st.get("ours", {}), st.get("kserve", {})
    return [verdict("start to ready (s, earlier issue)", "startup ours", ours.get("ready_s"), "<", 1.5),
            verdict("idle RSS ≤ KServe's (MiB, earlier issue)", "startup ours", ours.get("idle_rss_mib"), "<=",
                    kserve.get("idle_rss_mib"))]


def cost_checks(results):
    """Instructions per small request (call_cost.py --server): gRPC at most 680k; REST v2 at most the
    same allowance over the bare Tornado server (680k / 618k, the bare grpc.aio server's count)."""
    cost = results["groups"].get("cost", {})
    grpc, rest = (cost.get(p, {}).get("kinstr", {}) for p in ("grpc", "rest"))
    ratio = rest["ours"] / rest["bare"] if rest.get("ours") and rest.get("bare") else None
    return [verdict("k instructions per request", "cost grpc-small ours", grpc.get("ours"), "<=", GRPC_KINSTR),
            verdict("instructions ÷ bare Tornado's", "cost rest-v2-small ours", ratio, "<=",
                    round(REST_OVER_BARE, 2))]


def cb_checks(results):
    """Issue 33: step batching against the same model unbatched and against LitServe's loop; time to first token.
    A rate check's ceiling is the step alone (conc rows per unloaded step) over the reference's tokens/s; a time
    to first token's, the bare server's (cb_bare.py) in the same cell."""
    by = {(c["target"], c["case"], c["conc"]): c for c in cells(results, "cb")}
    out = []
    for c in cells(results, "cb", "cb"):
        where = f"cb {label(c)}"
        if c["case"] == "cb-stream":
            out += cb_rate_checks(c, where, by)
        if c["conc"] == CB_CONC:
            check = verdict("TTFT p99 (unloaded steps)", where, c.get("ttft_p99_steps"), "<=", CB_TTFT_STEPS)
            check["ceiling"] = by.get(("bare", c["case"], c["conc"]), {}).get("ttft_p99_steps")
            out.append(check)
    return out


def cb_rate_checks(c, where, by):
    """The tokens/s goals of one cb cell: over LitServe at every concurrency, over unbatched at CB_CONC."""
    step_rate = c["conc"] * 1000 / c["step_ms"] if c.get("step_ms") else None
    rate_checks = [("×LitServe loop (tok/s)", "litserve", CB_LITSERVE)]
    if c["conc"] == CB_CONC:
        rate_checks.insert(0, ("×unbatched (tok/s)", "unbatched", CB_UNBATCHED))
    out = []
    for title, ref, need in rate_checks:
        check = verdict(title, where, c["ratio"].get(ref), ">=", need)
        ref_rps = by.get((ref, c["case"], c["conc"]), {}).get("rps")
        check["ceiling"] = step_rate / ref_rps if step_rate and ref_rps else None
        out.append(check)
    return out


def acceptance(results):
    """Every acceptance check whose group ran."""
    ran = results["groups"]
    out = []
    if "http" in ran or "grpc" in ran or "stream" in ran:
        out += ratio_checks(results) + peer_checks(results) + p99_checks(results)
    if "cost" in ran:
        out += cost_checks(results)
    if "startup" in ran:
        out += startup_checks(results)
    if "cb" in ran:
        out += cb_checks(results)
    return out


# --------------------------------------------------------------------------- formatting

def num(v, spec=".2f"):
    """A number for a table cell, '-' when missing."""
    return "-" if v is None else format(v, spec)


def met_word(ok):
    """met / **missed** / n/a."""
    return "n/a" if ok is None else ("met" if ok else "**missed**")


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
            f"MLServer {m['mlserver']}, LitServe {m.get('litserve')}, BentoML {m.get('bentoml')}, "
            f"{m['wrk']}, {m['h2load']}. "
            f"{s['warmup']} s warm-up + {s['duration']} s per cell"
            + (" (--quick)" if s.get("quick") else "") + ".\n")


# --------------------------------------------------------------------------- summary

def ratio_text(value, check):
    """A ratio, with its acceptance target and verdict beside when there is one."""
    if check is None:
        return num(value)
    return f"{num(value)} (≥ {check['target']}: {met_word(check['pass'])})"


def margin(c):
    """How far a check's value is from its target, as value ÷ target ('-' when either is missing)."""
    if c["value"] is None or not c["target"]:
        return "-"
    return f"{c['value'] / c['target']:.2f}"


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
                         for ref, title in SUMMARY_REFS])
    if not rows:
        return ""
    return table(["group", "cell", "ours req/s (stream: resp/s)"] + [REF_TITLES[ref] for ref, _ in SUMMARY_REFS],
                 rows)


SUMMARY_REFS = [("bare", "×ceiling"), ("kserve", "×KServe"), ("mlserver", "×MLServer"), ("litserve", "×LitServe"),
                ("bentoml", "×BentoML")]


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


def cb_md(results):
    """The cb group per cell: tokens/s of each target, cb's ratios, cb's and the bare server's time to first
    token."""
    by = {(c["target"], c["case"], c["conc"]): c for c in cells(results, "cb")}
    rows = []
    for c in cells(results, "cb", "cb"):
        key = c["case"], c["conc"]
        rate = [num(by.get((t, *key), {}).get("rps"), ".0f") for t in ("cb", "unbatched", "litserve", "bare")]
        litserve, bare = by.get(("litserve", *key), {}), by.get(("bare", *key), {})
        rows.append([c["conc"], "apart" if c["case"] == "cb-stagger" else "together"] + rate + [
            num(c["ratio"].get("unbatched")), num(c["ratio"].get("litserve")), pair(c, "p50_ms", "p99_ms"),
            pair(c, "ttft_p50_steps", "ttft_p99_steps"), pair(bare, "ttft_p50_steps", "ttft_p99_steps"),
            num(c.get("step_ms"), ".3f"), pair(litserve, "p50_ms", "p99_ms")])
    if not rows:
        return ""
    return ("### Continuous batching (cb_bench.py)\n\nTokens per second over all streams; time to first token "
            "p50 / p99 in ms and in unloaded steps of the cell's batch size (the step timed alone before the "
            "servers start); streams beginning together (each burst of new requests read one after the other) "
            "or apart.\n\n" + table(
                ["streams", "streams begin", "cb tok/s", "unbatched tok/s", "litserve tok/s", "bare tok/s",
                 "cb ×unbatched", "cb ×LitServe", "cb TTFT ms", "cb TTFT steps", "bare TTFT steps", "step ms",
                 "litserve TTFT ms"], rows))


def pair(c, low, high):
    """``low / high`` of a cell's two figures (one decimal), or - when the cell has no rate."""
    return f"{num(c.get(low), '.1f')} / {num(c.get(high), '.1f')}" if c.get("rps") else "-"


def beyond_ceiling(check):
    """Whether the check's ceiling itself misses its target."""
    ceiling, target = check.get("ceiling"), check["target"]
    if ceiling is None or target is None:
        return False
    return ceiling > target if check["op"] in ("<=", "<") else ceiling < target


def acceptance_md(checks):
    """Every check: cell, value, target, value ÷ target, met / missed."""
    if not checks:
        return "No acceptance check applies to the groups that ran.\n"
    rows = [[c["check"], c["cell"], num(c["value"]), f"{c['op']} {num(c['target'])}", margin(c),
             num(c.get("ceiling")), met_word(c["pass"])] for c in checks]
    counts = [sum(1 for c in checks if c["pass"] is v) for v in (True, False, None)]
    beyond = [c["cell"] for c in checks if beyond_ceiling(c)]
    note = (f"The ceiling itself misses {len(beyond)} of these targets in this run ({', '.join(beyond)}): "
            "there they ask for more than the ceiling (the bare server; in the cb group's rates the step alone) "
            "gives.\n\n") if beyond else ""
    return "{} met, {} missed, {} n/a (a reference or value missing).\n\n".format(*counts) + note + \
        table(["check", "cell", "value", "target", "value ÷ target", "the ceiling's own value", "result"], rows)


def summary_markdown(results):
    """The summary part of bench.md: ratios with targets, other ratios, acceptance, memory."""
    checks = results.get("acceptance") or acceptance(results)
    ratios = ratio_summary(results, checks)
    intro = "kserve_sdk (`ours`) req/s divided by each reference's, same cell, same run.\n" if ratios else ""
    parts = ["## Summary\n", intro, ratios, other_ratios(results), cb_md(results), "## Acceptance\n",
             acceptance_md(checks),
             tail_md(results), cost_md(results), "## Start-up and memory\n", memory_md(results),
             growth_md(results)]
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


def tail_md(results):
    """p99 / p99.9 of the small REST and gRPC cells at c1 and c32, a column per target."""
    rows = []
    for group in ("http", "grpc"):
        by = {(c["target"], label(c)): c for c in cells(results, group)}
        for c in cells(results, group, "ours"):
            if c["case"] not in SMALL or c["conc"] not in (1, 32):
                continue
            rows.append([group, label(c)] + [tail_text(by.get((t, label(c)))) for t in TAIL_TARGETS])
    if not rows:
        return ""
    window = results.get("settings", {}).get("duration", 3)
    return (f"## Tail latency\n\np99 / p99.9 in ms, each the median over the cell's rounds; at c1 a {window} s window "
            "holds a few thousand requests at most, so p99.9 rests on a handful of them.\n\n"
            + table(["group", "cell"] + TAIL_TARGETS, rows))


def tail_text(c):
    """'p99 / p99.9' of one cell, '-' when it has no rate."""
    if c is None or c["rps"] is None:
        return "-"
    return f"{num(c['p99_ms'])} / {num(c.get('p999_ms'))}"


def cost_md(results):
    """call_cost.py --server's instructions per request, bare and ours, gRPC and REST v2."""
    cost = results["groups"].get("cost")
    if not cost or "grpc" not in cost:
        return ""
    rows = []
    for proto, title in (("grpc", "gRPC ModelInfer [1,16]"), ("rest", "REST v2 JSON [1,16]")):
        found = cost[proto].get("kinstr", {})
        ratio = found["ours"] / found["bare"] if found.get("ours") and found.get("bare") else None
        rows.append([title, num(found.get("bare"), "d"), num(found.get("ours"), "d"), num(ratio),
                     cost[proto].get("error", "")])
    return (f"## Instructions per request (call_cost.py --server, {cost['requests']} requests under callgrind)\n\n"
            + table(["request", "bare k", "ours k", "ours ÷ bare", "note"], rows))


EARLIER = {"models": "5,000 models add about 1 MiB (0.2 KiB each)",
           "connections": "8,000 idle connections: about 75 MiB (9.5 KiB each)",
           "concurrency": "2,000 connections served with no errors at 80% of peak throughput"}


def growth_md(results):
    """memory_bench's figures: RSS per registered model, per idle connection, growth over requests."""
    targets = results["groups"].get("memory", {}).get("targets", {})
    rows = []
    for name, m in targets.items():
        for n, row in m.get("models", {}).items():
            unit = num(row["kib_per_model"], ".2f") + " KiB/model" if "kib_per_model" in row else "the base"
            rows.append([name, f"{int(n):,} registered model{'s' if int(n) != 1 else ''}",
                         num(row.get("rss_mib"), ".1f"), num(row.get("added_mib"), "+.1f"), unit,
                         row.get("note", EARLIER["models"] if "added_mib" in row else "")])
        c = m.get("connections", {})
        kept = f"kept {c['kept']}/{c['opened']}, {c['failed']} failed; " if "kept" in c else ""
        rows.append([name, f"{c.get('connections', 0):,} idle keep-alive connections", num(c.get("rss_mib"), ".1f"),
                     num(c.get("added_mib"), "+.1f"), num(c.get("kib_per_connection"), ".2f") + " KiB/connection",
                     c.get("note") or kept + EARLIER["connections"]])
        r = m.get("requests", {})
        rows.append([name, f"after {r.get('requests', 0):,} requests (warm-up {r.get('warmup_requests', 0):,})",
                     num(r.get("rss_mib"), ".1f"), num(r.get("growth_mib"), "+.1f"), "growth after warm-up",
                     r.get("note") or f"{r.get('ok', 0):,} answered 2xx"])
        k = m.get("concurrency", {})
        rows.append([name, f"{k.get('concurrent', 0):,} concurrent connections under load", "-", "-",
                     num(k.get("ratio")) + "× the c32 req/s", k.get("note") or
                     f"{k.get('errors_many', 0)} errors; {EARLIER['concurrency']}"])
    if not rows:
        return ""
    return "### Memory as work grows (memory_bench.py)\n\n" + table(
        ["target", "state", "RSS MiB", "added MiB", "per unit", "note"], rows)


def group_md(name, group):
    """One group's table: every cell of every target, with its ratios."""
    if "cells" not in group:
        return f"### {name}\n\n{group.get('error') or group.get('skipped') or 'not run'}\n"
    refs = sorted({r for c in group["cells"] for r in c["ratio"]}, key=list(REF_TITLES).index)
    rate_h, p50_h, p99_h = group["headers"]
    rows = [[c["case"], c["conc"], c["target"], num(c["rps"], ".1f"), num(c["p50_ms"]), num(c["p99_ms"]),
             num(c.get("p999_ms")), num(c["cpu_ms_per_req"], ".3f"), num(c["peak_mib"], ".1f")] +
            [num(c["ratio"].get(r)) for r in refs] + [c["note"]] for c in group["cells"]]
    desc = "\n".join(f"- `{t}`: {d['desc']}" + (f" (unavailable: {d['unavailable'].splitlines()[0]})"
                                                  if d["unavailable"] else "")
                     for t, d in group["targets"].items())
    return f"### {name}\n\n{desc}\n\n" + table(
        ["case", "conc", "target", rate_h, p50_h, p99_h, "p99.9 ms", "CPU ms/req", "peak MiB"] +
        [REF_TITLES[r] for r in refs] + ["note"], rows)


def markdown(results):
    """The whole bench.md."""
    parts = ["# kserve_sdk benchmarks (hack/bench/run_all.py)\n", machine_md(results)]
    if results.get("interrupted"):
        parts.append(f"**Interrupted ({results['interrupted']}): incomplete.**\n")
    parts.append(summary_markdown(results))
    parts.append("## Groups\n")
    parts += [group_md(name, results["groups"][name]) for name in LOAD_GROUPS + ["cb"] if name in results["groups"]]
    return "\n".join(parts)

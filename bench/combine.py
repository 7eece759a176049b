#!/usr/bin/env python3
"""Join the JSON lines of bw_lat (local, rgpud) and raw_tcp into one table.

usage: combine.py META_JSON OUT_JSON INPUT.jsonl...

Writes OUT_JSON as JSON lines:
  {"kind": "meta", ...}                     the run (from META_JSON)
  every measurement line of the inputs, unchanged
  {"kind": "cmp_bw", "op", "mem", "bytes", "local_gbps", "rgpud_gbps",
   "raw_tcp_oneway_gbps", "raw_tcp_stream_gbps", "raw_tcp_gbps",
   "raw_tcp_mode", "rgpud_over_raw_tcp", "rgpud_over_local"}
     raw_tcp_gbps is the baseline: the faster of the two raw TCP modes
     (oneway, stream) at that size, raw_tcp_mode says which; the
     rgpud/TCP ratio and the bar are against it.
  {"kind": "cmp_lat", "op", "local_us", "rgpud_us", "raw_tcp_rtt_us",
   "rgpud_over_raw_tcp", "rgpud_over_local"}
  {"kind": "bar", "name": "rgpud >= 80% raw TCP at >= 64 MiB", "mem",
   "met": true/false/null, "worst_ratio", "sizes"}
and prints the table.  Exit 0 unless the inputs are unreadable: a missed
bar is reported, not an error.
"""
import json
import statistics
import sys

BAR_RATIO = 0.80
BAR_MIN_BYTES = 64 << 20


def fmt_size(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return "%d MiB" % (n >> 20)
    if n >= 1024 and n % 1024 == 0:
        return "%d KiB" % (n >> 10)
    return "%d B" % n


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def best_raw(oneway, stream):
    """The baseline at one size: the faster raw TCP mode, and its name."""
    got = [(v, m) for (v, m) in ((oneway, "oneway"), (stream, "stream"))
           if v is not None]
    if not got:
        return None, None
    return max(got)


def f(v, spec):
    return "-" if v is None else format(v, spec)


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1]) as fh:
        meta = json.load(fh)
    meta["kind"] = "meta"
    rows = []
    for path in argv[3:]:
        with open(path) as fh:
            for ln, line in enumerate(fh, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    rows.append(json.loads(line))
                except ValueError as e:
                    sys.stderr.write("%s:%d: bad JSON: %s\n" % (path, ln, e))
                    return 1

    bw = {}    # (target, op, mem, bytes) -> gbps
    lat = {}   # (target, op) -> median_us
    for r in rows:
        if r.get("kind") == "bw":
            bw[(r["target"], r["op"], r["mem"], r["bytes"])] = r["gbps"]
        elif r.get("kind") == "lat":
            lat[(r["target"], r["op"])] = r["median_us"]
    targets = {r.get("target") for r in rows}
    have_local = "local" in targets

    out = [meta] + rows
    sizes = sorted({k[3] for k in bw if k[0] in ("rgpud", "rgpud_shm", "local")})
    print()
    print("=== bandwidth, GB/s (1e9 B/s), median of repeats; raw TCP one way over loopback,")
    print("    TCP 1way: into a receive buffer of the full size, TCP strm: 4 MiB pieces into")
    print("    one reused buffer; rgpud/TCP and the bar: against the FASTER of the two")
    print("    rgpud = over loopback TCP; shm = same host (Unix socket + shared memory)")
    print("%-4s %-8s %8s %9s %9s %9s %9s %10s %10s %9s %9s" % (
        "dir", "host mem", "size", "local", "rgpud", "TCP 1way", "TCP strm",
        "rgpud/TCP", "rgpud/loc", "shm", "shm/loc"))
    bars = {}
    bars95 = {}
    bars_shm = {}
    for op in ("h2d", "d2h"):
        for mem in ("pinned", "pageable"):
            for n in sizes:
                loc = bw.get(("local", op, mem, n))
                rg = bw.get(("rgpud", op, mem, n))
                sm = bw.get(("rgpud_shm", op, mem, n))
                t1 = bw.get(("raw_tcp", "oneway", "-", n))
                ts = bw.get(("raw_tcp", "stream", "-", n))
                tcp, tcp_mode = best_raw(t1, ts)
                if loc is None and rg is None:
                    continue
                c = {"kind": "cmp_bw", "op": op, "mem": mem, "bytes": n,
                     "local_gbps": loc, "rgpud_gbps": rg,
                     "raw_tcp_oneway_gbps": t1, "raw_tcp_stream_gbps": ts,
                     "raw_tcp_gbps": tcp, "raw_tcp_mode": tcp_mode,
                     "rgpud_over_raw_tcp": ratio(rg, tcp),
                     "rgpud_over_local": ratio(rg, loc),
                     "shm_gbps": sm, "shm_over_local": ratio(sm, loc)}
                out.append(c)
                print("%-4s %-8s %8s %9s %9s %9s %9s %10s %10s %9s %9s" % (
                    op, mem, fmt_size(n), f(loc, ".2f"), f(rg, ".2f"),
                    f(t1, ".2f"), f(ts, ".2f"),
                    f(c["rgpud_over_raw_tcp"], ".1%"), f(c["rgpud_over_local"], ".1%"),
                    f(sm, ".2f"), f(c["shm_over_local"], ".1%")))
                if n >= BAR_MIN_BYTES:
                    bars.setdefault(mem, []).append((op, n, c["rgpud_over_raw_tcp"]))
                if n >= 16 * 1024 * 1024:
                    bars95.setdefault(mem, []).append((op, n, c["rgpud_over_raw_tcp"]))
                    bars_shm.setdefault(mem, []).append((op, n, c["shm_over_local"]))
            print()

    print("=== latency, microseconds, median per call")
    print("%-12s %9s %9s %12s %10s %10s %9s %9s %9s" % (
        "call", "local", "rgpud", "TCP rtt 4B", "rgpud/TCP", "rgpud/loc", "shm", "shm/loc",
        "shm sock"))
    tcp_rtt = lat.get(("raw_tcp", "rtt_4B"))
    for op in ("ctx_sync", "null_call", "htod_4B", "dtoh_4B", "launch_sync", "launch_async"):
        loc = lat.get(("local", op))
        rg = lat.get(("rgpud", op))
        sm = lat.get(("rgpud_shm", op))
        ss = lat.get(("rgpud_shmsock", op))
        if loc is None and rg is None:
            continue
        c = {"kind": "cmp_lat", "op": op, "local_us": loc, "rgpud_us": rg,
             "raw_tcp_rtt_us": tcp_rtt, "rgpud_over_raw_tcp": ratio(rg, tcp_rtt),
             "rgpud_over_local": ratio(rg, loc), "shm_us": sm,
             "shm_over_local": ratio(sm, loc), "shm_socket_us": ss}
        out.append(c)
        print("%-12s %9s %9s %12s %10s %10s %9s %9s %9s" % (
            op, f(loc, ".1f"), f(rg, ".1f"), f(tcp_rtt, ".1f"),
            f(c["rgpud_over_raw_tcp"], ".2f"),
            f(c["rgpud_over_local"], ".2f"), f(sm, ".1f"), f(c["shm_over_local"], ".2f"),
            f(ss, ".1f")))
    print("(ratios are rgpud time / other time: 1.00 = as fast; shm: same host, calls"
          " through the shared-memory queues; shm sock: the same through the Unix socket)")
    la_loc, la_rg = lat.get(("local", "launch_async")), lat.get(("rgpud", "launch_async"))
    if la_loc and la_rg:
        rate = la_loc / la_rg
        print("launch rate (empty kernel, batches of launches + one sync): local %.0f/s, "
              "rgpud %.0f/s: rgpud = %.0f%% of local" % (1e6 / la_loc, 1e6 / la_rg, rate * 100))
        out.append({"kind": "launch_rate", "local_per_s": 1e6 / la_loc,
                    "rgpud_per_s": 1e6 / la_rg, "rgpud_over_local": rate})
    la_sm = lat.get(("rgpud_shm", "launch_async"))
    if la_loc and la_sm:
        print("launch rate, same host: rgpud %.0f/s = %.0f%% of local" % (
            1e6 / la_sm, la_loc / la_sm * 100))
        out.append({"kind": "launch_rate_shm", "local_per_s": 1e6 / la_loc,
                    "rgpud_per_s": 1e6 / la_sm, "rgpud_over_local": la_loc / la_sm})
    if not have_local:
        print("(no local column: %s)" % meta.get("local_skipped", "not measured"))
    # launch rate in interleaved rounds (run-bench.sh, BENCH_LAUNCH_ROUNDS)
    lrounds = sorted({int(t.rsplit("_r", 1)[1]) for t in targets
                      if t and t.startswith("launch_") and t.rsplit("_r", 1)[-1].isdigit()})
    if lrounds:
        print("launch rate in %d interleaved rounds, us per launch (local, tcp, shm) and"
              " local/rgpud per round:" % len(lrounds))
        per = {"tcp": [], "shm": []}
        for k in lrounds:
            loc = lat.get(("launch_local_r%d" % k, "launch_async"))
            row = []
            for path in ("tcp", "shm"):
                rg = lat.get(("launch_%s_r%d" % (path, k), "launch_async"))
                r = ratio(loc, rg)
                if r is not None:
                    per[path].append(r)
                row.append("%s %s (%s)" % (path, f(rg, ".2f"), f(r, ".1%")))
            print("  round %d: local %s  %s" % (k, f(loc, ".2f"), "  ".join(row)))
        for path in ("tcp", "shm"):
            v = sorted(per[path])
            if not v:
                continue
            med = statistics.median(v)
            print("  %s: median %.1f%% of local (range %.1f%%-%.1f%%)" % (
                path, med * 100, v[0] * 100, v[-1] * 100))
            out.append({"kind": "launch_rounds", "path": path, "ratios": per[path],
                        "median_ratio": med})

    print()
    print("=== bar: bulk copies >= %s through rgpud reach >= %d%% of raw loopback TCP"
          " (the faster mode)" % (
        fmt_size(BAR_MIN_BYTES), round(BAR_RATIO * 100)))
    for mem in ("pinned", "pageable"):
        got = bars.get(mem, [])
        ratios = [r for (_, _, r) in got if r is not None]
        if not got or len(ratios) != len(got):
            met, worst = None, None
            verdict = "NOT MEASURED (no copies >= %s; raise --max)" % fmt_size(BAR_MIN_BYTES)
        else:
            worst = min(ratios)
            met = worst >= BAR_RATIO
            verdict = ("MET" if met else "MISSED") + " (worst %.1f%%: %s)" % (
                worst * 100, ", ".join("%s %s %.1f%%" % (op, fmt_size(n), r * 100)
                                       for (op, n, r) in got))
        print("  %-8s %s" % (mem, verdict))
        out.append({"kind": "bar", "name": "rgpud >= 80% raw TCP at >= 64 MiB",
                    "mem": mem, "met": met, "worst_ratio": worst,
                    "sizes": [{"op": op, "bytes": n, "ratio": r} for (op, n, r) in got]})
    # Interleaved rounds (run-bench.sh, BENCH_BULK_ROUNDS): rgpud over TCP
    # and raw TCP back to back, each size's ratio per round; loopback TCP
    # drifts over a run, so the 95% bar takes the median of those ratios
    rounds = sorted({int(t[len("rgpud_r"):]) for t in targets
                     if t and t.startswith("rgpud_r") and t[len("rgpud_r"):].isdigit()})
    if rounds:
        print("=== bulk over TCP in %d interleaved rounds: rgpud / raw TCP (the faster mode)"
              " per round, and the median" % len(rounds))
        med95 = {}
        for op in ("h2d", "d2h"):
            for mem in ("pinned", "pageable"):
                for n in sizes:
                    rs = []
                    for k in rounds:
                        rg = bw.get(("rgpud_r%d" % k, op, mem, n))
                        raw, _ = best_raw(bw.get(("raw_tcp_r%d" % k, "oneway", "-", n)),
                                          bw.get(("raw_tcp_r%d" % k, "stream", "-", n)))
                        r = ratio(rg, raw)
                        if r is not None:
                            rs.append(r)
                    if not rs:
                        continue
                    med = statistics.median(rs)
                    med95.setdefault(mem, []).append((op, n, med))
                    out.append({"kind": "bulk_rounds", "op": op, "mem": mem, "bytes": n,
                                "ratios": rs, "median_ratio": med})
                    print("  %-4s %-8s %8s  %s  median %.1f%%" % (
                        op, mem, fmt_size(n), " ".join("%.1f%%" % (r * 100) for r in rs),
                        med * 100))
        bars95 = med95
    for title, table, need in (
            ("rgpud over TCP >= 95% of raw loopback TCP from 16 MiB"
             + (" (median of the rounds)" if rounds else ""), bars95, 0.95),
            ("same host (shm) >= 90% of local CUDA copies from 16 MiB", bars_shm, 0.90)):
        print("=== bar: %s" % title)
        for mem in ("pinned", "pageable"):
            got = [(op, n, r) for (op, n, r) in table.get(mem, []) if r is not None]
            if not got:
                print("  %-8s NOT MEASURED" % mem)
                out.append({"kind": "bar", "name": title, "mem": mem, "met": None})
                continue
            worst = min(r for (_, _, r) in got)
            print("  %-8s %s (worst %.1f%%: %s)" % (
                mem, "MET" if worst >= need else "MISSED", worst * 100,
                ", ".join("%s %s %.1f%%" % (op, fmt_size(n), r * 100) for (op, n, r) in got)))
            out.append({"kind": "bar", "name": title, "mem": mem, "met": worst >= need,
                        "worst_ratio": worst})
    if meta.get("emulated"):
        print("  (emulated device: the numbers say nothing about a GPU)")

    with open(argv[2], "w") as fh:
        for o in out:
            fh.write(json.dumps(o, sort_keys=False) + "\n")
    print()
    print("JSON: %s" % argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

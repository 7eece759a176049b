#!/usr/bin/env python3
"""Summary of bench/train/run.sh: summary.py TRAIN_JSONL BENCH_JSON OUT_JSON

Training: per model and target the median step time over the
repetitions (each repetition's own value is the median of its steps),
with the smallest and largest repetition; rgpu over local as the ratio of
those medians and as the median of the per-repetition ratios (the
repetitions interleave the targets, so each ratio pairs runs made close
together); the synchronous round trips per step (RGPU_STATS), the largest
over repetitions.  Small calls: a synchronous trip (null_call: a call
that always takes one round trip and does almost nothing on the server)
against a raw TCP round trip; a 4-byte device-to-host copy on the
same-host path against the local driver; launch throughput; bulk copies
from 16 MiB against raw TCP.  One DONE/MISSED line per bar of issue 13.
"""
import json
import statistics
import sys


def load(path):
    rows = []
    try:
        with open(path) as fh:
            for line in fh:
                line = line.strip()
                if line:
                    rows.append(json.loads(line))
    except OSError as e:
        print(f"(cannot read {path}: {e})")
    return rows


def main(argv):
    train, micro, out = load(argv[1]), load(argv[2]), argv[3]
    res = {"training": {}, "small_calls": {}, "bars": []}
    bars = res["bars"]

    def bar(name, value, limit, le=True, unit="x"):
        met = None if value is None else (value <= limit if le else value >= limit)
        bars.append({"name": name, "value": value, "limit": limit, "met": met})
        v = "not measured" if value is None else f"{value:.3f}{unit}"
        word = {None: "NOT MEASURED", True: "DONE", False: "MISSED"}[met]
        print(f"  {word:12s} {name}: {v} (bar {'<=' if le else '>='} {limit}{unit})")

    models = []
    for r in train:
        if r.get("model") not in models:
            models.append(r.get("model"))
    nrep = len({r.get("rep") for r in train})
    print(f"=== training steps, ms: median over {nrep} repetitions [fastest, slowest repetition]")
    if nrep < 5:
        print(f"    (fewer than the 5 repetitions the bars ask for)")
    print(f"{'model':12s} {'local':>22s} {'tcp':>22s} {'shm':>22s} {'tcp/loc':>8s} "
          f"{'shm/loc':>8s} {'sync/step tcp,shm':>18s}")
    for m in models:
        d = {}
        for tgt in ("local", "tcp", "shm"):
            ok = [r for r in train if r.get("model") == m and r.get("target") == tgt and r.get("ok")]
            fail = [r for r in train if r.get("model") == m and r.get("target") == tgt and not r.get("ok")]
            v = [r["median_ms"] for r in ok]
            d[tgt] = {"reps": len(v), "failed": len(fail),
                      "median_ms": statistics.median(v) if v else None,
                      "min_ms": min(v) if v else None, "max_ms": max(v) if v else None,
                      "by_rep": {r["rep"]: r["median_ms"] for r in ok},
                      "sync_per_step": max((r["sync_per_step"] for r in ok
                                            if r.get("sync_per_step") is not None), default=None),
                      "sync_by_kind": ok[-1].get("sync_by_kind_per_step") if ok else None,
                      "errors": [r.get("error") for r in fail][:2]}
        for tgt in ("tcp", "shm"):
            loc, x = d["local"], d[tgt]
            x["ratio_of_medians"] = (x["median_ms"] / loc["median_ms"]
                                     if x["median_ms"] and loc["median_ms"] else None)
            pairs = [x["by_rep"][k] / loc["by_rep"][k] for k in x["by_rep"] if k in loc["by_rep"]]
            x["paired_ratio_median"] = statistics.median(pairs) if pairs else None
            x["paired_ratio_min"] = min(pairs) if pairs else None
            x["paired_ratio_max"] = max(pairs) if pairs else None
        res["training"][m] = d

        def cell(t):
            x = d[t]
            if x["median_ms"] is None:
                return "failed" if x["failed"] else "-"
            return f"{x['median_ms']:.2f} [{x['min_ms']:.2f},{x['max_ms']:.2f}]"

        def rat(t):
            v = d[t]["ratio_of_medians"]
            return f"{v:.3f}" if v else "-"

        def sy(t):
            v = d[t]["sync_per_step"]
            return "-" if v is None else f"{v:g}"
        print(f"{m:12s} {cell('local'):>22s} {cell('tcp'):>22s} {cell('shm'):>22s} "
              f"{rat('tcp'):>8s} {rat('shm'):>8s} {sy('tcp') + ',' + sy('shm'):>18s}")
        for t in ("tcp", "shm"):
            x = d[t]
            if x["paired_ratio_median"]:
                print(f"    {t}/local per repetition: median {x['paired_ratio_median']:.3f}, "
                      f"range {x['paired_ratio_min']:.3f}-{x['paired_ratio_max']:.3f}; "
                      f"round trips by kind per step: {x['sync_by_kind']}")
            for e in x["errors"]:
                print(f"    {t} failed: {e}")

    lat = {r["op"]: r for r in micro if r.get("kind") == "cmp_lat"}
    lr = {r["kind"]: r for r in micro if r.get("kind") == "launch_rate"}
    raw_lat = {(r.get("target"), r.get("op")): r.get("median_us") for r in micro
               if r.get("kind") == "lat"}
    res["small_calls"] = {"cmp_lat": lat, "launch_rate": lr.get("launch_rate")}
    if lat:
        print("=== small calls, us (median): local, rgpu over TCP, same host; raw TCP round trip")
        for op, r in lat.items():
            print(f"  {op:12s} local {r.get('local_us') or 0:8.1f}  tcp {r.get('rgpud_us') or 0:8.1f}"
                  f"  shm {r.get('shm_us') or 0:8.1f}  raw tcp rtt {r.get('raw_tcp_rtt_us') or 0:6.1f}")

    print("=== issue 13 bars")
    for m in models:
        d = res["training"][m]
        if m.startswith("gpt"):
            bar(f"{m} step over TCP / local (ratio of medians)", d["tcp"]["ratio_of_medians"], 1.15)
            bar(f"{m} step same host / local (ratio of medians)", d["shm"]["ratio_of_medians"], 1.02)
            sy = [v for v in (d["tcp"]["sync_per_step"], d["shm"]["sync_per_step"]) if v is not None]
            bar(f"{m} synchronous round trips per step (RGPU_STATS)", max(sy) if sy else None, 5,
                unit="")
    nc = lat.get("null_call", {})
    bar("synchronous small call over TCP / raw TCP round trip (null_call)",
        nc.get("rgpud_over_raw_tcp"), 1.3)
    dt = lat.get("dtoh_4B", {})
    bar("synchronous small call, same host / local driver (dtoh_4B)", dt.get("shm_over_local"), 2.0)
    la = lat.get("launch_async", {})
    lrr = {r["path"]: r["median_ratio"] for r in micro if r.get("kind") == "launch_rounds"}
    if lrr:
        bar("launch throughput over TCP / local (median of interleaved rounds)",
            lrr.get("tcp"), 0.9, le=False)
        bar("launch throughput same host / local (median of interleaved rounds)",
            lrr.get("shm"), 0.9, le=False)
    else:
        bar("launch throughput over TCP / local", (la.get("local_us") / la["rgpud_us"])
            if la.get("local_us") and la.get("rgpud_us") else None, 0.9, le=False)
        bar("launch throughput same host / local", (la.get("local_us") / la["shm_us"])
            if la.get("local_us") and la.get("shm_us") else None, 0.9, le=False)
    for r in micro:
        if r.get("kind") == "bar" and "95%" in r.get("name", ""):
            bar(f"bulk from 16 MiB over TCP / raw TCP, {r['mem']} (worst size)",
                r.get("worst_ratio"), 0.95, le=False)
    with open(out, "w") as fh:
        json.dump(res, fh, indent=1)
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""bench/sharing/analyze.py RAW OUT "SYSTEMS": the table of run.sh.

Reads the tenants' RESULT lines under RAW/<system>/<mix>-<label>.out (and
RAW/alone/ for the baselines), prints a Markdown table and writes
OUT/sharing.json.  Exit 0 (the numbers are reported, not judged here; the
"done" bars are printed under the table).
"""
import json
import os
import re
import sys


def result(path):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("RESULT "):
                    d = {}
                    for kv in line.split()[1:]:
                        k, _, v = kv.partition("=")
                        try:
                            d[k] = float(v)
                        except ValueError:
                            d[k] = v
                    return d
    except OSError:
        pass
    return None


def jain(xs):
    xs = [x for x in xs if x]
    if not xs:
        return None
    s, s2 = sum(xs), sum(x * x for x in xs)
    return s * s / (len(xs) * s2)


def fmt(x, p=2):
    return "-" if x is None else ("%.*f" % (p, x))


def main():
    raw, out, systems = sys.argv[1], sys.argv[2], sys.argv[3].split()
    alone = lambda mix, label: result(os.path.join(raw, "alone", "%s-%s.out" % (mix, label)))
    a_four = alone("four", "a")
    a_tenx = {k: alone("tenx", k) for k in "ab"}
    a_short = alone("flood", "short")
    rows = {}
    for s in systems:
        d = os.path.join(raw, s)
        if not os.path.isdir(d):
            continue
        r = {}
        get = lambda mix, label: result(os.path.join(d, "%s-%s.out" % (mix, label)))
        # four: STP, ANTT
        ts = [get("four", "t%d" % i) for i in range(1, 5)]
        if a_four and all(t and "elapsed_s" in t for t in ts):
            ta = a_four["elapsed_s"]
            r["stp"] = sum(ta / t["elapsed_s"] for t in ts)
            r["antt"] = sum(t["elapsed_s"] / ta for t in ts) / 4
            r["four_ok"] = all(t.get("verify") == "ok" for t in ts)
        # tenx: Jain over slowdowns
        tx = {k: get("tenx", k) for k in "ab"}
        if all(tx[k] and a_tenx[k] and "rate" in tx[k] and "rate" in a_tenx[k] for k in "ab"):
            sd = [a_tenx[k]["rate"] / tx[k]["rate"] for k in "ab"]
            r["tenx_slowdowns"] = sd
            r["jain"] = jain(sd)
        # shares: work ratio, attained ratio from rgpu top
        sh = {k: get("shares", k) for k in "ab"}
        if all(sh[k] and "kernels" in sh[k] for k in "ab") and sh["b"]["kernels"]:
            r["work_ratio"] = sh["a"]["kernels"] / sh["b"]["kernels"]
        top = os.path.join(d, "shares-top.json")
        if os.path.exists(top):
            try:
                ss = json.load(open(top))["sessions"]
                hi = [x["gpu_time_ms"] for x in ss if x["weight"] == 75]
                lo = [x["gpu_time_ms"] for x in ss if x["weight"] == 25]
                if hi and lo and lo[0] > 0:
                    r["attained_ratio"] = hi[0] / lo[0]
                    r["attained_ms"] = [hi[0], lo[0]]
            except (ValueError, KeyError, IndexError, TypeError):
                pass
        # flood: short kernel latency
        fl = get("flood", "short")
        sa = get("flood", "short-alone") or a_short
        if fl and "p99_us" in fl:
            r["p50_us"], r["p99_us"] = fl["p50_us"], fl["p99_us"]
            if sa and sa.get("p99_us"):
                r["p99_alone_us"] = sa["p99_us"]
                r["p99_over_alone"] = fl["p99_us"] / sa["p99_us"]
        # fault: the running tenant completed, correct?
        good, bad = get("fault", "good"), get("fault", "bad")
        if good:
            r["fault_good"] = "ok" if good.get("verify") == "ok" else str(good.get("error", "failed"))
        if bad:
            r["fault_bad"] = str(bad.get("faulted", bad.get("error", "?")))
        rows[s] = r

    base = rows.get("ts", {}).get("stp")
    mps = rows.get("mps", {}).get("stp")
    print("| system | STP (4 tenants) | vs time-sliced | vs MPS | ANTT | Jain (10x kernels) "
          "| 75:25 attained | 75:25 work | short p50 us | short p99 us | p99 alone us | p99 / alone "
          "| beside a fault |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in systems:
        r = rows.get(s)
        if r is None:
            print("| %s | (did not run) ||||||||||||" % s)
            continue
        stp = r.get("stp")
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            s, fmt(stp), fmt(stp / base if stp and base else None),
            fmt(stp / mps if stp and mps else None), fmt(r.get("antt")), fmt(r.get("jain"), 3),
            fmt(r.get("attained_ratio")), fmt(r.get("work_ratio")), fmt(r.get("p50_us"), 1),
            fmt(r.get("p99_us"), 1), fmt(r.get("p99_alone_us"), 1), fmt(r.get("p99_over_alone")),
            "%s (faulting one: %s)" % (r.get("fault_good", "-"), r.get("fault_bad", "-"))))
    if a_short:
        print("\nshort kernel alone (plain driver): p50 %.1f us, p99 %.1f us" %
              (a_short.get("p50_us", 0), a_short.get("p99_us", 0)))
    print("\nDone bars (issue 11): STP >= 1.8x time-sliced and >= 0.9x MPS; Jain >= 0.97; "
          "attained within 10% of 3:1; p99 <= 2x alone; the running tenant survives a fault.")
    with open(os.path.join(out, "sharing.json"), "w") as f:
        json.dump({"alone": {"four": a_four, "tenx": a_tenx, "short": a_short}, "systems": rows},
                  f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

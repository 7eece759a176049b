#!/usr/bin/env python3
"""Measured step times of bench/netem/run.sh beside the model

    step = base + round trips x trip + bytes / bandwidth

trip: one round trip as measured through that link (null_call);
bandwidth: the 16 MiB copy through it; base: the rest of a step (the
requests without a reply, the server's work), one number for all runs:
the median over the runs of step - trips x trip - bytes / bandwidth.
Each row: the measured median step, the model's prediction, and the
error."""
import json
import sys


def main(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    if not rows:
        print("no measurements")
        return 1
    for r in rows:
        kv = dict(x.split("=") for x in r["label"].split())
        r["gbps"], r["rtt"], r["mix"] = float(kv["gbps"]), float(kv["rtt_us"]), kv["mix"]
    def xfer_ms(r):
        return r["htod_bytes"] / (r["h2d_gbps"] * 1e9) * 1e3

    rest = sorted(r["median_ms"] - r["trips"] * r["trip_us"] / 1e3 - xfer_ms(r) for r in rows)
    base = rest[len(rest) // 2]
    print(f"base (requests without a reply + server work per step): {base:.3f} ms "
          f"(median over {len(rows)} runs)")
    print(f"{'link':>10s} {'+rtt us':>8s} {'trip us':>8s} {'GB/s':>6s} {'mix':>6s} {'trips':>5s} "
          f"{'step ms':>8s} {'model ms':>9s} {'error':>7s}")
    worst = 0.0
    for r in sorted(rows, key=lambda r: (r["gbps"], r["rtt"], r["mix"])):
        pred = base + r["trips"] * r["trip_us"] / 1e3 + xfer_ms(r)
        err = (pred - r["median_ms"]) / r["median_ms"]
        worst = max(worst, abs(err))
        r["model_ms"] = pred
        print(f"{r['gbps']:>7.0f}Gb/s {r['rtt']:>8.0f} {r['trip_us']:>8.1f} {r['h2d_gbps']:>6.2f} "
              f"{r['mix']:>6s} {r['trips']:>5d} {r['median_ms']:>8.3f} {pred:>9.3f} {err:>+7.1%}")
    print(f"largest model error: {worst:.1%}")
    for g in sorted({r["gbps"] for r in rows}):
        a = sorted((r for r in rows if r["gbps"] == g and r["mix"] == "after"), key=lambda r: r["rtt"])
        b = sorted((r for r in rows if r["gbps"] == g and r["mix"] == "before"), key=lambda r: r["rtt"])
        if len(a) > 1:
            sa = (a[-1]["median_ms"] - a[0]["median_ms"]) / ((a[-1]["trip_us"] - a[0]["trip_us"]) / 1e3)
            print(f"{g:.0f} Gb/s: step time grows {sa:.1f} ms per ms of round trip with 1 round trip "
                  f"per step" + (f", {(b[-1]['median_ms'] - b[0]['median_ms']) / ((b[-1]['trip_us'] - b[0]['trip_us']) / 1e3):.1f} with 54" if len(b) > 1 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

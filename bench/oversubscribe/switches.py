#!/usr/bin/env python3
"""What rgpud's memory manager did, from its log (bench/oversubscribe).

    switches.py [--after MARK] [--timeline N] RGPUD_LOG

Reads the memory manager's lines (daemon/mem: evictions, restores, the
arbiter's decisions) and prints
  - evictions: how many, bytes, GB/s by how the host memory was had
    (ready: prepared ahead or kept from an earlier eviction; fresh:
    faulted in and pinned during the eviction);
  - restores: how many, the wait for room (median, max), copy GB/s;
  - evictions per restore: 1 or less is whole-session swapping, more is a
    session pushed out piece by piece (thrashing);
  - how long a session had been on the GPU when it was evicted (its
    quantum protects it that long; 'on the GPU for' in the log);
  - the arbiter's decisions: waits for a protected or busy holder, yields;
  - with --timeline N, the first N events in order, times relative to the
    first one (lines carry the monotonic clock as [t=...]).
Lines before MARK (a line the caller wrote into the log) are skipped.
Works on logs of older rgpud builds too (then without the newer fields).
"""
import re
import statistics
import sys


def med(v):
    return statistics.median(v) if v else 0.0


def main(argv):
    after, timeline, path = None, 0, None
    i = 1
    while i < len(argv):
        if argv[i] == "--after":
            after, i = argv[i + 1], i + 2
        elif argv[i] == "--timeline":
            timeline, i = int(argv[i + 1]), i + 2
        else:
            path, i = argv[i], i + 1
    if not path:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    lines = open(path, errors="replace").read().splitlines()
    if after is not None:
        for k, l in enumerate(lines):
            if l.startswith(after):
                lines = lines[k + 1:]
                break
    ev, rs, waits, yields, events = [], [], [], 0, []
    evict_re = re.compile(r"rgpud\[(\d+)\]: info: (.*): swapped out (\d+) bytes of device memory in ([0-9.]+) s \(([0-9.]+) GB/s")
    restore_re = re.compile(r"rgpud\[(\d+)\]: info: (.*): swapped in (\d+) bytes of device memory in ([0-9.]+) s \(copy ([0-9.]+) s, ([0-9.]+) GB/s; waiting for room ([0-9.]+) s")
    stamp_re = re.compile(r"\[t=([0-9.]+)\]")
    for l in lines:
        st = stamp_re.search(l)
        t = float(st.group(1)) if st else None
        m = evict_re.search(l)
        if m:
            e = {"who": m.group(2), "bytes": int(m.group(3)), "s": float(m.group(4)),
                 "gbps": float(m.group(5)), "t": t}
            r = re.search(r"host memory: (\d+) bytes ready, (\d+) prepared now", l)
            if r:
                e["ready"], e["fresh"] = int(r.group(1)), int(r.group(2))
            elif "kept from before" in l:
                e["ready"], e["fresh"] = e["bytes"], 0
            elif "prepared now" in l:
                e["ready"], e["fresh"] = 0, e["bytes"]
            r = re.search(r"on the GPU for ([0-9.]+) s", l)
            e["resident_s"] = float(r.group(1)) if r else None
            ev.append(e)
            events.append((t, "evict  %-28s %6.0f MiB in %6.3f s (%5.1f GB/s)%s" % (
                e["who"][-28:], e["bytes"] / 2**20, e["s"], e["gbps"],
                "" if e["resident_s"] is None else ", on the GPU %.2f s before" % e["resident_s"])))
            continue
        m = restore_re.search(l)
        if m:
            r = {"who": m.group(2), "bytes": int(m.group(3)), "copy": float(m.group(5)),
                 "gbps": float(m.group(6)), "wait": float(m.group(7)), "t": t}
            rs.append(r)
            events.append((t, "restore %-27s %6.0f MiB, waited %6.3f s for room, copy %6.3f s" % (
                r["who"][-27:], r["bytes"] / 2**20, r["wait"], r["copy"])))
            continue
        m = re.search(r"memory: (\d+) bytes wanted on GPU (\d+): (.*?)( \[t=|$)", l)
        if m:
            events.append((t, "ask    %6.0f MiB: %s" % (int(m.group(1)) / 2**20, m.group(3))))
            if "waits" in m.group(3) or "protected" in m.group(3) or "busy" in m.group(3):
                waits.append(m.group(3))
            continue
        if "gives way" in l or "yield" in l:
            yields += 1
            events.append((t, "yield  " + l.split(": info: ", 1)[-1][:90]))
    nsess = len({e["who"] for e in ev} | {r["who"] for r in rs})
    out = []
    if ev:
        tot = sum(e["bytes"] for e in ev)
        out.append("evictions: %d, %.1f GiB in all, median %.0f MiB each; median %.1f GB/s" % (
            len(ev), tot / 2**30, med([e["bytes"] for e in ev]) / 2**20, med([e["gbps"] for e in ev])))
        ready = [e["gbps"] for e in ev if e.get("fresh") == 0]
        fresh = [e["gbps"] for e in ev if e.get("fresh", 0) > 0]
        rb = sum(e.get("ready", 0) for e in ev)
        out.append("  host memory ready beforehand for %.0f%% of the bytes; GB/s with all of it ready: "
                   "median %.1f (%d), with some prepared during the eviction: median %.1f (%d)" % (
                       100.0 * rb / tot if tot else 0, med(ready), len(ready), med(fresh), len(fresh)))
        rt = [e["resident_s"] for e in ev if e["resident_s"] is not None]
        if rt:
            out.append("  on the GPU before being evicted: min %.2f s, median %.2f s" % (min(rt), med(rt)))
    else:
        out.append("evictions: none")
    if rs:
        w = [r["wait"] for r in rs]
        out.append("restores: %d, waited for room median %.3f s, max %.3f s; copy median %.1f GB/s" % (
            len(rs), med(w), max(w), med([r["gbps"] for r in rs])))
    else:
        out.append("restores: none")
    out.append("evictions per restore: %.2f (%d sessions evicted or restored; 1 or less: "
               "whole-session swaps, more: piecemeal)" % (len(ev) / max(len(rs), 1), nsess))
    out.append("arbiter: %d requests had to wait for a protected or busy holder, %d yields" % (
        len(waits), yields))
    if timeline:
        t0 = next((t for t, _ in events if t is not None), None)
        for t, what in events[:timeline]:
            out.append("  %s %s" % ("%8.3f" % (t - t0) if t is not None and t0 is not None else "       -", what))
        if len(events) > timeline:
            out.append("  ... %d more events" % (len(events) - timeline))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

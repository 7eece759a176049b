#!/usr/bin/env python3
"""Compare a torch_ops.py run through rgpu (second log) with a local one
(first log): every part the local run finished is done, no part failed,
every CHECK true, every VAL within a relative 1e-4 of local (2e-2 for the
bf16 part).  Prints "ok ..." or "FAIL reason | ..."."""
import sys


def parse(path):
    vals, checks, done, failed = {}, {}, set(), []
    for line in open(path, errors="replace"):
        w = line.split()
        if not w:
            continue
        if w[0] == "VAL":
            vals[w[1]] = [float(x) for x in w[2:]]
        elif w[0] == "CHECK":
            checks[w[1]] = w[2]
        elif w[0] in ("DONEPART", "SKIPPART"):
            done.add(w[1])
        elif w[0] == "FAILPART":
            failed.append(" ".join(w[1:])[:160])
    return vals, checks, done, failed


lv, lc, ld, lf = parse(sys.argv[1])
rv, rc, rd, rf = parse(sys.argv[2])
bad = []
if lf:
    bad.append("local: " + "; ".join(lf))
bad += ["through rgpud: " + f for f in rf]
bad += ["part %s not done" % p for p in sorted(ld - rd)]
bad += ["check %s false" % k for k, ok in sorted(rc.items()) if ok != "True"]
for k in lv:
    if k not in rv:
        bad.append("%s missing" % k)
        continue
    tol = 2e-2 if k.startswith("amp.") else 1e-4
    for a, b in zip(lv[k], rv[k]):
        if abs(a - b) > tol * max(abs(a), 1e-6):
            bad.append("%s %.6g vs local %.6g" % (k, b, a))
            break
if not ld:
    bad.append("the local run finished no part")
if bad:
    print("FAIL " + " | ".join(bad[:4]))
else:
    near = sorted(k for k in lv if lv[k] != rv[k])
    print("ok %d values (%d identical%s), %d checks, parts %s" %
          (len(rv), len(lv) - len(near), "; within tolerance: " + " ".join(near) if near else "", len(rc),
           ",".join(sorted(rd))))

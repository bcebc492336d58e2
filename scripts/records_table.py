#!/usr/bin/env python3
"""Tables from `qada eval` records at fixed configurations (no interpolation).

    python3 scripts/records_table.py RECORDS[,RECORDS...] --lengths 1024,4096,8192 \
        --configs window,static:0.75,oracle@mass:0.8,approx-current@mass:0.8

Prints two Markdown tables:
- per task, accuracy averaged over the samples of the comparable lengths (dense >= 0.5 there,
  the gate `qada eval` applies), with the K/V bytes a step reads relative to dense; then the
  worst-case drop from dense over those tasks and the mean bytes;
- fidelity pooled over the lengths: top-1 agreement, KL a token, K/V bytes relative to dense.

A configuration is METHOD or METHOD:PARAMETER (tau or alpha) as in the records; where files
overlap, the first record of a (task, length, sample, method, parameter) counts.

`--where FIELD=VALUE` (repeatable) keeps the records whose run has that value: FIELD one of
the run's fields (commit, version, cpu, cpu_family, cpu_model, threads, activations, kv);
`FIELD~TEXT` keeps those whose value contains TEXT. Records written before records named
their run have no run and are left out by any `--where`.
"""

import argparse
import json
from collections import defaultdict


def mean(xs):
    return sum(xs) / len(xs)


def matches(r, wheres):
    """Whether record `r`'s run passes every FIELD=VALUE or FIELD~TEXT of `wheres`."""
    run = r.get("run") or {}
    for w in wheres:
        field, op, want = w.partition("~") if "~" in w else w.partition("=")
        if not op:
            raise SystemExit(f"--where {w!r}: write FIELD=VALUE or FIELD~TEXT")
        have = run.get(field)
        if have is None:
            return False
        have = str(have)
        if (op == "=" and have != want) or (op == "~" and want not in have):
            return False
    return True


def load(paths, wheres=()):
    seen, out = set(), []
    for path in paths.split(","):
        for line in open(path):
            r = json.loads(line)
            if not matches(r, wheres):
                continue
            p = "-" if r["parameter"] is None else "%g" % r["parameter"]
            key = (r["task"], r["length"], r["sample"], r["method"], p)
            if key not in seen:
                seen.add(key)
                out.append((r, (r["method"], p)))
    return out


def config(c):
    m, _, p = c.partition(":")
    return (m, p or "-")


def name(cfg):
    return cfg[0] if cfg[1] == "-" else f"{cfg[0]} {cfg[1]}"


def accuracy_table(recs, lengths, configs):
    # (config, task, length) -> [(accuracy, bytes)] over samples
    cells = defaultdict(list)
    for r, cfg in recs:
        if r["length"] in lengths and "accuracy" in r["sums"]:
            cells[(cfg, r["task"], r["length"])].append(
                (r["sums"]["accuracy"] / r["units"], r["kv_bytes"] / r["dense_kv_bytes"])
            )
    dense = ("dense", "-")
    tasks = sorted({t for (c, t, _) in cells if c == dense}, key=TASK_ORDER.index)
    comparable = {
        t: [L for L in lengths if cells.get((dense, t, L)) and mean([a for a, _ in cells[(dense, t, L)]]) >= 0.5]
        for t in tasks
    }
    tasks = [t for t in tasks if comparable[t]]
    print("comparable lengths: " + "; ".join(f"{t} {comparable[t]}" for t in tasks) + "\n")
    print("| method | " + " | ".join(tasks) + " | worst-case drop | mean bytes |")
    print("|" + "---|" * (len(tasks) + 3))
    for cfg in [dense] + configs:
        row, drops, all_bytes = [], [], []
        for t in tasks:
            got = [x for L in comparable[t] for x in cells.get((cfg, t, L), [])]
            want = [x for L in comparable[t] for x in cells[(dense, t, L)]]
            if len(got) != len(want):
                row.append("(%d of %d)" % (len(got), len(want)))
                continue
            acc, byt = mean([a for a, _ in got]), mean([b for _, b in got])
            drops.append(mean([a for a, _ in want]) - acc)
            all_bytes += [b for _, b in got]
            row.append("%.2f (%.2fx)" % (acc, byt))
        tail = "%.2f | %.2fx" % (max(drops), mean(all_bytes)) if len(drops) == len(tasks) else "- | -"
        print(f"| {name(cfg)} | " + " | ".join(row) + f" | {tail} |")


def fidelity_table(recs, lengths, configs):
    sums = defaultdict(lambda: defaultdict(float))
    for r, cfg in recs:
        if r["task"] == "fidelity" and r["length"] in lengths:
            s = sums[cfg]
            for k in ("top1_agreement", "kl"):
                s[k] += r["sums"][k]
            s["units"] += r["units"]
            s["kv"] += r["kv_bytes"]
            s["dense_kv"] += r["dense_kv_bytes"]
    if not sums:
        return
    print("\n| method | top-1 agreement | KL a token | K/V bytes |\n|---|---|---|---|")
    for cfg in [("dense", "-")] + configs:
        s = sums.get(cfg)
        if s:
            print(
                "| %s | %.3f | %.4f | %.2fx |"
                % (name(cfg), s["top1_agreement"] / s["units"], s["kl"] / s["units"], s["kv"] / s["dense_kv"])
            )


TASK_ORDER = ["passkey", "niah-single", "niah-multikey", "niah-multivalue", "niah-multiquery", "vt", "cwe", "fwe"]

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records")
    ap.add_argument("--lengths", required=True)
    ap.add_argument("--configs", required=True)
    ap.add_argument("--where", action="append", default=[], metavar="FIELD=VALUE")
    a = ap.parse_args()
    recs = load(a.records, a.where)
    lengths = [int(x) for x in a.lengths.split(",")]
    configs = [config(c) for c in a.configs.split(",")]
    accuracy_table(recs, lengths, configs)
    fidelity_table(recs, lengths, configs)

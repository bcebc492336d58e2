#!/usr/bin/env python3
"""Where a `qada eval` sweep's time went, from the `times.jsonl` of its folders.

    python3 scripts/times_table.py runs/qwen/times.jsonl [runs/qwen/shard-*/times.jsonl ...]

Each line of `times.jsonl` is one (task, length) unit as it finished: its wall time, its dense
prefills (for fidelity, the dense reference: prefill and teacher-forced steps) and their time,
and the (prompt, configuration) items it ran, dense included. Prints a Markdown table per
prompt length: units, prompts prefilled, seconds per prefill, the other items and seconds per
item, the total and the prefills' share of it; then the whole. Lines repeated across files
(a merged folder and its shards) count once. `--where FIELD=VALUE` or `FIELD~TEXT` keeps the
lines whose run has it, as in records_table.py.
"""

import argparse
import json
from collections import defaultdict

from records_table import matches  # the same --where as records_table.py


def read(paths, wheres):
    seen, lines = set(), []
    for p in paths:
        with open(p) as f:
            for raw in f:
                raw = raw.strip()
                if not raw or raw in seen:
                    continue
                seen.add(raw)
                line = json.loads(raw)
                if matches(line, wheres):
                    lines.append(line)
    return lines


def hms(s):
    s = round(s)
    return f"{s // 3600} h {s % 3600 // 60:02d} min" if s >= 3600 else f"{s // 60} min {s % 60:02d} s"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="times.jsonl files")
    ap.add_argument("--where", action="append", default=[], help="FIELD=VALUE or FIELD~TEXT")
    a = ap.parse_args()
    lines = read(a.files, a.where)
    if not lines:
        raise SystemExit("no lines: check the files and --where")
    by_len = defaultdict(lambda: defaultdict(float))
    for t in lines:
        row = by_len[t["length"]]
        row["units"] += 1
        row["prefills"] += t["prefills"]
        row["prefill_seconds"] += t["prefill_seconds"]
        row["others"] += t["items"] - t["prefills"]
        row["seconds"] += t["seconds"]
    print("| length | units | prefills | s a prefill | other items | s an item | total | prefills' share |")
    print("|---|---|---|---|---|---|---|---|")
    whole = defaultdict(float)
    for length in sorted(by_len):
        r = by_len[length]
        for k, v in r.items():
            whole[k] += v
        rest = r["seconds"] - r["prefill_seconds"]
        per_prefill = r["prefill_seconds"] / r["prefills"] if r["prefills"] else 0.0
        per_item = rest / r["others"] if r["others"] else 0.0
        print(
            f"| {length} | {int(r['units'])} | {int(r['prefills'])} | {per_prefill:.1f} | "
            f"{int(r['others'])} | {per_item:.2f} | {hms(r['seconds'])} | "
            f"{r['prefill_seconds'] / r['seconds']:.0%} |"
        )
    print(
        f"| all | {int(whole['units'])} | {int(whole['prefills'])} | | {int(whole['others'])} | | "
        f"{hms(whole['seconds'])} | {whole['prefill_seconds'] / whole['seconds']:.0%} |"
    )
    runs = {json.dumps(t.get("run"), sort_keys=True) for t in lines}
    for r in sorted(runs):
        print(f"\nrun: {r}")


if __name__ == "__main__":
    main()

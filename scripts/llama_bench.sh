#!/usr/bin/env bash
# Build llama.cpp's llama-bench, the peer for speed, from the sources vendored in the PyPI sdist
# llama-cpp-python 0.3.36 (about 15 minutes on 2 cores, once; outside CI). Prints its path.
#   bash scripts/llama_bench.sh [BUILD_DIR]     (default: ../llama-bench-build beside the repo)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir="$(realpath -m "${1:-../llama-bench-build}")"
bin="$dir/build/bin/llama-bench"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
mkdir -p "$dir"
if [ ! -d "$dir/src" ]; then
  pip download --no-deps --no-binary llama-cpp-python llama-cpp-python==0.3.36 -d "$dir" >&2
  mkdir -p "$dir/src"
  tar -xzf "$dir"/llama_cpp_python-0.3.36.tar.gz -C "$dir/src" --strip-components=1
fi
if ! command -v cmake >/dev/null; then
  python3 -m venv "$dir/venv" >&2
  "$dir/venv/bin/pip" install --quiet cmake >&2
  export PATH="$dir/venv/bin:$PATH"
fi
cmake -S "$dir/src/vendor/llama.cpp" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >&2
cmake --build "$dir/build" --target llama-bench -j "$(nproc)" >&2
echo "$bin"

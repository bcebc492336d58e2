#!/usr/bin/env bash
# Build llama.cpp's llama-bench, the peer for speed, from the sources vendored in the PyPI sdist
# llama-cpp-python 0.3.36 (about 15 minutes on 2 cores per build, once; outside CI). Prints the
# path of each build, one per line: the native build (GGML_NATIVE=ON) and, on a CPU with AMX,
# also one without AMX (GGML_NATIVE=OFF, every other SIMD feature the CPU has turned on): on
# such hosts the native build crashes on batched prompts (issue 35), so compare against the
# best of the builds that run.
#   bash scripts/llama_bench.sh [BUILD_DIR]     (default: ../llama-bench-build beside the repo)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir="$(realpath -m "${1:-../llama-bench-build}")"
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
common=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF)
# build NAME CMAKE-FLAGS...: one build folder, llama-bench only, skipped when already built
build() {
  local name="$1"
  shift
  local bin="$dir/$name/bin/llama-bench"
  if [ ! -x "$bin" ]; then
    cmake -S "$dir/src/vendor/llama.cpp" -B "$dir/$name" "${common[@]}" "$@" >&2
    cmake --build "$dir/$name" --target llama-bench -j "$(nproc)" >&2
  fi
  echo "$bin"
}
build build -DGGML_NATIVE=ON
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
if [[ "$flags" == *" amx_tile "* ]]; then
  on() { [[ "$flags" == *" $1 "* ]] && echo ON || echo OFF; }
  build build-noamx -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2="$(on avx2)" \
    -DGGML_FMA="$(on fma)" -DGGML_F16C="$(on f16c)" -DGGML_BMI2="$(on bmi2)" \
    -DGGML_AVX_VNNI="$(on avx_vnni)" -DGGML_AVX512="$(on avx512f)" \
    -DGGML_AVX512_VBMI="$(on avx512vbmi)" -DGGML_AVX512_VNNI="$(on avx512_vnni)" \
    -DGGML_AVX512_BF16="$(on avx512_bf16)" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
    -DGGML_AMX_BF16=OFF
fi

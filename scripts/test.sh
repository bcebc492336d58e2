#!/usr/bin/env bash
# The whole test suite: fetch the real model and corpus, then format check, clippy with
# warnings as errors, every test of the workspace (end-to-end tests use the real model), the
# doc examples, the docs without warnings, the researcher's example on its own keys, and the
# Python package (a wheel built and installed into a virtual environment, then pytest), and
# `qada serve` against the `openai` Python package.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh --model qwen2.5-0.5b --model gemma3-270m
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --all-targets
cargo test --workspace --doc
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
# The test profile (opt-level 3) reuses the test build's dependencies.
cargo run --quiet --profile test -p qada-core --example own_keys > /dev/null
bash scripts/test_python.sh
bash scripts/test_serve.sh

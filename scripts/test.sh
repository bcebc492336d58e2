#!/usr/bin/env bash
# The whole test suite: fetch the real model and corpus, then format check, clippy with
# warnings as errors, and every test of the workspace (end-to-end tests use the real model).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --all-targets

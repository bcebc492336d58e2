#!/usr/bin/env bash
# The main job: fetch the model and corpus, build in release mode, and run what exists.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
cargo build --release
# Until `qada generate` exists, run the library benches of what is built.
cargo bench -p qada-kv --bench append -- --quick

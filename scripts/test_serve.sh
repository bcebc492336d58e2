#!/usr/bin/env bash
# `qada serve` against the real `openai` Python package: chat and completions, streamed and
# not, greedy output equal to `qada generate`, the prefix cache, concurrency, a client that
# leaves mid-stream, and hostile requests (qada-cli/tests/serve). The server is the test-profile
# build that `cargo test --workspace` leaves in target/debug; the virtual environment is the
# one scripts/test_python.sh makes (or makes it here).
# A run that collects no test fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/venv.sh
"$venv/bin/python" -m pip install --quiet "openai==2.8.1" pytest
# a no-op after `cargo test --workspace --all-targets` (scripts/test.sh runs it first)
cargo build --profile test --quiet -p qada-cli
status=0
QADA_CLI=$target/debug/qada-cli "$venv/bin/python" -m pytest qada-cli/tests/serve -q \
    -p no:cacheprovider || status=$?
if [ "$status" -eq 5 ]; then
    echo "test_serve.sh: pytest collected no tests in qada-cli/tests/serve: that is a failure" >&2
    exit 1
fi
exit "$status"

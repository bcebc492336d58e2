#!/usr/bin/env bash
# The Python package qada (qada-py/): build its wheel with maturin (release profile, as
# `pip install` does), install it into a virtual environment with numpy and pytest from PyPI,
# run the pytest suite. The tests compare with qada-cli: the test-profile build that
# `cargo test --workspace` leaves in target/debug (opt-level 3, the same numbers), so the
# script adds one release build of the library crates, not of the CLI's too.
# A run that collects no test fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/venv.sh
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "maturin>=1.7,<2" numpy pytest
# a no-op after `cargo test --workspace --all-targets` (scripts/test.sh runs it first)
cargo build --profile test --quiet -p qada-cli
wheels=$target/wheels-qada-py
rm -rf "$wheels"
"$venv/bin/maturin" build --release --quiet -m qada-py/Cargo.toml --out "$wheels"
"$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps "$wheels"/qada-*.whl
status=0
QADA_CLI=$target/debug/qada-cli "$venv/bin/python" -m pytest qada-py/tests -q -p no:cacheprovider \
    || status=$?
if [ "$status" -eq 5 ]; then
    echo "test_python.sh: pytest collected no tests in qada-py/tests: that is a failure" >&2
    exit 1
fi
exit "$status"

#!/usr/bin/env bash
# The Python package qada (qada-py/): build its wheel with maturin, install it into a virtual
# environment with numpy and pytest from PyPI, run the pytest suite. The wheel is built in the
# dev profile, whose settings the test profile inherits (Cargo.toml: opt-level 3), so its
# library crates are the ones `cargo test --workspace` built in target/debug; a release wheel
# (what `pip install` makes) was one more optimized build of them all, for the same numbers.
# The tests compare with qada-cli, the test-profile build left in target/debug.
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
"$venv/bin/maturin" build --profile dev --quiet -m qada-py/Cargo.toml --out "$wheels"
"$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps "$wheels"/qada-*.whl
status=0
QADA_CLI=$target/debug/qada-cli "$venv/bin/python" -m pytest qada-py/tests -q -p no:cacheprovider \
    || status=$?
if [ "$status" -eq 5 ]; then
    echo "test_python.sh: pytest collected no tests in qada-py/tests: that is a failure" >&2
    exit 1
fi
exit "$status"

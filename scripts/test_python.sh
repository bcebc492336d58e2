#!/usr/bin/env bash
# The Python package qada (qada-py/): build its wheel with maturin (release profile, whose
# dependency artifacts the release build of qada-cli shares: the tests compare with it),
# install it into a virtual environment with numpy and pytest from PyPI, run the pytest suite.
# A run that collects no test fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target=${CARGO_TARGET_DIR:-target}
venv=${QADA_VENV:-$target/venv-py}
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" || {
        echo "test_python.sh: cannot create a virtual environment: install Python's venv" \
             "module (Debian/Ubuntu: apt-get install python3-venv)" >&2
        exit 1
    }
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "maturin>=1.7,<2" numpy pytest
cargo build --release --quiet -p qada-cli
wheels=$target/wheels-qada-py
rm -rf "$wheels"
"$venv/bin/maturin" build --release --quiet -m qada-py/Cargo.toml --out "$wheels"
"$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps "$wheels"/qada-*.whl
status=0
QADA_CLI=$target/release/qada-cli "$venv/bin/python" -m pytest qada-py/tests -q -p no:cacheprovider \
    || status=$?
if [ "$status" -eq 5 ]; then
    echo "test_python.sh: pytest collected no tests in qada-py/tests: that is a failure" >&2
    exit 1
fi
exit "$status"

# Sourced by test_python.sh and test_serve.sh (from the repository's root): sets `target` and
# `venv`, the tests' virtual environment, and makes it when it is missing.
target=${CARGO_TARGET_DIR:-target}
venv=${QADA_VENV:-$target/venv-py}
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" || {
        echo "$(basename "$0"): cannot create a virtual environment: install Python's venv" \
             "module (Debian/Ubuntu: apt-get install python3-venv)" >&2
        exit 1
    }
fi

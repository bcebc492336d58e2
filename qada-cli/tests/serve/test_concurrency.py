"""Many clients at once, a client that leaves mid-stream, and a full queue."""

import http.client
import json
import threading
import time
import urllib.parse

import openai

from conftest import MODEL


def test_eight_concurrent_streams_all_complete(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    results, errors = [None] * 8, []

    def run(i):
        try:
            stream = client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": f"Count from {i} to {i + 20}."}],
                max_tokens=16,
                temperature=0,
                stream=True,
            )
            chunks = list(stream)
            results[i] = (
                "".join(c.choices[0].delta.content or "" for c in chunks),
                chunks[-1].choices[0].finish_reason,
            )
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    for text, finish in results:
        assert text and finish in ("stop", "length")
    server.wait_for(lambda m: m["qada_active_sessions"] == 0 and m["qada_queued_requests"] == 0)


def open_stream(url, body, headers=None):
    """Start a streaming request on a raw connection; returns it after the first event."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    conn.request(
        "POST",
        "/v1/completions",
        body=json.dumps(body),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.readline().startswith(b"data: ")
    return conn, resp


def test_a_client_that_leaves_mid_stream_leaves_no_session(server):
    before = server.metrics()["qada_client_disconnects_total"]
    conn, resp = open_stream(
        server.url,
        {"prompt": "Once upon a time", "max_tokens": 4000, "temperature": 0, "stream": True},
    )
    server.wait_for(lambda m: m["qada_active_sessions"] >= 1)
    # the socket closes once the response's file on it is closed too
    resp.close()
    conn.close()
    m = server.wait_for(lambda m: m["qada_active_sessions"] == 0, timeout=60)
    assert m["qada_client_disconnects_total"] == before + 1
    # the server still answers
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    r = client.completions.create(model=MODEL, prompt="Hello", max_tokens=2)
    assert r.usage.completion_tokens >= 1


def test_a_full_queue_answers_429_with_retry_after(strict):
    key = {"Authorization": "Bearer sekrit"}
    client = openai.OpenAI(base_url=strict.url + "/v1", api_key="sekrit", max_retries=0)
    long = {"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "stream": True}
    # one running, one waiting
    conn, resp = open_stream(strict.url, long, key)
    waiting = threading.Thread(
        target=lambda: client.completions.create(model=MODEL, prompt="Hi", max_tokens=2),
        daemon=True,
    )
    waiting.start()
    strict.wait_for(lambda m: m["qada_queued_requests"] == 1, headers=key)
    try:
        client.completions.create(model=MODEL, prompt="Hi", max_tokens=2)
        raise AssertionError("a third request was taken with a full queue")
    except openai.RateLimitError as e:
        assert e.response.status_code == 429
        assert int(e.response.headers["retry-after"]) > 0
    resp.close()
    conn.close()
    waiting.join(timeout=120)
    strict.wait_for(
        lambda m: m["qada_active_sessions"] == 0 and m["qada_queued_requests"] == 0, headers=key
    )
    time.sleep(0.1)


def test_a_client_that_leaves_before_a_whole_answer_stops_it_too(server):
    before = server.metrics()["qada_client_disconnects_total"]
    u = urllib.parse.urlparse(server.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    body = {"prompt": "Once upon a time", "max_tokens": 4000, "temperature": 0}
    conn.request("POST", "/v1/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    server.wait_for(lambda m: m["qada_active_sessions"] >= 1)
    conn.close()
    m = server.wait_for(lambda m: m["qada_active_sessions"] == 0, timeout=60)
    assert m["qada_client_disconnects_total"] == before + 1

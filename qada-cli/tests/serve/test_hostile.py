"""Bad requests get a 4xx in OpenAI's error shape, never a panic or a hung connection; the
server answers normally afterwards."""

import http.client
import json
import urllib.parse

import pytest

from conftest import MODEL

KEY = {"Authorization": "Bearer sekrit"}


def post(url, path, body, headers=None):
    """POST raw bytes; returns (status, parsed JSON body, headers)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
    r = conn.getresponse()
    raw = r.read()
    conn.close()
    return r.status, json.loads(raw) if raw else None, r.headers


CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize(
    "path, body, status, param",
    [
        (CHAT, b"{not json", 400, None),
        (CHAT, b'{"messages": "\xff\xfe"}', 400, None),
        (CHAT, b"[1, 2, 3]", 400, None),
        (CHAT, {"messages": MSG, "max_tokens": "ten"}, 400, "max_tokens"),
        (CHAT, {"messages": MSG, "max_tokens": 0}, 400, "max_tokens"),
        (CHAT, {"messages": MSG, "max_tokens": 10**12}, 400, "max_tokens"),
        (CHAT, {"messages": MSG, "temperature": "hot"}, 400, "temperature"),
        (CHAT, {"messages": MSG, "stream": 1}, 400, "stream"),
        (CHAT, {"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
        (CHAT, {"messages": MSG, "model": "gpt-4"}, 404, None),
        (CHAT, {"messages": MSG, "qada": {"tau": 1.5, "criterion": "approx"}}, 400, "qada"),
        (CHAT, {"messages": MSG, "qada": {"kv": "int4"}}, 400, "qada"),
        ("/v1/completions", {"prompt": "word " * 600}, 400, "messages"),
        ("/v1/completions", {"prompt": [10**9]}, 400, "prompt"),
        ("/v1/completions", {"prompt": "a", "max_tokens": 600}, 400, "max_tokens"),
        ("/v1/nothing", {}, 404, None),
    ],
)
def test_bad_requests_get_a_4xx_in_openais_shape(strict, path, body, status, param):
    got, err, _ = post(strict.url, path, body, KEY)
    assert got == status, err
    assert set(err["error"]) == {"message", "type", "param", "code"}
    assert err["error"]["message"]
    if param is not None:
        assert err["error"]["param"] == param


def test_an_overlong_prompt_says_context_length_exceeded(strict):
    _, err, _ = post(strict.url, "/v1/completions", {"prompt": "word " * 600}, KEY)
    assert err["error"]["code"] == "context_length_exceeded"
    assert "512" in err["error"]["message"]


def test_a_request_that_could_pass_the_cache_bound_is_refused_with_the_sizes(strict):
    # an f32 cache doubles the bytes of a token: 401 tokens need 18.5 MB of the 12 allowed
    body = {"prompt": "a", "max_tokens": 400, "qada": {"kv": "f32", "criterion": "dense"}}
    got, err, _ = post(strict.url, "/v1/completions", body, KEY)
    assert got == 400 and err["error"]["code"] == "cache_limit_exceeded", err
    assert "--cache-mb" in err["error"]["message"] and "12.0 MB" in err["error"]["message"]


def test_a_body_over_the_limit_is_413(strict):
    got, err, _ = post(strict.url, CHAT, {"messages": [{"role": "user", "content": "x" * 50_000}]}, KEY)
    assert got == 413
    assert err["error"]["type"] == "invalid_request_error"


def test_the_api_key_is_required(strict):
    got, err, _ = post(strict.url, CHAT, {"messages": MSG})
    assert got == 401 and err["error"]["code"] == "invalid_api_key"
    got, _, _ = post(strict.url, CHAT, {"messages": MSG}, {"Authorization": "Bearer wrong"})
    assert got == 401


def test_the_server_still_answers_after_all_that(strict):
    got, body, _ = post(strict.url, CHAT, {"messages": MSG, "max_tokens": 3, "model": MODEL}, KEY)
    assert got == 200, body
    assert body["usage"]["completion_tokens"] >= 1

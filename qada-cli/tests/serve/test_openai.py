"""`qada serve` through the real `openai` client: chat and completions, streamed and not, the
same greedy tokens as `qada generate`, the prefix cache, qada's fields and accounting."""

import urllib.request

import openai
import pytest

from conftest import MODEL, document, generate_json

QUESTION = "What is the capital of France? Answer in one word."


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def test_models_and_health(server, client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    with urllib.request.urlopen(server.url + "/health", timeout=10) as r:
        assert r.status == 200


def test_chat_greedy_equals_generate_streamed_or_not(client):
    want = generate_json("--prompt", QUESTION, "--max-new-tokens", "12")
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=12,
        temperature=0,
    )
    assert r.choices[0].message.content == want["text"]
    assert r.usage.prompt_tokens == len(want["prompt_ids"])
    assert r.usage.completion_tokens == len(want["generated_ids"])
    assert r.choices[0].finish_reason == ("length" if len(want["generated_ids"]) == 12 else "stop")
    # qada's accounting beside the counts
    qada = r.model_extra["usage"]["qada"] if "usage" in (r.model_extra or {}) else r.usage.model_extra["qada"]
    assert qada["criterion"] == want["criterion"]
    assert 0.0 <= qada["kv_bytes_ratio"]

    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == want["text"]
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [r.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens


def test_completion_greedy_equals_generate_raw(client):
    prompt = "The three primary colors are"
    want = generate_json("--raw", "--prompt", prompt, "--max-new-tokens", "10")
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=10, temperature=0)
    assert r.choices[0].text == want["text"]
    stream = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=10, temperature=0, stream=True
    )
    assert "".join(c.choices[0].text for c in stream) == want["text"]


def test_a_shared_prefix_comes_from_the_cache_and_changes_no_token(server, client):
    doc = document()
    first = doc + "\n\nThe main topic of this message is"
    second = doc + "\n\nThe author of this message is"
    before = server.metrics()["qada_cached_prompt_tokens_total"]
    a = client.completions.create(model=MODEL, prompt=first, max_tokens=8, temperature=0)
    assert a.usage.prompt_tokens > 2000
    b = client.completions.create(model=MODEL, prompt=second, max_tokens=8, temperature=0)
    assert b.usage.completion_tokens > 0
    cached = b.usage.prompt_tokens_details.cached_tokens
    # marks sit at 1, 2, 4 ... blocks of 512 and at the last block before the end: the
    # document's 2,000-odd shared tokens give at least 1,024
    assert cached >= 1024, b.usage
    assert cached % 512 == 0 and cached < b.usage.prompt_tokens
    assert server.metrics()["qada_cached_prompt_tokens_total"] - before == cached
    # the same tokens as a cold run of the second prompt
    want = generate_json("--raw", "--prompt", second, "--max-new-tokens", "8")
    assert b.choices[0].text == want["text"]
    # and the same prompt again: from the last mark before its end
    c = client.completions.create(model=MODEL, prompt=second, max_tokens=8, temperature=0)
    assert c.usage.prompt_tokens_details.cached_tokens == (c.usage.prompt_tokens - 1) // 512 * 512
    assert c.choices[0].text == want["text"]


def test_qada_fields_choose_the_setting_and_are_reported(client):
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=4,
        temperature=0,
        extra_body={"qada": {"criterion": "approx", "tau": 0.7, "kv": "q8"}},
    )
    qada = r.usage.model_extra["qada"]
    assert (qada["criterion"], qada["tau"], qada["kv"]) == ("approx", 0.7, "q8")
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": QUESTION}],
            max_tokens=4,
            extra_body={"qada": {"criterion": "fastest"}},
        )
    assert e.value.body["param"] == "qada"


def test_sampling_with_a_seed_repeats(client):
    ask = dict(
        model=MODEL,
        messages=[{"role": "user", "content": "Tell me a story."}],
        max_tokens=16,
        temperature=0.9,
        top_p=0.95,
        seed=11,
    )
    a = client.chat.completions.create(**ask).choices[0].message.content
    b = client.chat.completions.create(**ask).choices[0].message.content
    assert a == b


def test_stop_strings_end_the_text_before_them(client):
    r = client.completions.create(
        model=MODEL, prompt="1, 2, 3, 4,", max_tokens=20, temperature=0, stop=[" 7"]
    )
    assert r.choices[0].finish_reason == "stop"
    assert " 7" not in r.choices[0].text

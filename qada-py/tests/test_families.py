"""qada.Model on every architecture of the synthetic references (`../shared/reference/
synthetic/`, tiny random-weight GGUF files with what HF computes on them): the prompts'
token ids and the 24 greedy tokens equal HF's, through the Python bindings."""

import json
import pathlib

import pytest

import qada

REPO = pathlib.Path(__file__).resolve().parents[2]
SYNTHETIC = REPO.parent / "shared" / "reference" / "synthetic"
NAMES = sorted(p.stem for p in SYNTHETIC.glob("*.gguf"))

pytestmark = pytest.mark.skipif(
    not NAMES, reason=f"no synthetic references in {SYNTHETIC}"
)


def expected(prompt):
    """What the GGUF file means for this prompt: the second HF run where the file holds one
    (see qada-model/tests/synthetic_families.rs)."""
    for variant in ("hf_gguf_equivalent", "hf_with_long_factors"):
        if variant in prompt:
            return prompt[variant]
    return prompt


@pytest.mark.parametrize("name", NAMES)
def test_ids_and_greedy_tokens_are_hfs(name):
    ref = json.loads((SYNTHETIC / f"{name}.json").read_text())
    model = qada.Model(str(SYNTHETIC / f"{name}.gguf"), weights="f32")
    for prompt in ref["prompts"]:
        ids = model.tokenize(prompt["text"])
        assert ids == prompt["ids"], (name, prompt["name"])
        want = expected(prompt)["greedy"]
        # the 128-position files hold the long prompt and 24 tokens only past their context,
        # as HF ran them: the first steps that fit are compared
        room = model.context_length - len(ids)
        n = min(24, room)
        if n <= 0:
            continue
        got = model.generate(ids, max_tokens=n, ignore_eos=True, kv="f32").ids
        # a step whose HF margin is below 1e-3 may go either way
        for i, (a, b) in enumerate(zip(got, want["ids"][:n])):
            if a != b:
                assert want["margins"][i] < 1e-3, (name, prompt["name"], i)
                break

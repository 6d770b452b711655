"""Loads an export with transformers and runs it, the way a user would.

    python3 tests/reference/check_transformers.py EXPORT_DIR IDS.safetensors OUT.safetensors

AutoModelForCausalLM.from_pretrained(EXPORT_DIR) — with trust_remote_code for the custom
code of a low-rank export, without it for a full-rank (Llama) one, which must load as
LlamaForCausalLM — computes the logits of `ids` ([B, S]), saved as float64 `logits`
[B, S, V] in OUT. It also checks that generate() continues the first row greedily with
the tokens the logits' argmax chain gives, and, when the export has a tokenizer, that
AutoTokenizer loads it. Prints one JSON line; exits non-zero on any failure.
"""

import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    export_dir, ids_path, out_path = argv
    with open(os.path.join(export_dir, "config.json")) as f:
        model_type = json.load(f)["model_type"]
    custom = model_type != "llama"
    model = AutoModelForCausalLM.from_pretrained(export_dir, trust_remote_code=custom, dtype=torch.float32)
    model.eval()
    cls = type(model).__name__
    if not custom and cls != "LlamaForCausalLM":
        raise SystemExit(f"a full-rank export loaded as {cls}, not LlamaForCausalLM")
    ids = next(iter(load_file(ids_path).values())).to(torch.int64)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
        # Greedy continuation two ways: generate(), and the argmax chain of full forwards.
        prompt, steps = ids[:1], 4
        chain = prompt
        for _ in range(steps):
            nxt = model(input_ids=chain).logits[:, -1].argmax(-1, keepdim=True)
            chain = torch.cat([chain, nxt], dim=1)
        eos = getattr(model.config, "eos_token_id", None)
        gen = model.generate(prompt, max_new_tokens=steps, do_sample=False, eos_token_id=None, pad_token_id=eos)
    if not torch.equal(gen[:, : chain.shape[1]], chain[:, : gen.shape[1]]):
        raise SystemExit(f"generate() gave {gen.tolist()}, the argmax chain {chain.tolist()}")
    tokenizer = None
    if os.path.exists(os.path.join(export_dir, "tokenizer.json")):
        tok = AutoTokenizer.from_pretrained(export_dir, trust_remote_code=custom)
        tokenizer = {"class": type(tok).__name__, "eos": tok.eos_token, "hello": tok("hello world")["input_ids"]}
    save_file({"logits": logits.to(torch.float64).contiguous()}, out_path)
    print(json.dumps({"class": cls, "generated": gen[0].tolist(), "tokenizer": tokenizer}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Runs the reference forward on an exported Hugging Face-style folder.

    python3 tests/reference/check_export.py EXPORT_DIR IDS.safetensors OUT.safetensors

EXPORT_DIR holds config.json and model.safetensors as described in docs/MODEL.md (Export).
IDS.safetensors holds `ids` (integer [B, S]; a file with a single tensor may name it anything).
The parameters are loaded, converted to float64 and checked against the names and shapes the
config implies; OUT.safetensors receives `logits` (float64 [B, S, V]) with the model config dict
as JSON in the metadata key `config`. Exits non-zero with a message on any mismatch.
"""

import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file

# The reference model lives with the code an export ships (crates/hf/src/export/hf).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "crates", "hf", "src", "export", "hf"))
import boost_ref  # noqa: E402

ExportError = boost_ref.ExportError
config_from_export = boost_ref.config_from_export


def export_config_json(cfg):
    """config.json contents for a model config dict (the inverse of config_from_export)."""
    cfg = boost_ref.normalize_config(cfg)
    out = {
        "architectures": ["LlamaForCausalLM"],
        "boost_arch": cfg["arch"],
        "bottleneck_activation": "silu" if boost_ref.phi_is_silu(cfg) else "identity",
        "only_lr_act": cfg["only_lr_act"],
        "outer_silu": boost_ref.outer_silu(cfg),
        "hidden_size": cfg["d"],
        "intermediate_size": cfg["d_ff"],
        "num_hidden_layers": cfg["layers"],
        "num_attention_heads": cfg["heads"],
        "num_key_value_heads": cfg["kv_heads"],
        "rank": cfg["rank"],
        "vocab_size": cfg["vocab"],
        "rms_norm_eps": cfg["norm_eps"],
        "rope_theta": cfg["rope_theta"],
        "tie_word_embeddings": cfg["tie_embeddings"],
    }
    if cfg["arch"] == "lax":
        a, b = boost_ref.kron_factors(cfg)
        out.update(
            lax_gate=cfg["lax"]["gate"],
            lax_kron_a=a,
            lax_kron_b=b,
            lax_ln_eps=cfg["lax"]["ln_eps"],
        )
    return out


def load_export(export_dir):
    """(cfg, params in float64) of an export folder, the parameter set checked against cfg."""
    with open(os.path.join(export_dir, "config.json")) as f:
        cfg = config_from_export(json.load(f))
    raw = load_file(os.path.join(export_dir, "model.safetensors"))
    shapes = boost_ref.param_shapes(cfg)
    missing = [k for k in shapes if k not in raw]
    extra = [k for k in raw if k not in shapes]
    wrong = [
        f"{k}: {tuple(raw[k].shape)} (want {shapes[k]})"
        for k in shapes
        if k in raw and tuple(raw[k].shape) != shapes[k]
    ]
    if missing or extra or wrong:
        lines = []
        if missing:
            lines.append("missing: " + ", ".join(missing))
        if extra:
            lines.append("unexpected: " + ", ".join(extra))
        if wrong:
            lines.append("wrong shape: " + "; ".join(wrong))
        raise ExportError("model.safetensors does not match config.json:\n  " + "\n  ".join(lines))
    not_float = [k for k in shapes if not raw[k].is_floating_point()]
    if not_float:
        raise ExportError("non-float parameters: " + ", ".join(not_float))
    params = {k: raw[k].to(torch.float64) for k in shapes}
    return cfg, params


def load_ids(path):
    tensors = load_file(path)
    if "ids" in tensors:
        ids = tensors["ids"]
    elif len(tensors) == 1:
        ids = next(iter(tensors.values()))
    else:
        raise ExportError(f"{path} has no `ids` tensor (found {sorted(tensors)})")
    if ids.is_floating_point() or ids.dim() != 2:
        raise ExportError(f"ids must be an integer [B, S] tensor, got {ids.dtype} {tuple(ids.shape)}")
    return ids.to(torch.int64)


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    export_dir, ids_path, out_path = argv
    try:
        cfg, params = load_export(export_dir)
        ids = load_ids(ids_path)
        if ids.numel() and (ids.min() < 0 or ids.max() >= cfg["vocab"]):
            raise ExportError(f"ids outside [0, {cfg['vocab']})")
    except ExportError as e:
        print(f"check_export: {e}", file=sys.stderr)
        return 1
    with torch.no_grad():
        logits = boost_ref.forward(params, cfg, ids)
    save_file(
        {"logits": logits.contiguous()},
        out_path,
        metadata={"config": json.dumps(cfg, sort_keys=True)},
    )
    print(f"check_export: {cfg['arch']} model, logits {tuple(logits.shape)} -> {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

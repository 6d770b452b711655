"""Writes tests/fixtures/<case>.safetensors from the reference in boost_ref.py.

Run from anywhere: python3 tests/reference/make_fixtures.py [--out DIR] [--check]

Every file is float64 and deterministic (each case has its own fixed seed). It holds
`ids`, `targets` (int64 [B, S]), `param.<name>` for every parameter, `logits` [B, S, V],
`loss` [1], `grad.<name>` for every parameter and `grad.embed_out` (d loss / d x0, [B, S, d]),
with metadata `config` (JSON of the model config dict), `batch` and `seq`.

--check regenerates every case in memory and compares it with the files on disk instead of
writing them.
"""

import argparse
import json
import os
import sys

import torch
from safetensors.torch import load_file, safe_open, save_file

# The reference model lives with the code an export ships (crates/hf/src/export/hf).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "crates", "hf", "src", "export", "hf"))
import boost_ref  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "fixtures"))

LAX_DEFAULT = {"flavour": "cola", "gate": "dense", "kron_a": 0, "ln_eps": 1e-6}


def config(arch, **over):
    """The toy model config: V=67, d=32, heads=4, d_ff=48, r=8, layers=2, with overrides."""
    lax = dict(LAX_DEFAULT)
    lax.update(over.pop("lax", {}))
    c = {
        "arch": arch,
        "d": 32,
        "d_ff": 48,
        "layers": 2,
        "heads": 4,
        "kv_heads": 4,
        "rank": 8,
        "vocab": 67,
        "only_lr_act": False,
        "tie_embeddings": False,
        "rope_theta": 10000.0,
        "norm_eps": 1e-6,
        "lax": lax,
    }
    for k, v in over.items():
        if k not in c:
            raise KeyError(k)
        c[k] = v
    return c


# The dense cases and the 3-layer LaX cases use d=16 (head dim 4): at d=32 their float64
# parameters plus gradients alone would pass 270 KB. Some cases set non-default eps / θ so that
# a misplaced epsilon or a hard-coded constant changes the numbers visibly.
CASES = {
    "full": config("full", d=16),
    "full_gqa_tied": config(
        "full", d=16, kv_heads=2, tie_embeddings=True, rope_theta=500.0, norm_eps=1e-2
    ),
    "svd": config("svd"),
    "cola": config("cola", only_lr_act=False, norm_eps=1e-5),
    "cola_only_lr_act": config("cola", only_lr_act=True),
    "cola_gqa": config("cola", kv_heads=2),
    "lax_dense_cola": config(
        "lax", d=16, layers=3, lax={"flavour": "cola", "gate": "dense", "ln_eps": 1e-2}
    ),
    "lax_kron_svd": config(
        "lax",
        d=16,
        layers=3,
        norm_eps=1e-3,
        lax={"flavour": "svd", "gate": "kron", "kron_a": 2, "ln_eps": 1e-5},
    ),
}

BATCH = 2
SEQ = 8
BASE_SEED = 20240611


def build_case(index, cfg):
    """All tensors of one fixture, computed in float64."""
    g = torch.Generator().manual_seed(BASE_SEED + 1000 * index)
    params = boost_ref.init_params(cfg, generator=g, dtype=torch.float64, style="test")
    V = cfg["vocab"]
    ids = torch.randint(0, V, (BATCH, SEQ), generator=g, dtype=torch.int64)
    targets = torch.randint(0, V, (BATCH, SEQ), generator=g, dtype=torch.int64)

    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    logits, x0 = boost_ref.forward(leaves, cfg, ids, return_x0=True)
    x0.retain_grad()
    loss = boost_ref.loss(logits, targets)
    loss.backward()

    out = {"ids": ids, "targets": targets}
    for k, v in params.items():
        out[f"param.{k}"] = v
    out["logits"] = logits.detach()
    out["loss"] = loss.detach().reshape(1)
    for k, v in leaves.items():
        if v.grad is None:
            raise AssertionError(f"{k} got no gradient")
        out[f"grad.{k}"] = v.grad.detach()
    out["grad.embed_out"] = x0.grad.detach()
    return {k: v.contiguous() for k, v in out.items()}


def metadata(cfg):
    return {"config": json.dumps(cfg, sort_keys=True), "batch": str(BATCH), "seq": str(SEQ)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    os.makedirs(args.out, exist_ok=True)
    failed = False
    for i, (name, cfg) in enumerate(CASES.items()):
        tensors = build_case(i, cfg)
        path = os.path.join(args.out, f"{name}.safetensors")
        if args.check:
            on_disk = load_file(path)
            with safe_open(path, "pt") as f:
                meta = f.metadata()
            same = (
                set(on_disk) == set(tensors)
                and all(torch.equal(on_disk[k], tensors[k]) for k in tensors)
                and meta == metadata(cfg)
            )
            print(f"{name}: {'matches' if same else 'DIFFERS'}")
            failed |= not same
            continue
        save_file(tensors, path, metadata=metadata(cfg))
        size = os.path.getsize(path)
        print(
            f"{name}: {len(tensors)} tensors, loss {tensors['loss'].item():.6f}, "
            f"{size / 1024:.1f} KiB -> {os.path.relpath(path)}"
        )
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()

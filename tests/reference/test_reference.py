"""Self-checks of the reference in boost_ref.py. Plain asserts; run:

    python3 tests/reference/test_reference.py

(a) every arch against an independent forward built from torch.nn.functional blocks
    (F.embedding, F.rms_norm, F.linear, F.scaled_dot_product_attention(is_causal=True),
    F.layer_norm, F.silu, F.cross_entropy), RoPE as a complex rotation with half-split pairing,
    and the Kronecker gate in its per-token K_aᵀ·Z·K_b form; logits, loss and gradients;
(b) SVD (and CoLA, per projection) with identity-like B factors reduces to the dense model;
(c) torch.autograd.gradcheck in float64 on tiny LaX models (dense and Kronecker gates) and a
    tiny CoLA model;
(d) the fixtures on disk are what make_fixtures.py produces now, have the documented layout,
    and stay small;
(e) the benchmark peer crates/bench/peers/torch_peer.py, loaded with fixture weights in float64, matches the
    fixtures' logits, loss and gradients;
(f) check_export.py reads an export folder written from fixture weights and reproduces the
    logits, and names a missing tensor.
"""

import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import safe_open

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "crates", "hf", "src", "export", "hf"))
sys.path.insert(0, os.path.join(ROOT, "crates", "bench", "peers"))

import boost_ref as ref  # noqa: E402
import make_fixtures  # noqa: E402

DT = torch.float64


def close(a, b, what, rtol=1e-10, atol=1e-11):
    a, b = a.detach(), b.detach()
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
    err = (a - b).abs().max().item() if a.numel() else 0.0
    assert torch.allclose(a, b, rtol=rtol, atol=atol), f"{what}: max abs diff {err:.3e}"
    return err


# ----------------------------------------------------------------------------------------------
# An independent forward from torch.nn.functional building blocks
# ----------------------------------------------------------------------------------------------


def rope_complex(x, theta):
    """RoPE as a complex rotation: pair (x[i], x[i + d_h/2]) is x[i] + j·x[i + d_h/2]."""
    S, dh = x.shape[-2], x.shape[-1]
    half = dh // 2
    inv_freq = 1.0 / (theta ** (torch.arange(0, dh, 2, dtype=DT) / dh))
    ang = torch.outer(torch.arange(S, dtype=DT), inv_freq)
    rot = torch.polar(torch.ones_like(ang), ang)
    xc = torch.complex(x[..., :half].to(DT), x[..., half:].to(DT)) * rot
    return torch.cat([xc.real, xc.imag], dim=-1).to(x.dtype)


def independent_forward(params, cfg, ids):
    cfg = ref.normalize_config(cfg)
    B, S = ids.shape
    d, H, Hkv = cfg["d"], cfg["heads"], cfg["kv_heads"]
    dh = d // H
    eps = cfg["norm_eps"]
    arch = cfg["arch"]
    phi = F.silu if ref.phi_is_silu(cfg) else (lambda t: t)
    lat = {}

    def proj(l, name, x):
        block = "self_attn" if name in ("q", "k", "v", "o") else "mlp"
        p = f"model.layers.{l}.{block}.{name}_proj"
        if arch == "full":
            return F.linear(x, params[f"{p}.weight"])
        A, Bm = params[f"{p}.cola_a"], params[f"{p}.cola_b"]
        pre = F.linear(x, A.T)
        if arch != "lax" or l == 0:
            z = phi(pre)
        else:
            zp = lat[name]
            if cfg["lax"]["gate"] == "dense":
                gz = F.linear(zp, params[f"{p}.lax_gate.weight"], params[f"{p}.lax_gate.bias"])
            else:
                Ka, Kb = params[f"{p}.lax_gate.kron_a"], params[f"{p}.lax_gate.kron_b"]
                a, b = Ka.shape[0], Kb.shape[0]
                Z = zp.reshape(*zp.shape[:-1], a, b)
                gz = torch.einsum("ik,...ij,jl->...kl", Ka, Z, Kb).reshape(zp.shape)
            r = pre.shape[-1]
            ln = F.layer_norm(
                pre + gz,
                (r,),
                params[f"{p}.lax_ln.weight"],
                params[f"{p}.lax_ln.bias"],
                cfg["lax"]["ln_eps"],
            )
            z = phi(ln)
        lat[name] = z
        return F.linear(z, Bm.T)

    E = params["model.embed_tokens.weight"]
    x = F.embedding(ids, E)
    for l in range(cfg["layers"]):
        h = F.rms_norm(x, (d,), params[f"model.layers.{l}.input_layernorm.weight"], eps)
        q = proj(l, "q", h).view(B, S, H, dh).transpose(1, 2)
        k = proj(l, "k", h).view(B, S, Hkv, dh).transpose(1, 2)
        v = proj(l, "v", h).view(B, S, Hkv, dh).transpose(1, 2)
        q, k = rope_complex(q, cfg["rope_theta"]), rope_complex(k, cfg["rope_theta"])
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=(H != Hkv))
        x = x + proj(l, "o", a.transpose(1, 2).reshape(B, S, d))
        h2 = F.rms_norm(x, (d,), params[f"model.layers.{l}.post_attention_layernorm.weight"], eps)
        g, u = proj(l, "gate", h2), proj(l, "up", h2)
        x = x + proj(l, "down", (F.silu(g) if ref.outer_silu(cfg) else g) * u)
    head = E if cfg["tie_embeddings"] else params["lm_head.weight"]
    return F.linear(F.rms_norm(x, (d,), params["model.norm.weight"], eps), head)


def grads_of(fn, params, cfg, ids, targets, loss_fn):
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    logits = fn(leaves, cfg, ids)
    loss = loss_fn(logits, targets)
    loss.backward()
    return logits.detach(), loss.detach(), {k: v.grad for k, v in leaves.items()}


def ce(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# ----------------------------------------------------------------------------------------------
# (a) reference vs independent blocks
# ----------------------------------------------------------------------------------------------


def test_rope_matches_complex_rotation():
    g = torch.Generator().manual_seed(1)
    for dh, theta in ((8, 10000.0), (4, 500.0), (16, 1e6)):
        x = torch.randn(2, 3, 11, dh, generator=g, dtype=DT)
        close(ref.rope(x, theta), rope_complex(x, theta), f"rope dh={dh}", rtol=1e-12, atol=1e-13)
        # Elementwise formula of MODEL.md at one position and index.
        pos, i, half = 5, 1, dh // 2
        ang = pos * theta ** (-2.0 * i / dh)
        want_lo = x[0, 0, pos, i] * math.cos(ang) - x[0, 0, pos, i + half] * math.sin(ang)
        want_hi = x[0, 0, pos, i + half] * math.cos(ang) + x[0, 0, pos, i] * math.sin(ang)
        got = ref.rope(x, theta)[0, 0, pos]
        assert abs(got[i] - want_lo) < 1e-12 and abs(got[i + half] - want_hi) < 1e-12
    # Relative-position property: rope(q)_m · rope(k)_n depends only on m - n.
    q = torch.randn(1, 1, 1, 8, generator=g, dtype=DT).expand(1, 1, 10, 8)
    k = torch.randn(1, 1, 1, 8, generator=g, dtype=DT).expand(1, 1, 10, 8)
    rq, rk = ref.rope(q, 10000.0)[0, 0], ref.rope(k, 10000.0)[0, 0]
    assert abs(rq[7] @ rk[4] - rq[3] @ rk[0]) < 1e-12
    assert abs(rq[0] @ rk[0] - q[0, 0, 0] @ k[0, 0, 0]) < 1e-12


def test_llama3_scaling_keeps_smooths_and_stretches():
    # head_dim 16, theta 5e5: wavelengths 6.3, 32.4, 167, ...; with L = 64 and factors 1 and 4
    # the cut-offs are 16 and 64. The values are crates/tensor/src/rope.rs's test's.
    s = {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 64}
    plain = torch.tensor(500000.0, dtype=DT) ** (-2.0 * torch.arange(8, dtype=DT) / 16)
    got = ref.llama3_inv_freq(plain, s)
    assert got[0] == plain[0]
    assert abs(got[1] / 0.0794030091792082 - 1) < 1e-14 and abs(got[2] / 0.004700753866357992 - 1) < 1e-14
    assert torch.equal(got[2:], plain[2:] / 8)
    c, _ = ref.rope_cos_sin(5, 16, 500000.0, DT, s)
    assert abs(c[4, 1] - math.cos(4 * 0.0794030091792082)) < 1e-14


def test_attention_matches_sdpa():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 4, 6, 8, generator=g, dtype=DT)
    k = torch.randn(2, 2, 6, 8, generator=g, dtype=DT)
    v = torch.randn(2, 2, 6, 8, generator=g, dtype=DT)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    close(ref.causal_attention(q, k, v), want, "gqa attention")
    # Head j reads kv head j // 2: heads 0,1 -> kv 0 and heads 2,3 -> kv 1.
    one = F.scaled_dot_product_attention(q[:, 3:4], k[:, 1:2], v[:, 1:2], is_causal=True)
    close(ref.causal_attention(q, k, v)[:, 3:4], one, "gqa head 3 -> kv head 1")


def test_norms_match_torch():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 5, 16, generator=g, dtype=DT) * 0.3
    w = 1 + 0.1 * torch.randn(16, generator=g, dtype=DT)
    b = 0.1 * torch.randn(16, generator=g, dtype=DT)
    for eps in (1e-6, 1e-2):
        close(ref.rms_norm(x, w, eps), F.rms_norm(x, (16,), w, eps), f"rms_norm eps={eps}")
        close(ref.layer_norm(x, w, b, eps), F.layer_norm(x, (16,), w, b, eps), f"ln eps={eps}")


def test_kron_gate_forms():
    g = torch.Generator().manual_seed(4)
    a, b = 2, 4
    Ka = torch.randn(a, a, generator=g, dtype=DT)
    Kb = torch.randn(b, b, generator=g, dtype=DT)
    z = torch.randn(5, a * b, generator=g, dtype=DT)
    lhs = z @ torch.kron(Ka, Kb)
    rhs = torch.stack([(Ka.T @ zi.reshape(a, b) @ Kb).reshape(-1) for zi in z])
    close(lhs, rhs, "kron gate = K_aᵀ Z K_b")
    assert ref.kron_factors({"rank": 8, "lax": {"kron_a": 0}}) == (2, 4)
    assert ref.kron_factors({"rank": 8, "lax": {"kron_a": 4}}) == (4, 2)
    assert ref.kron_factors({"rank": 16, "lax": {"kron_a": 0}}) == (4, 4)
    assert ref.kron_factors({"rank": 12, "lax": {"kron_a": 0}}) == (3, 4)


def test_every_case_matches_independent_forward():
    for i, (name, cfg) in enumerate(make_fixtures.CASES.items()):
        g = torch.Generator().manual_seed(100 + i)
        params = ref.init_params(cfg, generator=g, dtype=DT)
        ids = torch.randint(0, cfg["vocab"], (2, 8), generator=g)
        tg = torch.randint(0, cfg["vocab"], (2, 8), generator=g)
        l1, s1, g1 = grads_of(ref.forward, params, cfg, ids, tg, ref.loss)
        l2, s2, g2 = grads_of(independent_forward, params, cfg, ids, tg, ce)
        close(l1, l2, f"{name} logits")
        close(s1, s2, f"{name} loss")
        for k in params:
            close(g1[k], g2[k], f"{name} grad {k}")
        print(f"  {name}: logits/loss/{len(params)} grads match the F.* forward")


def test_param_names_and_shapes():
    cfg = make_fixtures.CASES["lax_kron_svd"]
    shapes = ref.param_shapes(cfg)
    assert shapes["model.layers.1.self_attn.k_proj.cola_a"] == (16, 8)
    assert shapes["model.layers.1.self_attn.k_proj.cola_b"] == (8, 16)
    assert shapes["model.layers.2.mlp.down_proj.cola_a"] == (48, 8)
    assert shapes["model.layers.1.mlp.up_proj.lax_gate.kron_a"] == (2, 2)
    assert shapes["model.layers.1.mlp.up_proj.lax_gate.kron_b"] == (4, 4)
    assert "model.layers.0.mlp.up_proj.lax_gate.kron_a" not in shapes
    assert "model.layers.0.mlp.up_proj.lax_ln.weight" not in shapes
    gqa = ref.param_shapes(make_fixtures.CASES["full_gqa_tied"])
    assert gqa["model.layers.0.self_attn.k_proj.weight"] == (8, 16)
    assert gqa["model.layers.0.self_attn.o_proj.weight"] == (16, 16)
    assert "lm_head.weight" not in gqa
    dense = ref.param_shapes(make_fixtures.CASES["lax_dense_cola"])
    assert dense["model.layers.2.self_attn.q_proj.lax_gate.weight"] == (8, 8)
    assert dense["model.layers.2.self_attn.q_proj.lax_gate.bias"] == (8,)


def test_outer_silu_rule():
    c = make_fixtures.config
    assert ref.outer_silu(ref.normalize_config(c("full", only_lr_act=True)))
    assert ref.outer_silu(ref.normalize_config(c("svd", only_lr_act=True)))
    assert not ref.outer_silu(ref.normalize_config(c("cola", only_lr_act=True)))
    assert ref.outer_silu(ref.normalize_config(c("cola", only_lr_act=False)))
    assert not ref.outer_silu(
        ref.normalize_config(c("lax", only_lr_act=True, lax={"flavour": "cola"}))
    )
    assert ref.outer_silu(ref.normalize_config(c("lax", only_lr_act=True, lax={"flavour": "svd"})))


# ----------------------------------------------------------------------------------------------
# (b) identity-like low-rank factors reduce to the dense model
# ----------------------------------------------------------------------------------------------


def factor_dense(full_params, cfg_full, rank):
    """SVD-layout params with A = [Wᵀ | 0] ([d_in, r]) and B = [I; 0] ([r, d_out])."""
    out = {}
    for k, v in full_params.items():
        if k.endswith("_proj.weight"):
            d_out, d_in = v.shape
            A = torch.zeros(d_in, rank, dtype=v.dtype)
            A[:, :d_out] = v.T
            Bm = torch.zeros(rank, d_out, dtype=v.dtype)
            Bm[:d_out, :] = torch.eye(d_out, dtype=v.dtype)
            base = k[: -len(".weight")]
            out[f"{base}.cola_a"] = A
            out[f"{base}.cola_b"] = Bm
        else:
            out[k] = v
    return out


def test_svd_with_identity_b_is_dense():
    for kv in (4, 2):
        cfg_full = make_fixtures.config("full", kv_heads=kv)
        g = torch.Generator().manual_seed(7 + kv)
        pf = ref.init_params(cfg_full, generator=g, dtype=DT)
        rank = cfg_full["d_ff"]
        cfg_svd = dict(cfg_full, arch="svd", rank=rank)
        ps = factor_dense(pf, cfg_full, rank)
        assert set(ps) == set(ref.param_shapes(cfg_svd)), "factored names differ from svd names"
        for k, shape in ref.param_shapes(cfg_svd).items():
            assert tuple(ps[k].shape) == shape, k
        ids = torch.randint(0, cfg_full["vocab"], (2, 8), generator=g)
        close(ref.forward(ps, cfg_svd, ids), ref.forward(pf, cfg_full, ids), f"svd≡full kv={kv}")


def test_cola_projection_with_identity_b():
    cfg = ref.normalize_config(make_fixtures.config("cola", rank=48))
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 8, 32, generator=g, dtype=DT)
    W = torch.randn(48, 32, generator=g, dtype=DT)
    A = torch.zeros(32, 48, dtype=DT)
    A[:, :48] = W.T
    params = {
        "model.layers.0.mlp.up_proj.cola_a": A,
        "model.layers.0.mlp.up_proj.cola_b": torch.eye(48, dtype=DT),
    }
    close(ref.project(params, cfg, 0, "up", x, {}), F.silu(x @ W.T), "cola proj = silu(xWᵀ)")


# ----------------------------------------------------------------------------------------------
# (c) gradcheck
# ----------------------------------------------------------------------------------------------


def tiny(arch, **over):
    c = make_fixtures.config(arch, d=8, d_ff=8, heads=2, kv_heads=1, rank=4, vocab=5, layers=3)
    lax = dict(c["lax"])
    lax.update(over.pop("lax", {}))
    c.update(over)
    c["lax"] = lax
    return c


def gradcheck_model(cfg, seed, full_jacobian):
    """gradcheck of the loss: torch's fast mode (random directional derivatives) over every
    parameter and over x0, then the full Jacobian over the parameters for which
    `full_jacobian(name)` is true (the others held constant). Returns the tensor counts."""
    g = torch.Generator().manual_seed(seed)
    params = ref.init_params(cfg, generator=g, dtype=DT)
    names = list(params)
    ids = torch.randint(0, cfg["vocab"], (2, 3), generator=g)
    tg = torch.randint(0, cfg["vocab"], (2, 3), generator=g)

    def fn(*tensors):
        p = dict(zip(names, tensors))
        return ref.loss(ref.forward(p, cfg, ids), tg)

    tol = dict(eps=1e-6, atol=1e-7, rtol=1e-5)
    inputs = tuple(params[k].clone().requires_grad_(True) for k in names)
    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True, **tol)

    def fn_x0(x0):
        return ref.loss(forward_from_x0(params, cfg, x0), tg)

    x0 = params["model.embed_tokens.weight"][ids].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(fn_x0, (x0,), fast_mode=True, **tol)

    chosen = [k for k in names if full_jacobian(k)]
    assert chosen, "no tensor selected for the full Jacobian"
    inputs = tuple(params[k].clone().requires_grad_(full_jacobian(k)) for k in names)
    assert torch.autograd.gradcheck(fn, inputs, fast_mode=False, **tol)
    return len(names), len(chosen)


def forward_from_x0(params, cfg, x0):
    """ref.forward started from a given embedding output x0 [B, S, d]: the embedding table is
    replaced by the B·S rows of x0 and the ids by 0..B·S-1 (a tied head keeps the real table)."""
    B, S, d = x0.shape
    p = dict(params)
    p["model.embed_tokens.weight"] = x0.reshape(B * S, d)
    cfg2 = dict(cfg, tie_embeddings=False)
    if cfg.get("tie_embeddings"):
        p["lm_head.weight"] = params["model.embed_tokens.weight"]
    ids = torch.arange(B * S).reshape(B, S)
    return ref.forward(p, cfg2, ids)


def test_gradcheck_tiny():
    def lax_part(k):
        # Every gate and LN, plus layer-0 factors whose latents feed the later crossings.
        return ".lax_" in k or k.startswith(
            ("model.layers.0.self_attn.q_proj.", "model.layers.0.mlp.down_proj.")
        )

    def norms(k):
        return "norm" in k

    cases = [
        ("lax dense/cola", tiny("lax", lax={"gate": "dense", "flavour": "cola", "ln_eps": 1e-3}), lax_part),
        ("lax kron/svd", tiny("lax", lax={"gate": "kron", "flavour": "svd", "kron_a": 2}), lax_part),
        (
            "lax kron/cola only_lr_act",
            tiny("lax", only_lr_act=True, lax={"gate": "kron", "flavour": "cola", "kron_a": 0}),
            lambda k: ".lax_gate." in k,
        ),
        ("cola tied", tiny("cola", tie_embeddings=True, layers=2), norms),
        ("full", tiny("full", layers=2), norms),
    ]
    for i, (name, cfg, full_jacobian) in enumerate(cases):
        n, m = gradcheck_model(cfg, 50 + i, full_jacobian)
        print(f"  gradcheck {name}: fast mode on {n} tensors + x0, full Jacobian on {m} tensors")


# ----------------------------------------------------------------------------------------------
# (d) fixtures
# ----------------------------------------------------------------------------------------------


def test_fixtures_current_and_well_formed():
    fixtures = make_fixtures.DEFAULT_OUT
    for i, (name, cfg) in enumerate(make_fixtures.CASES.items()):
        path = os.path.join(fixtures, f"{name}.safetensors")
        assert os.path.exists(path), f"{path} missing: run make_fixtures.py"
        size = os.path.getsize(path)
        assert size < 250_000, f"{name}: {size} bytes"
        with safe_open(path, "pt") as f:
            meta = f.metadata()
            disk = {k: f.get_tensor(k) for k in f.keys()}
        assert json.loads(meta["config"]) == cfg
        assert meta["batch"] == "2" and meta["seq"] == "8"
        shapes = ref.param_shapes(cfg)
        expect = {"ids", "targets", "logits", "loss", "grad.embed_out"}
        expect |= {f"param.{k}" for k in shapes} | {f"grad.{k}" for k in shapes}
        assert set(disk) == expect, f"{name}: {sorted(set(disk) ^ expect)}"
        for k, shape in shapes.items():
            assert tuple(disk[f"param.{k}"].shape) == shape and disk[f"param.{k}"].dtype == DT
            assert tuple(disk[f"grad.{k}"].shape) == shape and disk[f"grad.{k}"].dtype == DT
        assert disk["ids"].dtype == torch.int64 and disk["targets"].dtype == torch.int64
        assert tuple(disk["logits"].shape) == (2, 8, cfg["vocab"])
        assert tuple(disk["loss"].shape) == (1,)
        assert tuple(disk["grad.embed_out"].shape) == (2, 8, cfg["d"])
        fresh = make_fixtures.build_case(i, cfg)
        for k in fresh:
            assert torch.equal(fresh[k], disk[k]), f"{name}: {k} is stale; rerun make_fixtures.py"
        # grad.embed_out scattered back onto the table is grad.E (plus the head's part if tied).
        scattered = torch.zeros_like(disk["grad.model.embed_tokens.weight"])
        scattered.index_add_(0, disk["ids"].reshape(-1), disk["grad.embed_out"].reshape(-1, cfg["d"]))
        if not cfg["tie_embeddings"]:
            close(scattered, disk["grad.model.embed_tokens.weight"], f"{name} embed scatter")
        # grad.embed_out is d loss / d x0 for x0 = E[ids]: recompute it from a leaf x0.
        params = {k[len("param.") :]: v for k, v in disk.items() if k.startswith("param.")}
        x0 = params["model.embed_tokens.weight"][disk["ids"]].clone().requires_grad_(True)
        ref.loss(forward_from_x0(params, cfg, x0), disk["targets"]).backward()
        close(x0.grad, disk["grad.embed_out"], f"{name} grad.embed_out")
        close(ref.loss(disk["logits"], disk["targets"]).reshape(1), disk["loss"], f"{name} loss")
        print(f"  {name}: {size / 1024:.1f} KiB, {len(disk)} tensors, current")


# ----------------------------------------------------------------------------------------------
# (e) the benchmark peer computes the same model
# ----------------------------------------------------------------------------------------------


def test_peer_matches_fixtures():
    import torch_peer

    for name, cfg in make_fixtures.CASES.items():
        path = os.path.join(make_fixtures.DEFAULT_OUT, f"{name}.safetensors")
        with safe_open(path, "pt") as f:
            disk = {k: f.get_tensor(k) for k in f.keys()}
        model = torch_peer.BoostLM(ref.normalize_config(cfg)).to(DT)
        sd = model.state_dict()
        state = {k[len("param.") :]: v for k, v in disk.items() if k.startswith("param.")}
        assert set(sd) == set(state), f"{name}: peer names {sorted(set(sd) ^ set(state))}"
        model.load_state_dict(state)
        logits = model(disk["ids"])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), disk["targets"].reshape(-1))
        loss.backward()
        close(logits, disk["logits"], f"peer {name} logits")
        close(loss.reshape(1), disk["loss"], f"peer {name} loss")
        for k, p in model.named_parameters():
            close(p.grad, disk[f"grad.{k}"], f"peer {name} grad {k}")
    print("  crates/bench/peers/torch_peer.py matches every fixture in float64")


# ----------------------------------------------------------------------------------------------
# (f) check_export.py on an export written from fixture weights
# ----------------------------------------------------------------------------------------------


def test_check_export_round_trip():
    import contextlib
    import io
    import subprocess
    import tempfile

    import check_export
    from safetensors.torch import load_file, save_file

    script = os.path.join(HERE, "check_export.py")
    for name, cfg in make_fixtures.CASES.items():
        path = os.path.join(make_fixtures.DEFAULT_OUT, f"{name}.safetensors")
        disk = load_file(path)
        with tempfile.TemporaryDirectory() as tmp:
            export = os.path.join(tmp, "export")
            os.makedirs(export)
            hf = check_export.export_config_json(cfg)
            with open(os.path.join(export, "config.json"), "w") as f:
                json.dump(hf, f)
            want = ref.normalize_config(cfg)
            want["lax"]["kron_a"] = ref.kron_factors(want)[0] if cfg["arch"] == "lax" else 0
            assert check_export.config_from_export(hf) == want, name
            weights = {
                k[len("param.") :]: v.to(torch.float32).contiguous()
                for k, v in disk.items()
                if k.startswith("param.")
            }
            save_file(weights, os.path.join(export, "model.safetensors"))
            save_file({"ids": disk["ids"]}, os.path.join(tmp, "ids.safetensors"))
            out = os.path.join(tmp, "out.safetensors")
            argv = [export, os.path.join(tmp, "ids.safetensors"), out]
            if name == "lax_kron_svd":
                # Once through the command line, as the Rust test calls it.
                run = subprocess.run([sys.executable, script] + argv, capture_output=True, text=True)
                assert run.returncode == 0, run.stderr
            else:
                with contextlib.redirect_stdout(io.StringIO()):
                    assert check_export.main(argv) == 0
            logits = load_file(out)["logits"]
            assert logits.dtype == DT
            # fp32-rounded weights, float64 compute: close to the fixture, not equal.
            close(logits, disk["logits"], f"export {name}", rtol=1e-4, atol=1e-4)
            exact = ref.forward({k: v.to(DT) for k, v in weights.items()}, cfg, disk["ids"])
            close(logits, exact, f"export {name} (same weights)", rtol=1e-12, atol=1e-12)

            # A missing tensor is reported with its name.
            del weights["model.norm.weight"]
            save_file(weights, os.path.join(export, "model.safetensors"))
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                rc = check_export.main(argv)
            assert rc == 1 and "model.norm.weight" in err.getvalue(), err.getvalue()
    print("  check_export.py reproduces every fixture from an fp32 export")


def main():
    tests = [(k, v) for k, v in globals().items() if k.startswith("test_") and callable(v)]
    for name, fn in tests:
        print(f"{name} ...")
        fn()
        print(f"{name}: ok")
    print(f"all {len(tests)} reference checks passed")


if __name__ == "__main__":
    main()

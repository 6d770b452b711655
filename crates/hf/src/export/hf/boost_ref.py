"""PyTorch reference of the decoder described in docs/MODEL.md.

Parameters live in a plain dict keyed by the canonical names of MODEL.md, with exactly the
shapes listed there. Every function is dtype-parametric: it computes in the dtype of the
parameters it is given (the fixtures use float64).

Config dict keys (the `[model]` section): arch, d, d_ff, layers, heads, kv_heads, rank, vocab,
only_lr_act, tie_embeddings, rope_theta, rope_scaling (None, or a dict with type "llama3",
factor, low_freq_factor, high_freq_factor, original_max_position_embeddings), norm_eps, and a
nested `lax` dict with flavour, gate, kron_a, ln_eps. Missing optional keys take the defaults of crates/config/src/model.rs.
"""

import copy
import math

import torch

ATTN_PROJS = ("q", "k", "v", "o")
MLP_PROJS = ("gate", "up", "down")
PROJS = ATTN_PROJS + MLP_PROJS

LAX_DEFAULTS = {"flavour": "cola", "gate": "dense", "kron_a": 0, "ln_eps": 1e-6}


# ----------------------------------------------------------------------------------------------
# Config helpers
# ----------------------------------------------------------------------------------------------


def normalize_config(cfg):
    """A copy of `cfg` with every optional key filled in with its default."""
    c = copy.deepcopy(dict(cfg))
    if c.get("kv_heads") is None:
        c["kv_heads"] = c["heads"]
    c.setdefault("only_lr_act", False)
    c.setdefault("tie_embeddings", False)
    c.setdefault("rope_theta", 10000.0)
    if (c.get("rope_scaling") or {}).get("type", "none") == "none":
        c["rope_scaling"] = None
    c.setdefault("norm_eps", 1e-6)
    c.setdefault("rank", 0)
    lax = dict(LAX_DEFAULTS)
    lax.update(c.get("lax") or {})
    c["lax"] = lax
    if c["arch"] not in ("full", "svd", "cola", "lax"):
        raise ValueError(f"unknown arch {c['arch']!r}")
    if c["d"] % c["heads"] != 0 or (c["d"] // c["heads"]) % 2 != 0:
        raise ValueError("d must be a multiple of heads with an even head dimension")
    if c["heads"] % c["kv_heads"] != 0:
        raise ValueError("heads must be a multiple of kv_heads")
    if c["arch"] == "lax" and c["lax"]["gate"] == "kron":
        a, b = kron_factors(c)
        if a * b != c["rank"]:
            raise ValueError("lax.kron_a must divide rank")
    return c


def head_dim(cfg):
    return cfg["d"] // cfg["heads"]


def d_kv(cfg):
    return cfg["kv_heads"] * head_dim(cfg)


def phi_is_silu(cfg):
    """Whether the bottleneck activation φ is SiLU (cola, lax flavour cola)."""
    if cfg["arch"] == "cola":
        return True
    if cfg["arch"] == "lax":
        return cfg["lax"]["flavour"] == "cola"
    return False


def outer_silu(cfg):
    """Whether the MLP computes silu(g) ⊙ u (true except CoLA-style with only_lr_act)."""
    return not (phi_is_silu(cfg) and cfg["only_lr_act"])


def kron_factors(cfg):
    """(a, b) with a·b = r; kron_a = 0 picks the first divisor of r nearest √r."""
    r = cfg["rank"]
    a = cfg["lax"]["kron_a"]
    if a == 0:
        s = math.sqrt(r)
        best = None
        for cand in range(1, r + 1):
            if r % cand == 0 and (best is None or abs(cand - s) < abs(best - s)):
                best = cand
        a = best if best is not None else 1
    return a, r // max(a, 1)


def proj_dims(cfg):
    """(d_in, d_out) of every projection."""
    d, dff, dkv = cfg["d"], cfg["d_ff"], d_kv(cfg)
    return {
        "q": (d, d),
        "k": (d, dkv),
        "v": (d, dkv),
        "o": (d, d),
        "gate": (d, dff),
        "up": (d, dff),
        "down": (dff, d),
    }


def proj_prefix(layer, name):
    block = "self_attn" if name in ATTN_PROJS else "mlp"
    return f"model.layers.{layer}.{block}.{name}_proj"


def param_shapes(cfg):
    """Canonical name -> shape, in a fixed order, for the model `cfg` describes."""
    cfg = normalize_config(cfg)
    V, d, r = cfg["vocab"], cfg["d"], cfg["rank"]
    shapes = {"model.embed_tokens.weight": (V, d)}
    dims = proj_dims(cfg)
    for l in range(cfg["layers"]):
        shapes[f"model.layers.{l}.input_layernorm.weight"] = (d,)
        shapes[f"model.layers.{l}.post_attention_layernorm.weight"] = (d,)
        for name in PROJS:
            p = proj_prefix(l, name)
            d_in, d_out = dims[name]
            if cfg["arch"] == "full":
                shapes[f"{p}.weight"] = (d_out, d_in)
                continue
            shapes[f"{p}.cola_a"] = (d_in, r)
            shapes[f"{p}.cola_b"] = (r, d_out)
            if cfg["arch"] == "lax" and l >= 1:
                if cfg["lax"]["gate"] == "dense":
                    shapes[f"{p}.lax_gate.weight"] = (r, r)
                    shapes[f"{p}.lax_gate.bias"] = (r,)
                else:
                    a, b = kron_factors(cfg)
                    shapes[f"{p}.lax_gate.kron_a"] = (a, a)
                    shapes[f"{p}.lax_gate.kron_b"] = (b, b)
                shapes[f"{p}.lax_ln.weight"] = (r,)
                shapes[f"{p}.lax_ln.bias"] = (r,)
    shapes["model.norm.weight"] = (d,)
    if not cfg["tie_embeddings"]:
        shapes["lm_head.weight"] = (V, d)
    return shapes


# ----------------------------------------------------------------------------------------------
# Initialization
# ----------------------------------------------------------------------------------------------


def init_params(cfg, generator=None, dtype=torch.float64, style="test", init_std=0.02):
    """Random parameters for `cfg`.

    style="test" draws weights meant to expose wrong formulas: norm weights 1 + 0.1·N(0,1),
    LaX LN bias 0.1·N(0,1), embedding N(0,1), LM head and full-rank weights N(0,1)/√d_in,
    low-rank factors at the CoLA scale N(0,1)·(r·(d_in+d_out))^(-1/4), LaX gates uniform as in
    MODEL.md. style="model" follows the distributions of MODEL.md's Initialization section.
    """
    if style not in ("test", "model"):
        raise ValueError("style must be 'test' or 'model'")
    cfg = normalize_config(cfg)
    g = generator
    r = cfg["rank"]
    dims = proj_dims(cfg)

    def normal(shape, std):
        return torch.randn(shape, generator=g, dtype=dtype) * std

    def uniform(shape, bound):
        return (torch.rand(shape, generator=g, dtype=dtype) * 2.0 - 1.0) * bound

    def norm_weight(shape):
        if style == "model":
            return torch.ones(shape, dtype=dtype)
        return 1.0 + normal(shape, 0.1)

    params = {}
    for name, shape in param_shapes(cfg).items():
        if name == "model.embed_tokens.weight":
            t = normal(shape, init_std if style == "model" else 1.0)
        elif name == "lm_head.weight":
            t = normal(shape, init_std if style == "model" else 1.0 / math.sqrt(cfg["d"]))
        elif name.endswith("layernorm.weight") or name == "model.norm.weight":
            t = norm_weight(shape)
        elif name.endswith(".lax_ln.weight"):
            t = norm_weight(shape)
        elif name.endswith(".lax_ln.bias"):
            t = torch.zeros(shape, dtype=dtype) if style == "model" else normal(shape, 0.1)
        elif name.endswith(".lax_gate.weight") or name.endswith(".lax_gate.bias"):
            t = uniform(shape, 1.0 / math.sqrt(r))
        elif name.endswith(".lax_gate.kron_a") or name.endswith(".lax_gate.kron_b"):
            t = uniform(shape, 1.0 / math.sqrt(shape[0]))
        elif name.endswith(".cola_a") or name.endswith(".cola_b"):
            proj = name.rsplit(".", 1)[0].rsplit(".", 1)[1][: -len("_proj")]
            d_in, d_out = dims[proj]
            t = normal(shape, (r * (d_in + d_out)) ** -0.25)
        elif name.endswith("_proj.weight"):
            t = normal(shape, init_std if style == "model" else 1.0 / math.sqrt(shape[1]))
        else:
            raise AssertionError(f"no init rule for {name}")
        params[name] = t
    return params


# ----------------------------------------------------------------------------------------------
# Building blocks
# ----------------------------------------------------------------------------------------------


def silu(x):
    return x * torch.sigmoid(x)


def rms_norm(x, weight, eps):
    """x / sqrt(mean(x², over the last dim) + eps) · weight."""
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * weight


def layer_norm(x, weight, bias, eps):
    """LayerNorm over the last dim with biased variance, eps inside the sqrt, affine."""
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def llama3_inv_freq(inv_freq, s):
    """Llama 3.1's scaling: wavelengths under L/high_freq_factor kept, over L/low_freq_factor
    divided by factor, interpolated between (L = original_max_position_embeddings)."""
    ctx, lo, hi = float(s["original_max_position_embeddings"]), s["low_freq_factor"], s["high_freq_factor"]
    wavelen = 2 * math.pi / inv_freq
    smooth = (ctx / wavelen - lo) / (hi - lo)
    mid = (1 - smooth) * inv_freq / s["factor"] + smooth * inv_freq
    return torch.where(wavelen < ctx / hi, inv_freq, torch.where(wavelen > ctx / lo, inv_freq / s["factor"], mid))


def rope_cos_sin(seq, dh, theta, dtype, scaling=None):
    """cos and sin tables [S, d_h/2] for positions 0..S-1 and inv_freq_i = θ^(-2i/d_h), scaled
    by `scaling` (a llama3 rope_scaling dict) when given."""
    i = torch.arange(dh // 2, dtype=dtype)
    inv_freq = torch.tensor(theta, dtype=dtype) ** (-2.0 * i / dh)
    if scaling is not None:
        inv_freq = llama3_inv_freq(inv_freq, scaling)
    pos = torch.arange(seq, dtype=dtype)
    ang = pos[:, None] * inv_freq[None, :]
    return torch.cos(ang), torch.sin(ang)


def rope(x, theta, scaling=None):
    """Hugging Face rotate_half RoPE on x [B, H, S, d_h], positions 0..S-1 along dim 2."""
    seq, dh = x.shape[-2], x.shape[-1]
    half = dh // 2
    c, s = rope_cos_sin(seq, dh, theta, x.dtype, scaling)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def causal_attention(q, k, v):
    """softmax(q·kᵀ/√d_h + causal mask)·v; q [B,H,S,dh], k and v [B,H_kv,S,dh].

    Query head j reads kv head j // (H / H_kv).
    """
    H, S, dh = q.shape[1], q.shape[2], q.shape[3]
    group = H // k.shape[1]
    kv_index = torch.arange(H) // group
    k = k[:, kv_index]
    v = v[:, kv_index]
    scores = q @ k.transpose(-1, -2) / math.sqrt(dh)
    mask = torch.ones(S, S, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def lax_gate(params, prefix, cfg, z):
    """G(z) of the LaX crossing for the projection at `prefix`."""
    if cfg["lax"]["gate"] == "dense":
        return z @ params[f"{prefix}.lax_gate.weight"].T + params[f"{prefix}.lax_gate.bias"]
    return z @ torch.kron(params[f"{prefix}.lax_gate.kron_a"], params[f"{prefix}.lax_gate.kron_b"])


def project(params, cfg, layer, name, x, latents):
    """proj_l(name, x). For LaX, `latents[name]` holds z of the previous layer and is updated."""
    p = proj_prefix(layer, name)
    arch = cfg["arch"]
    if arch == "full":
        return x @ params[f"{p}.weight"].T
    phi = silu if phi_is_silu(cfg) else (lambda t: t)
    pre = x @ params[f"{p}.cola_a"]
    if arch in ("svd", "cola"):
        return phi(pre) @ params[f"{p}.cola_b"]
    if layer == 0:
        z = phi(pre)
    else:
        crossed = pre + lax_gate(params, p, cfg, latents[name])
        z = phi(
            layer_norm(
                crossed,
                params[f"{p}.lax_ln.weight"],
                params[f"{p}.lax_ln.bias"],
                cfg["lax"]["ln_eps"],
            )
        )
    latents[name] = z
    return z @ params[f"{p}.cola_b"]


# ----------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------


def forward(params, cfg, ids, return_x0=False):
    """Logits [B, S, V] for token ids [B, S].

    With return_x0=True returns (logits, x0) where x0 = E[ids] [B, S, d] is the embedding
    output, a non-leaf tensor on which retain_grad() can be called before backward.
    """
    cfg = normalize_config(cfg)
    B, S = ids.shape
    H, Hkv, dh = cfg["heads"], cfg["kv_heads"], head_dim(cfg)
    eps = cfg["norm_eps"]
    theta = cfg["rope_theta"]

    emb = params["model.embed_tokens.weight"]
    x0 = emb[ids]
    x = x0
    latents = {}
    for l in range(cfg["layers"]):
        h = rms_norm(x, params[f"model.layers.{l}.input_layernorm.weight"], eps)
        q = project(params, cfg, l, "q", h, latents)
        k = project(params, cfg, l, "k", h, latents)
        v = project(params, cfg, l, "v", h, latents)
        q = q.view(B, S, H, dh).transpose(1, 2)
        k = k.view(B, S, Hkv, dh).transpose(1, 2)
        v = v.view(B, S, Hkv, dh).transpose(1, 2)
        q, k = rope(q, theta, cfg["rope_scaling"]), rope(k, theta, cfg["rope_scaling"])
        a = causal_attention(q, k, v).transpose(1, 2).reshape(B, S, H * dh)
        x = x + project(params, cfg, l, "o", a, latents)

        h2 = rms_norm(x, params[f"model.layers.{l}.post_attention_layernorm.weight"], eps)
        g = project(params, cfg, l, "gate", h2, latents)
        u = project(params, cfg, l, "up", h2, latents)
        m = silu(g) * u if outer_silu(cfg) else g * u
        x = x + project(params, cfg, l, "down", m, latents)

    head = emb if cfg["tie_embeddings"] else params["lm_head.weight"]
    logits = rms_norm(x, params["model.norm.weight"], eps) @ head.T
    if return_x0:
        return logits, x0
    return logits


def loss(logits, targets):
    """Mean over all B·S tokens of −log softmax(logits)[target]."""
    logp = torch.log_softmax(logits.reshape(-1, logits.shape[-1]), dim=-1)
    return -logp.gather(1, targets.reshape(-1, 1)).mean()


# ----------------------------------------------------------------------------------------------
# An export's config.json (docs/MODEL.md, Export)
# ----------------------------------------------------------------------------------------------


ACTIVATION_OF_FLAVOUR = {"svd": "identity", "cola": "silu"}
FLAVOUR_OF_ACTIVATION = {v: k for k, v in ACTIVATION_OF_FLAVOUR.items()}


class ExportError(Exception):
    pass


def _rope_dict(hf):
    # boost writes `boost_rope_scaling` for a low-rank model (`rope_scaling` for a Llama, which
    # transformers 5 moves into `rope_parameters` on loading).
    return hf.get("boost_rope_scaling") or hf.get("rope_scaling") or hf.get("rope_parameters") or {}


def rope_theta_of(hf):
    return float(hf.get("rope_theta") or _rope_dict(hf).get("rope_theta") or 10000.0)


def rope_scaling_of(hf):
    """The reference's rope_scaling of an export's config: None, or the llama3 parameters."""
    r = _rope_dict(hf)
    kind = r.get("rope_type", r.get("type", "default"))
    if kind == "default":
        return None
    if kind != "llama3":
        raise ExportError(f"rope_type {kind!r} is not computed (default or llama3)")
    keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    return {"type": "llama3", **{k: float(r[k]) for k in keys}}


def config_from_export(hf):
    """The model config dict (the `[model]` keys) of an export's config.json."""

    def need(key):
        if key not in hf:
            raise ExportError(f"config.json lacks {key!r}")
        return hf[key]

    arch = need("boost_arch")
    if arch not in ("full", "svd", "cola", "lax"):
        raise ExportError(f"config.json boost_arch = {arch!r} is not one of full|svd|cola|lax")
    heads = int(need("num_attention_heads"))
    cfg = {
        "arch": arch,
        "d": int(need("hidden_size")),
        "d_ff": int(need("intermediate_size")),
        "layers": int(need("num_hidden_layers")),
        "heads": heads,
        "kv_heads": int(hf.get("num_key_value_heads") or heads),
        "rank": int(hf.get("rank") or 0),
        "vocab": int(need("vocab_size")),
        "only_lr_act": bool(hf.get("only_lr_act", False)),
        "tie_embeddings": bool(hf.get("tie_word_embeddings", False)),
        "rope_theta": rope_theta_of(hf),
        "rope_scaling": rope_scaling_of(hf),
        "norm_eps": float(hf.get("rms_norm_eps", 1e-6)),
        "lax": dict(LAX_DEFAULTS),
    }
    act = hf.get("bottleneck_activation")
    if arch == "lax":
        if act not in FLAVOUR_OF_ACTIVATION:
            raise ExportError(f"LaX export needs bottleneck_activation identity|silu, got {act!r}")
        gate = need("lax_gate")
        if gate not in ("dense", "kron"):
            raise ExportError(f"lax_gate = {gate!r} is not dense|kron")
        cfg["lax"] = {
            "flavour": FLAVOUR_OF_ACTIVATION[act],
            "gate": gate,
            "kron_a": int(hf.get("lax_kron_a") or 0),
            "ln_eps": float(hf.get("lax_ln_eps", 1e-6)),
        }
        if gate == "kron":
            a, b = kron_factors(cfg)
            if "lax_kron_b" in hf and int(hf["lax_kron_b"]) != b:
                raise ExportError(f"lax_kron_b = {hf['lax_kron_b']} but rank / kron_a = {b}")
    elif arch in ("svd", "cola") and act is not None:
        want = "identity" if arch == "svd" else "silu"
        if act != want:
            raise ExportError(f"boost_arch {arch} needs bottleneck_activation {want}, got {act!r}")
    if arch != "full" and cfg["rank"] <= 0:
        raise ExportError("a low-rank export needs rank >= 1")
    cfg = normalize_config(cfg)
    if "outer_silu" in hf and bool(hf["outer_silu"]) != outer_silu(cfg):
        raise ExportError(
            f"outer_silu = {hf['outer_silu']} contradicts the rule for arch {arch}, "
            f"only_lr_act {cfg['only_lr_act']} (expected {outer_silu(cfg)})"
        )
    return cfg

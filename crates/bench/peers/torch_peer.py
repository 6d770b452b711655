"""PyTorch eager CPU peer for the Rust training benchmark.

The model of docs/MODEL.md as an nn.Module whose state_dict keys are the canonical parameter
names, trained in float32 with torch.optim.AdamW at PyTorch's defaults for CPU tensors.
A step is zero_grad, forward, cross-entropy loss, backward, the global gradient-norm clip
(--clip; `boost bench` passes the one its own steps apply) and optimizer step; the steps after
the warm-up are timed and one JSON line is printed on stdout:

    python3 bench/torch_peer.py --arch cola --d 512 --d-ff 1376 --layers 8 --heads 8 \\
        --rank 128 --vocab 8192 --only-lr-act 0 --seq 256 --micro-batch 8 --threads 2 --json

    {"step_time_s": ..., "step_times_s": [...], "tokens_per_sec": ..., "params": ...,
     "threads": ..., "torch_version": ..., ...}

step_time_s is the median of the timed steps and tokens_per_sec = micro_batch·seq / median.
With --profile-steps N, N more steps run after the timed ones under torch.profiler, and
"split" gives their seconds a step by kind of operator (self time): "gemm_s" (aten::mm, addmm,
bmm), "attention_s" (the scaled_dot_product_attention kernels), "other_s" (every other
operator), and "step_s" (the profiled steps' wall time, which the profiler's own cost per
operator makes somewhat longer than a timed step). Timed steps are never profiled. With
--serve, a line 'profile' runs one such step and prints its split.
The extra fields (step_time_min_s, cpu_times_s = process CPU seconds per timed step,
loadavg_start / loadavg_end from os.getloadavg()) show whether other work shared the cores.

tests/reference/test_reference.py loads fixture weights into BoostLM in float64 and checks
logits, loss and gradients against the reference fixtures.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ATTN_PROJS = ("q", "k", "v", "o")
MLP_PROJS = ("gate", "up", "down")


def _phi_is_silu(cfg):
    return cfg["arch"] == "cola" or (cfg["arch"] == "lax" and cfg["lax"]["flavour"] == "cola")


def _kron_factors(cfg):
    r, a = cfg["rank"], cfg["lax"]["kron_a"]
    if a == 0:
        s = math.sqrt(r)
        divisors = [c for c in range(1, r + 1) if r % c == 0]
        a = min(divisors, key=lambda c: abs(c - s))
    return a, r // a


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class KronGate(nn.Module):
    """G(z) = z @ kron(K_a, K_b)."""

    def __init__(self, a, b):
        super().__init__()
        self.kron_a = nn.Parameter(torch.empty(a, a).uniform_(-1 / math.sqrt(a), 1 / math.sqrt(a)))
        self.kron_b = nn.Parameter(torch.empty(b, b).uniform_(-1 / math.sqrt(b), 1 / math.sqrt(b)))

    def forward(self, z):
        return z @ torch.kron(self.kron_a, self.kron_b)


class LowRank(nn.Module):
    """y = φ(x A) B, or for LaX with crossing y = φ(LN(x A + G(z_prev))) B."""

    def __init__(self, d_in, d_out, cfg, crossing):
        super().__init__()
        r = cfg["rank"]
        std = (r * (d_in + d_out)) ** -0.25
        self.cola_a = nn.Parameter(torch.randn(d_in, r) * std)
        self.cola_b = nn.Parameter(torch.randn(r, d_out) * std)
        self.silu = _phi_is_silu(cfg)
        self.crossing = crossing
        if crossing:
            if cfg["lax"]["gate"] == "dense":
                self.lax_gate = nn.Linear(r, r)
            else:
                self.lax_gate = KronGate(*_kron_factors(cfg))
            self.lax_ln = nn.LayerNorm(r, eps=cfg["lax"]["ln_eps"])

    def forward(self, x, z_prev=None):
        p = x @ self.cola_a
        if self.crossing:
            p = self.lax_ln(p + self.lax_gate(z_prev))
        z = F.silu(p) if self.silu else p
        return z @ self.cola_b, z


class Dense(nn.Linear):
    def __init__(self, d_in, d_out, cfg, crossing):
        super().__init__(d_in, d_out, bias=False)
        nn.init.normal_(self.weight, std=cfg.get("init_std", 0.02))

    def forward(self, x, z_prev=None):
        return super().forward(x), None


def make_proj(d_in, d_out, cfg, layer):
    if cfg["arch"] == "full":
        return Dense(d_in, d_out, cfg, False)
    return LowRank(d_in, d_out, cfg, crossing=cfg["arch"] == "lax" and layer >= 1)


class Attention(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        d = cfg["d"]
        self.heads, self.kv_heads = cfg["heads"], cfg["kv_heads"]
        self.dh = d // self.heads
        d_kv = self.kv_heads * self.dh
        self.q_proj = make_proj(d, d, cfg, layer)
        self.k_proj = make_proj(d, d_kv, cfg, layer)
        self.v_proj = make_proj(d, d_kv, cfg, layer)
        self.o_proj = make_proj(d, d, cfg, layer)

    def forward(self, x, cos, sin, lat):
        B, S, _ = x.shape
        q, lat["q"] = self.q_proj(x, lat.get("q"))
        k, lat["k"] = self.k_proj(x, lat.get("k"))
        v, lat["v"] = self.v_proj(x, lat.get("v"))
        q = q.view(B, S, self.heads, self.dh).transpose(1, 2)
        k = k.view(B, S, self.kv_heads, self.dh).transpose(1, 2)
        v = v.view(B, S, self.kv_heads, self.dh).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        a = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=self.heads != self.kv_heads
        )
        out, lat["o"] = self.o_proj(a.transpose(1, 2).reshape(B, S, -1), lat.get("o"))
        return out


class MLP(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        d, dff = cfg["d"], cfg["d_ff"]
        self.gate_proj = make_proj(d, dff, cfg, layer)
        self.up_proj = make_proj(d, dff, cfg, layer)
        self.down_proj = make_proj(dff, d, cfg, layer)
        self.outer_silu = not (_phi_is_silu(cfg) and cfg["only_lr_act"])

    def forward(self, x, lat):
        g, lat["gate"] = self.gate_proj(x, lat.get("gate"))
        u, lat["up"] = self.up_proj(x, lat.get("up"))
        m = F.silu(g) * u if self.outer_silu else g * u
        out, lat["down"] = self.down_proj(m, lat.get("down"))
        return out


class Block(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["d"], cfg["norm_eps"])
        self.self_attn = Attention(cfg, layer)
        self.post_attention_layernorm = RMSNorm(cfg["d"], cfg["norm_eps"])
        self.mlp = MLP(cfg, layer)

    def forward(self, x, cos, sin, lat):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, lat)
        return x + self.mlp(self.post_attention_layernorm(x), lat)


def rope_tables(seq, dh, theta, dtype, device=None):
    inv_freq = 1.0 / (theta ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh))
    ang = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().to(device, dtype), ang.sin().to(device, dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


class Decoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab"], cfg["d"])
        nn.init.normal_(self.embed_tokens.weight, std=cfg.get("init_std", 0.02))
        self.layers = nn.ModuleList(Block(cfg, l) for l in range(cfg["layers"]))
        self.norm = RMSNorm(cfg["d"], cfg["norm_eps"])


class BoostLM(nn.Module):
    """state_dict keys are the canonical names of docs/MODEL.md."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Decoder(cfg)
        self.tied = cfg["tie_embeddings"]
        if not self.tied:
            self.lm_head = nn.Linear(cfg["d"], cfg["vocab"], bias=False)
            nn.init.normal_(self.lm_head.weight, std=cfg.get("init_std", 0.02))

    def forward(self, ids):
        S = ids.shape[1]
        x = self.model.embed_tokens(ids)
        cos, sin = rope_tables(S, self.cfg["d"] // self.cfg["heads"], self.cfg["rope_theta"], x.dtype, x.device)
        lat = {}
        for block in self.model.layers:
            x = block(x, cos, sin, lat)
        x = self.model.norm(x)
        head = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        return F.linear(x, head)


def make_config(args):
    return {
        "arch": args.arch,
        "d": args.d,
        "d_ff": args.d_ff,
        "layers": args.layers,
        "heads": args.heads,
        "kv_heads": args.kv_heads or args.heads,
        "rank": args.rank,
        "vocab": args.vocab,
        "only_lr_act": bool(args.only_lr_act),
        "tie_embeddings": bool(args.tie_embeddings),
        "rope_theta": args.rope_theta,
        "norm_eps": 1e-6,
        "init_std": 0.02,
        "lax": {
            "flavour": args.lax_flavour,
            "gate": args.lax_gate,
            "kron_a": args.lax_kron_a,
            "ln_eps": 1e-6,
        },
    }


def optimizer_impl(params):
    """Which AdamW implementation PyTorch's defaults pick for these tensors."""
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach

        fused, foreach = _default_to_fused_or_foreach(params, False, False)
        return "fused" if fused else ("foreach" if foreach else "single_tensor")
    except Exception:
        return "unknown"


def add_model_args(ap):
    """The model and step-shape flags of both peers (this one and torch_peer_cuda.py); make_config
    reads them."""
    ap.add_argument("--arch", choices=["full", "svd", "cola", "lax"], required=True)
    ap.add_argument("--d", type=int, required=True)
    ap.add_argument("--d-ff", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--kv-heads", type=int, default=0, help="0: same as --heads")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--only-lr-act", type=int, choices=[0, 1], default=0)
    ap.add_argument("--tie-embeddings", type=int, choices=[0, 1], default=0)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--lax-flavour", choices=["svd", "cola"], default="cola")
    ap.add_argument("--lax-gate", choices=["dense", "kron"], default="dense")
    ap.add_argument("--lax-kron-a", type=int, default=0)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--micro-batch", type=int, required=True)


def check_model_args(ap, args):
    if args.arch != "full" and args.rank <= 0:
        ap.error("--rank is required for low-rank archs")


GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm")


def profiled_split(step, steps):
    """Seconds a step by operator kind (self CPU time), over `steps` profiled steps."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - t0) / steps
    gemm = attention = other = 0.0
    for e in prof.key_averages():
        s = e.self_cpu_time_total / 1e6 / steps
        if e.key in GEMM_OPS:
            gemm += s
        elif "scaled_dot_product" in e.key:
            attention += s
        else:
            other += s
    return {"steps": steps, "step_s": wall, "gemm_s": gemm, "attention_s": attention, "other_s": other}


def gemm_peak():
    """Best float32 `torch.mm` rate (GFLOP/s) over square products of 1024 and 2048, three
    each: the same products `boost bench` times for its own GEMM peak, on the threads set. The
    BLAS behind `torch.mm` may take a slower path than the CPU allows (MKL runs its AVX2
    kernels on AMD CPUs with AVX-512), which this shows beside the step times."""
    best = 0.0
    for n in (1024, 2048):
        a = torch.ones(n, n)
        b = torch.full((n, n), 0.5)
        c = torch.empty(n, n)
        for _ in range(3):
            t0 = time.perf_counter()
            torch.mm(a, b, out=c)
            best = max(best, 2.0 * n**3 / (time.perf_counter() - t0) / 1e9)
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch eager CPU training-step benchmark")
    add_model_args(ap)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument(
        "--clip",
        type=float,
        default=0.0,
        help="clip the gradients' global norm to this before each optimizer step (0: no clipping)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    ap.add_argument(
        "--profile-steps",
        type=int,
        default=0,
        help="after the timed steps, this many steps under torch.profiler, split by operator kind",
    )
    ap.add_argument(
        "--serve",
        action="store_true",
        help="after the warm-up, print {\"ready\": true}, then run one timed step per line "
        "'step' read on stdin, printing {\"step_time_s\": ...} after each, or one profiled step "
        "per line 'profile', printing {\"split\": ...} (see --profile-steps), or the torch.mm "
        "peak per line 'gemm_peak', printing {\"gemm_peak_gflops\": ...}; at the end of stdin "
        "print the summary (--rounds is ignored); `boost bench` alternates its steps with these",
    )
    args = ap.parse_args(argv)
    check_model_args(ap, args)

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)

    cfg = make_config(args)
    model = BoostLM(cfg)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr)
    n_params = sum(p.numel() for p in params)

    ids = torch.randint(0, args.vocab, (args.micro_batch, args.seq))
    targets = torch.randint(0, args.vocab, (args.micro_batch, args.seq))

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(ids)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(params, args.clip)
        opt.step()
        return loss.item()

    load_start = os.getloadavg()
    times, cpu_times = [], []

    def timed(i):
        t0, c0 = time.perf_counter(), time.process_time()
        loss = step()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        if i >= args.warmup:
            times.append(dt)
            cpu_times.append(dc)
        if not args.json:
            kind = "warmup" if i < args.warmup else "step"
            print(f"{kind} {i}: {dt:.3f} s, loss {loss:.4f}", file=sys.stderr)
        return dt

    if args.serve:
        for i in range(args.warmup):
            timed(i)
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            if line.strip() == "step":
                print(json.dumps({"step_time_s": timed(args.warmup + len(times))}), flush=True)
            elif line.strip() == "gemm_peak":
                print(json.dumps({"gemm_peak_gflops": gemm_peak()}), flush=True)
            elif line.strip() == "profile":
                # A profiler that fails (an old torch, say) costs the split, not the run.
                try:
                    answer = {"split": profiled_split(step, 1)}
                except Exception as e:  # noqa: BLE001
                    answer = {"error": f"{type(e).__name__}: {e}"}
                print(json.dumps(answer), flush=True)
            else:
                break
    else:
        for i in range(args.warmup + args.rounds):
            timed(i)
    if not times:
        sys.exit("torch_peer: no timed step was asked for")

    split = profiled_split(step, args.profile_steps) if args.profile_steps > 0 else None
    median = statistics.median(times)
    tokens = args.micro_batch * args.seq
    out = {
        "step_time_s": median,
        "step_times_s": times,
        "tokens_per_sec": tokens / median,
        "step_time_min_s": min(times),
        "cpu_times_s": cpu_times,
        "loadavg_start": list(load_start),
        "loadavg_end": list(os.getloadavg()),
        "params": n_params,
        "threads": args.threads,
        "torch_version": torch.__version__,
        "arch": args.arch,
        "tokens_per_step": tokens,
        "dtype": "float32",
        "optimizer": f"AdamW({optimizer_impl(params)})",
        "grad_clip": args.clip,
        "config": cfg,
    }
    if split is not None:
        out["split"] = split
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

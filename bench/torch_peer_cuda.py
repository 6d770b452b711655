"""PyTorch eager GPU peer for the CUDA backend's training benchmark.

The same model as bench/torch_peer.py (its BoostLM, state_dict keys = canonical names), on a
GPU, with the same mixed precision as the Rust CUDA backend's `Precision::Bf16`: fp32
parameters and AdamW state (fused AdamW), the forward under
`torch.autocast("cuda", dtype=torch.bfloat16)` so matrix products run in bf16 with fp32
accumulation while norms, softmax statistics and the loss stay fp32. `--dtype fp32` turns
autocast off (and TF32 off) for the fp32 comparison.

    python3 bench/torch_peer_cuda.py --device cuda --dtype bf16 --arch cola --d 512 \\
        --d-ff 1376 --layers 8 --heads 8 --rank 128 --vocab 8192 --seq 256 --micro-batch 8 --json

One JSON line on stdout: step_time_s (median of the timed steps, each bracketed by CUDA
events after a synchronize), step_times_s, tokens_per_sec, peak_memory_bytes
(torch.cuda.max_memory_allocated), device name, dtype, torch and CUDA versions, params and
the config. `--device cpu` runs the same script on the CPU (a smoke test of the script
itself; no timing claims).
"""

import argparse
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peer import BoostLM, add_model_args, check_model_args, make_config  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch eager GPU training-step benchmark")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    add_model_args(ap)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    args = ap.parse_args(argv)
    check_model_args(ap, args)

    dev = torch.device(args.device)
    gpu = dev.type == "cuda"
    if gpu and not torch.cuda.is_available():
        ap.error("--device cuda: PyTorch sees no GPU")
    torch.manual_seed(args.seed)
    if gpu:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    cfg = make_config(args)
    model = BoostLM(cfg).to(dev)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, fused=gpu)
    n_params = sum(p.numel() for p in params)
    ids = torch.randint(0, args.vocab, (args.micro_batch, args.seq), device=dev)
    targets = torch.randint(0, args.vocab, (args.micro_batch, args.seq), device=dev)
    amp = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16")

    def step():
        opt.zero_grad(set_to_none=True)
        with amp:
            logits = model(ids)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))
        loss.backward()
        opt.step()
        return loss

    if gpu:
        torch.cuda.reset_peak_memory_stats(dev)
    times = []
    for i in range(args.warmup + args.rounds):
        if gpu:
            torch.cuda.synchronize(dev)
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record()
            loss = step()
            t1.record()
            torch.cuda.synchronize(dev)
            dt = t0.elapsed_time(t1) / 1e3
        else:
            import time

            c = time.perf_counter()
            loss = step()
            dt = time.perf_counter() - c
        if i >= args.warmup:
            times.append(dt)
        if not args.json:
            kind = "warmup" if i < args.warmup else "step"
            print(f"{kind} {i}: {dt * 1e3:.2f} ms, loss {loss.item():.4f}", file=sys.stderr)

    median = statistics.median(times)
    tokens = args.micro_batch * args.seq
    out = {
        "step_time_s": median,
        "step_times_s": times,
        "step_time_min_s": min(times),
        "tokens_per_sec": tokens / median,
        "tokens_per_step": tokens,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(dev) if gpu else None,
        "device": torch.cuda.get_device_name(dev) if gpu else "cpu",
        "dtype": "bf16 autocast, fp32 master weights" if args.dtype == "bf16" else "float32",
        "optimizer": "AdamW(fused)" if gpu else "AdamW",
        "params": n_params,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "arch": args.arch,
        "config": cfg,
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The device benchmark: a 1B training step on one GPU against PyTorch, in one call that fits
a lent GPU's few minutes. Run it through bench/gpu_paper.sh, which finds the GPU libraries;
see that script for the stages. Standard library only (PyTorch is the peer's, not ours).

Every stage runs in priority order with its own timeout, inside --budget seconds, and the
record, OUT_DIR/gpu_paper.json (schema boost-gpu-paper/1), is rewritten (to a temporary file,
then renamed) after each measurement, so a run cut short keeps what it measured.
bench/results/render.py --gpu-paper FILE turns it into the docs' table.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import gpu_paper_attention

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER = os.path.join(ROOT, "bench", "torch_peer_cuda.py")
SCHEMA = "boost-gpu-paper/1"
# The emulator runs every stage at this shape (a step there takes about a second).
TINY = ["model.d=64", "model.d_ff=172", "model.layers=2", "model.heads=4", "model.rank=16", "model.vocab=512"]


class Run:
    """The record, the clock and the budget of one benchmark run."""

    def __init__(self, args):
        self.args = args
        self.emulate = args.emulate
        self.out = args.out
        self.t0 = time.monotonic()
        self.failures = []
        self.record = {
            "schema": SCHEMA,
            "mode": "emulator (dry run: no timing claims)" if self.emulate else "gpu",
            "commit": git_commit(args.bin),
            "features": read_first(os.path.join(args.bin, "FEATURES")),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "budget_s": args.budget,
            "flop_convention": "model FLOPs of `boost plan`: 6 per parameter per token for the weights' GEMMs "
            "(forward 2, backward 4), attention causal half (6·s·d per token per layer); no recompute counted",
            "probe": None,
            "gemm_peak": None,
            "shapes": [],
            "stages": [],
        }

    def left(self):
        return self.args.budget - (time.monotonic() - self.t0)

    def save(self):
        path = os.path.join(self.out, "gpu_paper.json")
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.record, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)

    def call(self, name, argv, cap, env=None, lines=False):
        """Run argv with a timeout of min(cap, the budget left); its last stdout line as JSON
        (with `lines`, every line that is one), or None (the reason kept in the record's
        stages and in OUT_DIR/NAME.log)."""
        timeout = min(cap, self.left() - 2)
        entry = {"name": name, "status": "skipped: budget spent", "seconds": 0.0}
        self.record["stages"].append(entry)
        if timeout < 3:
            self.save()
            return None
        start = time.monotonic()
        log = os.path.join(self.out, f"{name}.log")
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env and {**os.environ, **env})
            out, err, rc = p.stdout, p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            out, err, rc = e.stdout or "", e.stderr or "", "timeout"
            out = out.decode() if isinstance(out, bytes) else out
            err = err.decode() if isinstance(err, bytes) else err
        except OSError as e:
            out, err, rc = "", str(e), "could not start"
        entry["seconds"] = round(time.monotonic() - start, 2)
        with open(log, "w", encoding="utf-8") as f:
            f.write(f"$ {' '.join(argv)}\n# rc {rc}\n{err}\n{out}")
        result = last_json(out)
        if lines:
            result = [v for v in map(last_json, out.splitlines()) if v] if rc == 0 else []
            result = result or None
        # cuda_bench exits 3 for a shape the memory check refuses: a result, not a failure.
        ok = result is not None and (rc == 0 or (rc == 3 and not lines and result.get("fits") is False))
        entry["status"] = "ok" if ok else f"failed (rc {rc}; see {name}.log)"
        if not ok:
            self.failures.append(name)
            result = None
        self.save()
        return result

    # The programs.
    def bench(self, *a):
        return [os.path.join(self.args.bin, "cuda_bench")] + (["--emulate"] if self.emulate else []) + list(a)

    def boost(self, *a):
        return [os.path.join(self.args.bin, "boost")] + list(a)

    def peer(self, *a):
        return [sys.executable, PEER, "--device", "cpu" if self.emulate else "cuda"] + list(a)


def set_flags(sets):
    """`--set KEY=VALUE` for each assignment: how cuda_bench and `boost plan` take a shape."""
    return [f for s in sets for f in ("--set", s)]


def last_json(text):
    """The whole text as one JSON object (`boost plan --json`), or its last line that is one."""
    for chunk in [text] + [l for l in reversed(text.splitlines()) if l.startswith("{")]:
        try:
            v = json.loads(chunk)
            if isinstance(v, dict):
                return v
        except json.JSONDecodeError:
            pass
    return None


def read_first(path):
    """The first line of a file the bundle builder wrote, or None."""
    return open(path).read().strip() if os.path.exists(path) else None


def git_commit(bin_dir):
    built = os.path.join(bin_dir, "COMMIT")
    if os.path.exists(built):
        return open(built).read().strip()
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip() or None
    except OSError:
        return None


def wheels():
    """The versions of the nvidia wheels installed (cuBLAS, cuDNN, NCCL): what the engine's
    cuBLAS and PyTorch load on a GPU machine."""
    from importlib import metadata

    found = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith(("nvidia-cublas", "nvidia-cudnn", "nvidia-nccl", "nvidia-cuda-runtime")):
            found[name] = dist.version
    return found


def has_torch():
    return subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0


def probe(run):
    found = run.call("probe", run.bench("--probe"), 30)
    info = {"engine": found and found["device"]}
    if not run.emulate and shutil.which("nvidia-smi"):
        q = "name,memory.total,driver_version,clocks.max.sm,power.limit"
        p = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True, text=True)
        info["nvidia_smi"] = p.stdout.strip()
    if run.torch:
        code = ("import json, torch; c = torch.cuda.is_available(); print(json.dumps({'torch': torch.__version__, "
                "'cuda': torch.version.cuda, 'cudnn': torch.backends.cudnn.version(), "
                "'nccl': '.'.join(map(str, torch.cuda.nccl.version())) if c else None}))")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        info["libraries"] = json.loads(p.stdout) if p.returncode == 0 else p.stderr.strip()[-300:]
    info["wheels"] = wheels()
    info["cpu"] = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), None)
    run.record["probe"] = info
    run.save()
    name = ((found or {}).get("device") or {}).get("name", "")
    return "h200" if "H200" in name else "h100"


def gemm_peak(run):
    n = 256 if run.emulate else 8192
    ours = run.call("gemm-boost", run.bench("--gemm-peak", str(n)), 40)
    theirs = run.call("gemm-torch", run.peer("--gemm-peak", str(n)), 40) if run.torch else None
    rates = [r["tflops"] for r in (ours, theirs) if r]
    run.record["gemm_peak"] = {
        "n": n, "boost_tflops": ours and ours["tflops"], "torch_tflops": theirs and theirs["tflops"],
        "peak_tflops": max(rates) if rates else None,
        "note": "MFU is against peak_tflops, the better of the two bf16 GEMMs measured here",
    }
    run.save()


def plan(run, tag, sets, cluster):
    """`boost plan` for the shape: step time, memory (the bf16 plan's, the engine's: bf16
    activations, fp32 residual stream and optimizer state, what the GPU memory check uses),
    model FLOPs."""
    bf16 = run.call(f"plan-{tag}", run.boost("plan", "--cluster", cluster, "--json", *set_flags(sets)), 30)
    if not bf16:
        return None
    return {
        "cluster": cluster, "step_time_s": bf16["iteration_time_s"], "memory_bytes": bf16["memory"]["total"],
        "fits": bf16["fits"], "model_flops": bf16["flops"]["model_flops"],
        "mfu": bf16["flops"]["mfu"], "model": bf16["config"]["model"],
    }


def peer_flags(m, seq, mb):
    return ["--arch", m["arch"], "--d", str(m["d"]), "--d-ff", str(m["d_ff"]), "--layers", str(m["layers"]),
            "--heads", str(m["heads"]), "--kv-heads", str(m["kv_heads"] or m["heads"]), "--rank", str(m["rank"]),
            "--vocab", str(m["vocab"]), "--only-lr-act", str(int(m["only_lr_act"])), "--seq", str(seq), "--micro-batch", str(mb)]


def measure(run, model, arch, seq, mb, recompute, cluster, peer, tiny=None, env=None, attention="auto", graphs=False):
    """One shape: the plan, our steps alternated with the peer's (`peer`: "eager",
    "compiled" or None), the record's entry filled as each finishes. `tiny`: the emulator's
    small dimensions (default: on the emulator); `env`: cuda_bench's extra environment;
    `attention`: train.attention; `graphs`: our steps with train.cuda_graphs."""
    tiny = run.emulate if tiny is None else tiny
    tag = f"{model}-{arch}-{seq}x{mb}-{recompute}" + (f"-{peer}" if peer == "compiled" else "")
    tag += ("" if attention == "auto" else f"-{attention}") + ("-graphs" if graphs else "")
    peers = [peer] if peer else []
    sets = [f"model.preset={model}", f"model.arch={arch}", f"train.seq_len={seq}", f"train.micro_batch={mb}",
            f"train.recompute={recompute}", f"train.attention={attention}"] + (TINY if tiny else [])
    entry = {"model": "tiny" if tiny else model, "preset": model, "arch": arch, "seq": seq, "micro_batch": mb,
             "recompute": recompute, "attention_asked": attention, "peer": peer, "fits": None, "boost": None,
             "torch": None, "torch_compiled": None, "cuda_graphs": graphs}
    run.record["shapes"].append(entry)
    p = plan(run, tag, sets, cluster)
    entry["plan"] = p
    if p:
        entry["dims"] = {k: p["model"][k] for k in ("d", "d_ff", "layers", "heads", "rank", "vocab")}
    steps = ["--warmup", "1", "--rounds", "2"] if run.emulate else ["--warmup", "2", "--rounds", "5"]
    prof = ["--profile", "1" if run.emulate else "2"]
    reps = 1 if run.emulate else 2
    ours, theirs = [], {k: [] for k in peers}
    for rep in range(reps):
        if rep > 0 and run.left() < 60:
            break
        ours_sets = sets + (["train.device=cuda", "train.cuda_graphs=true"] if graphs else [])
        r = run.call(f"boost-{tag}-{rep}", run.bench(*set_flags(ours_sets), *steps, *(prof if rep == 0 else [])), 120, env)
        if r and r.get("fits") is False:
            entry.update(fits=False, error=r["error"])
            run.save()
            return
        if r:
            ours.append(r)
        for kind in peers:
            if run.torch and p:
                flags = peer_flags(p["model"], seq, mb) + steps + (prof if rep == 0 else []) + ["--json"]
                flags += ["--compile"] if kind == "compiled" else []
                t = run.call(f"torch-{kind}-{tag}-{rep}", run.peer(*flags), 180 if kind == "compiled" else 120)
                if t:
                    theirs[kind].append(t)
        summarize(run, entry, ours, theirs)


def refusal(run, cluster):
    """The emulator with an H100's 80 GiB: 7b CoLA at seq 4096 × 4 without recompute must be
    refused by cuda_bench's memory check (exit 3, the breakdown and what to lower), as on a GPU,
    never allocated. A dry-run failure if it is not."""
    gib80 = str(80 << 30)
    p = plan(run, "7b-refusal", ["model.preset=7b", "model.arch=cola", "train.seq_len=4096", "train.micro_batch=4"], cluster)
    if not p or p["memory_bytes"] <= int(gib80):
        run.failures.append("refusal: the plan says 7b at 4096 × 4 fits 80 GiB; nothing to refuse")
        return
    measure(run, "7b", "cola", 4096, 4, "none", cluster, None, tiny=False, env={"BOOST_GPU_MEMORY": gib80})
    entry = run.record["shapes"][-1]
    if entry["fits"] is not False or "train.recompute" not in entry.get("error", ""):
        run.failures.append("refusal: 7b at 4096 × 4 in 80 GiB was not refused with what to lower")
    run.save()


def side(results, peak, flops):
    """Medians over repeats of one side's figures; MFU against the measured peak."""
    if not results:
        return None
    step = statistics.median(r["step_time_s"] for r in results)
    mem = [r["peak_memory_bytes"] for r in results if r.get("peak_memory_bytes") is not None]
    split = next((r["split"] for r in results if r.get("split")), None)
    out = {"step_time_s": step, "step_times_s": [r["step_time_s"] for r in results], "tokens_per_sec": results[0]["tokens_per_step"] / step,
           "peak_memory_bytes": max(mem) if mem else None, "split": split, "runs": len(results)}
    if peak and flops:
        out["mfu"] = flops / step / (peak * 1e12)
    backs = [r["step_time_back_to_back_s"] for r in results if r.get("step_time_back_to_back_s") is not None]
    if backs:
        out["step_time_back_to_back_s"] = statistics.median(backs)
    for k in ("activations", "kernels", "sdpa_backend", "attention", "attention_why", "launches_per_step"):
        if k in results[0]:
            out[k] = results[0][k]
    return out


def summarize(run, entry, ours, theirs):
    peak = (run.record["gemm_peak"] or {}).get("peak_tflops")
    flops = entry["plan"] and entry["plan"]["model_flops"]
    entry["fits"] = True if ours else entry["fits"]
    entry["boost"] = side(ours, peak, flops)
    for kind, key in (("eager", "torch"), ("compiled", "torch_compiled")):
        entry[key] = side(theirs.get(kind, []), peak, flops)
        if entry[key] and entry["boost"]:
            entry[f"vs_{key}"] = entry[key]["step_time_s"] / entry["boost"]["step_time_s"]
    if entry["plan"] and entry["boost"]:
        entry["plan"]["step_error"] = entry["plan"]["step_time_s"] / entry["boost"]["step_time_s"] - 1
        mem = entry["boost"]["peak_memory_bytes"]
        if mem:
            entry["plan"]["memory_error"] = entry["plan"]["memory_bytes"] / mem - 1
    run.save()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin", help="the folder holding cuda_bench and boost")
    ap.add_argument("out", help="a new or empty folder for gpu_paper.json and the logs")
    ap.add_argument("--budget", type=float, default=300.0, help="seconds for the whole run (default 300)")
    ap.add_argument("--emulate", action="store_true", help="the CUDA emulator at a tiny shape, the peer on the CPU")
    ap.add_argument("--no-peer", action="store_true", help="leave PyTorch out even where it is installed")
    args = ap.parse_args()
    # OUT_DIR is new, or an empty folder: nothing already there is ever replaced.
    if os.path.lexists(args.out) and not (os.path.isdir(args.out) and not os.listdir(args.out)):
        what = "a link to no folder" if os.path.islink(args.out) and not os.path.isdir(args.out) else (
            "not empty" if os.path.isdir(args.out) else "not a folder")
        sys.exit(f"gpu_paper: {args.out} is {what}; it is kept: name a new or empty folder for the results")
    os.makedirs(args.out, exist_ok=True)
    run = Run(args)
    run.torch = not args.no_peer and has_torch()
    run.record["peer"] = "PyTorch eager (and compiled as the budget allows)" if run.torch else "absent (PyTorch not installed)"
    run.save()
    cluster = probe(run)
    gemm_peak(run)
    gpu_paper_attention.stage(run)
    # In priority order: the paper's 1B shape against eager PyTorch, at seq 4096 × 4 then × 1;
    # 3B and 7B CoLA on one GPU with recompute; the 1B shape against compiled PyTorch. The
    # emulator runs the same list at seq 32 × 2 and × 1.
    seq, (big, small) = (32, (2, 1)) if run.emulate else (4096, (4, 1))
    for mb in (big, small):
        for arch in ("full", "cola"):
            measure(run, "1b", arch, seq, mb, "none", cluster, "eager")
    # The 1B step with the other attention: ours where `auto` took cuDNN.
    chosen = next((s["boost"] for s in run.record["shapes"] if s["boost"]), None) or {}
    if chosen.get("attention") == "cudnn":
        for arch in ("full", "cola"):
            measure(run, "1b", arch, seq, big, "none", cluster, None, attention="boost")
    else:
        run.record["attention"]["steps"] = f"the 1B steps ran ours only: {chosen.get('attention_why', 'no step ran')}"
        run.save()
    for model in ("3b", "7b"):
        for recompute in ("lowrank", "full"):
            measure(run, model, "cola", seq, small, recompute, cluster, None)
    # The 1B CoLA step again with CUDA graphs: its launches from the host (`launches_per_step`).
    measure(run, "1b", "cola", seq, big, "none", cluster, None, graphs=True)
    for arch in ("full", "cola"):
        if run.torch and (run.left() > 120 or run.emulate):
            measure(run, "1b", arch, seq, big, "none", cluster, "compiled")
    if run.emulate:
        refusal(run, cluster)
    run.record["seconds"] = round(time.monotonic() - run.t0, 1)
    run.record["failed"] = run.failures
    run.save()
    print(f"gpu_paper: {len(run.record['shapes'])} shapes in {run.record['seconds']} s; "
          f"{len(run.failures)} failed{': ' + ', '.join(run.failures) if run.failures else ''}; {os.path.join(args.out, 'gpu_paper.json')}")
    sys.exit(1 if run.failures else 0)


if __name__ == "__main__":
    main()

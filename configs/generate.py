#!/usr/bin/env python3
"""Writes the ready configurations of this folder: the paper's and CoLA's models, full rank and
CoLA at 60M, 130M, 350M, 1B and 7B, with CoLA's pre-training recipe, each laid out as
`boost plan --search` ranks first on one H100 and on one node of eight, and a comment with the
planner's step time for both. Standard library only.

    python3 configs/generate.py [BOOST]     # BOOST: the binary (default target/release/boost)

crates/cli/tests/configs.rs checks that every file loads, that its layout fits, and that the
step times in its comments are what `boost plan` predicts for it today: rerun this script when
the cost model or a preset changes.
"""

import json
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
BOOST = sys.argv[1] if len(sys.argv) > 1 else str(HERE.parent / "target" / "release" / "boost")
CLUSTER = "h100"
SEQ, GLOBAL = 256, 512

# CoLA's recipe (docs/MODEL.md): seq 256, 512 sequences a step, warm-up then cosine to 10 %.
# (preset, name, CoLA lr, steps, warm-up)
SIZES = [
    ("cola-60m", "60m", 6e-3, 10_000, 2_000),
    ("cola-130m", "130m", 3e-3, 20_000, 2_000),
    ("cola-350m", "350m", 3e-3, 60_000, 6_000),
    ("1b", "1b", 2e-3, 100_000, 10_000),
    ("7b", "7b", None, 100_000, 10_000),
]
# Full rank is not in the recipe, nor is CoLA at 7B: a common starting rate, to tune.
UNTUNED_LR = 1e-3

# The layout keys `boost plan --search` chooses, as the config names them.
LAYOUT = [
    ("parallel", "tp", "tp"), ("parallel", "pp", "pp"), ("parallel", "dp", "dp"), ("parallel", "zero", "zero"),
    ("parallel", "scheme", "scheme"), ("parallel", "norm", "norm"), ("parallel", "grouping", "grouping"),
    ("parallel", "schedule", "schedule"), ("train", "micro_batch", "micro_batch"),
    ("train", "accumulation", "accumulation"), ("train", "recompute", "recompute"),
    ("train", "recompute_layers", "recompute_layers"),
]


def search(preset, arch, gpus):
    """The best layout `boost plan --search` finds on `gpus` H100s, or None when none fits."""
    out = subprocess.run(
        [BOOST, "plan", "--cluster", CLUSTER, "--set", f"model.preset={preset}", "--set", f"model.arch={arch}",
         "--set", f"train.seq_len={SEQ}", "--global-batch", str(GLOBAL), "--search", "--gpus", str(gpus),
         "--top", "1", "--json"],
        capture_output=True, text=True, check=True).stdout
    rows = json.loads(out)
    fitting = [r for r in rows if r["prediction"]["fits"]]
    return fitting[0]["prediction"] if fitting else None


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return repr(v)


def sets(p, base):
    """The --set flags that turn layout `base` into `p`'s."""
    c, b = p["config"], base["config"]
    return " ".join(f"--set {sec}.{key}={toml_value(c[f]).strip(chr(34))}" for sec, key, f in LAYOUT if c[f] != b[f])


def describe(p, gpus):
    """The comment line the test checks: `# plan h100 x1: 1.0615 s a step, ...`."""
    tokens = SEQ * GLOBAL
    return (f"# plan {CLUSTER} x{gpus}: {p['iteration_time_s']:.4g} s a step, {tokens / p['iteration_time_s']:.0f} tokens/s, "
            f"MFU {100 * p['flops']['mfu']:.1f} %, {p['memory']['total'] / 2**30:.1f} GiB a GPU")


def write(preset, name, arch, lr, steps, warmup):
    one, node = search(preset, arch, 1), search(preset, arch, 8)
    main = one or node
    label = "CoLA" if arch == "cola" else "Full-rank"
    c = main["config"]
    m = c["model"]
    lines = [
        f"# {label} {name.upper()} (d {m['d']}, d_ff {m['d_ff']}, {m['layers']} layers, {m['heads']} heads"
        + (f", rank {m['rank']}" if arch == "cola" else "") + f", vocabulary {m['vocab']}),",
        f"# CoLA's pre-training recipe: seq {SEQ}, {GLOBAL} sequences a step, {steps} steps with {warmup} of warm-up,",
        "# cosine decay to 10 % of the peak rate, AdamW (0.9, 0.999), weight decay 0.01, clipping at 0.5.",
    ]
    if lr is None:
        lr = UNTUNED_LR
        lines.append(f"# The recipe gives no rate for {label.lower()} {name}: {lr:g} is a starting point, to tune.")
    lines += [
        "#",
        "# Train it on your token shards (`boost data --input ... --out data/corpus`):",
        f"#   boost train --config configs/{arch}-{name}.toml --set data.dir=data/corpus --set data.corpus=none",
        "# on a GPU with --set train.device=cuda; on a node of eight, one process per GPU under mpirun.",
        "#",
        f"# Step time, as `boost plan --cluster {CLUSTER} --config configs/{arch}-{name}.toml` predicts it",
        "# (a prediction, not a measurement: docs/COST_MODEL.md says what it models and how far it held):",
    ]
    if one:
        lines.append(describe(one, 1))
    else:
        lines.append(f"# One {CLUSTER.upper()} cannot hold it (every layout `boost plan --search --gpus 1` tries runs out of memory):")
        lines.append("# the layout below is the 8-GPU one.")
    if node:
        lines.append(describe(node, 8))
        if one:
            lines.append(f"#   with {sets(node, one)}")
    out = "\n".join(lines) + "\n\n"
    out += f'[model]\npreset = "{preset}"\narch = "{arch}"\n\n'
    out += f"[train]\nseq_len = {SEQ}\nsteps = {steps}\nwarmup_steps = {warmup}\nlr = {lr:g}\n"
    out += "weight_decay = 0.01\nbeta1 = 0.9\nbeta2 = 0.999\ngrad_clip = 0.5\nmin_lr_ratio = 0.1\n"
    train = [(k, c[f]) for s, k, f in LAYOUT if s == "train"]
    out += "".join(f"{k} = {toml_value(v)}\n" for k, v in train)
    out += "\n[parallel]\n" + "".join(f"{k} = {toml_value(c[f])}\n" for s, k, f in LAYOUT if s == "parallel")
    write_generated(HERE / f"{arch}-{name}.toml", MARK + "\n" + out)
    print(f"configs/{arch}-{name}.toml: {main['setup']}")


# The first line of every file this script writes: only such a file is ever replaced.
MARK = "# Written by configs/generate.py from boost plan; rerun it rather than editing the figures."


def write_generated(path, text):
    """Write `path` through a temporary beside it and a rename; an existing file without the
    mark (a user's, or one edited by hand past its first line) is kept and named."""
    if path.is_symlink() or (path.exists() and not path.read_text(encoding="utf-8").startswith(MARK + "\n")):
        sys.exit(f"{path}: not written by configs/generate.py (or a link); it is kept. Move it away to regenerate")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def main():
    for preset, name, lr, steps, warmup in SIZES:
        for arch in ("full", "cola"):
            write(preset, name, arch, lr if arch == "cola" else None, steps, warmup)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Render the benchmark records of bench/results/*.json into the tables of docs/PERFORMANCE.md
and the headline table of README.md (standard library only).

    python3 bench/results/render.py           # rewrite the tables in place
    python3 bench/results/render.py --check   # exit 1 if a table is out of date

Each table sits between `<!-- results:NAME -->` and `<!-- /results -->` in its file; the text
around the markers is left alone. NAME is a record group (cpu, gpu, parallel, other) in
docs/PERFORMANCE.md, `gpu-paper` there (the device benchmark's records, below), or `headline`
in README.md (the records with a `readme` position).

A record (schema boost-bench-record/1) is either written by `boost bench --record FILE` or
transcribed from an earlier document, naming it in `source`. One written by `boost bench
--device cuda --record FILE` is in the gpu group, with each model's launches a step. Fields read here: id, title,
group, command, commit, source, machine {cpu, simd, gpu, threads}, statistic, figures
[{name, value, unit, runs}], headline, readme. A record written by `boost bench --record` has
figures per architecture instead ({arch, vs_torch, mfu, ...}); they are turned into the same
form.

A device benchmark record (schema boost-gpu-paper/1, bench/gpu_paper.sh's gpu_paper.json,
committed under bench/results/) is a table of its own, one row per measured shape;
`render.py --gpu-paper FILE` prints that table for any such file (the dry run's included).
"""

import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MAX_CELL = 300


GPU_PAPER = "boost-gpu-paper/1"


def load_records():
    records = []
    for path in sorted(HERE.glob("*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        if r.get("schema") == GPU_PAPER:
            r["_file"] = path.name
            records.append(r)
            continue
        if r.get("schema") != "boost-bench-record/1":
            sys.exit(f"{path}: not a boost-bench-record/1")
        r.setdefault("id", path.stem)
        r["_file"] = path.name
        if "report" in r:  # written by `boost bench --record`
            r.setdefault("group", "cpu")
            r.setdefault("title", "training step against PyTorch eager (boost bench --record)")
            r.setdefault("statistic", "medians over the run's timed steps and alternated pairs")
            figures = []
            for f in r.get("figures", []):
                if "arch" not in f:
                    figures.append(f)
                    continue
                if f.get("vs_torch") is not None:
                    figures.append({"name": f"{f['arch']} vs PyTorch eager", "value": round(f["vs_torch"], 2), "unit": "×"})
                if f.get("mfu") is not None:
                    figures.append({"name": f"{f['arch']} MFU", "value": round(100 * f["mfu"], 1), "unit": "%"})
                figures.append({"name": f"{f['arch']} tokens/s", "value": round(f["tokens_per_sec"]), "unit": ""})
                figures += launch_figures(f)
            if r.get("emulated"):
                r["notes"] = "on the CUDA kernel emulator: times are not GPU times"
            r["figures"] = figures
        records.append(r)
    return records


def launch_figures(f):
    """A `boost bench --device cuda` record's launches of one steady-state step: kernels and
    GEMMs, and those the host launched (a CUDA graph counts once)."""
    l = f.get("launches_per_step")
    if not l:
        return []
    return [{"name": f"{f['arch']} launches a step", "value": l["total"], "unit": "",
             "note": f"{l['from_host']} from the host, {l['by_kind'].get('gemm', 0)} GEMMs"}]


def number(v):
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def figure(f):
    unit = f.get("unit", "")
    sep = "" if unit in ("×", "%", "") else " "
    text = f"{f['name']}: **{number(f['value'])}{sep}{unit}**"
    if f.get("runs"):
        text += " (" + ", ".join(number(x) for x in f["runs"]) + ")"
    if f.get("note"):
        text += f" ({f['note']})"
    return text


def machine(m):
    parts = [m.get("gpu"), m.get("cpu"), m.get("simd")]
    text = "; ".join(p for p in parts if p)
    if m.get("threads"):
        text += f"; {m['threads']} thread{'s' if m['threads'] != 1 else ''}"
    return text


def commit(r):
    c = r.get("commit") or "not recorded"
    src = r.get("source")
    if src:
        return f"{c} (from {src['file']} at {src['commit']})"
    return c


def cell(text):
    text = str(text).replace("|", "\\|").replace("\n", " ")
    if len(text) > MAX_CELL:
        sys.exit(f"a table cell is over {MAX_CELL} characters: {text[:80]}…")
    return text


def row(cells):
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def group_table(records, group, link_prefix):
    lines = [
        "| what | machine | command | figures (spread of runs) | runs | code measured | record |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        if r.get("group") != group:
            continue
        figures = "; ".join(figure(f) for f in r["figures"])
        if r.get("notes"):
            figures += f"; {r['notes']}"
        link = f"[{r['id']}]({link_prefix}{r['_file']})"
        lines.append(row([r["title"], machine(r["machine"]), f"`{r['command']}`", figures, r.get("statistic", ""), commit(r), link]))
    return "\n".join(lines)


def pct(x):
    return "–" if x is None else f"{100 * x:+.0f} %"


def size(b):
    if not b:
        return "–"
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.1f} MiB"


def step_ms(side):
    if not side:
        return "–"
    kernels = f" ({side['attention']} attention)" if side.get("attention") else ""
    b2b = side.get("step_time_back_to_back_s")
    back = "" if b2b is None else f"; {1e3 * b2b:.1f} back to back"
    return f"{1e3 * side['step_time_s']:.1f}{kernels}{back}"


def attention_rows(r):
    """The attention stage of a device benchmark record: TFLOP/s of each side, or why not."""
    a = r.get("attention") or {}
    if not a.get("shapes"):
        return []

    def rate(side):
        if not side:
            return "–"
        if "error" in side:
            return f"not run: {side['error']}"
        return f"{side['fwd_tflops']:.3g} / {side['bwd_tflops']:.3g}"

    lines = [f"\nAttention alone, {a.get('mode', 'on the GPU')}: TFLOP/s forward / backward, FLOPs {a['flops_counted']}; "
             f"bf16 buffers.{' PyTorch ' + a['torch'] + '.' if isinstance(a.get('torch'), str) else ''}\n",
             "| batch × seq | heads (kv) × head_dim | boost | cuDNN | PyTorch SDPA (flash) |", "|" + "---|" * 5]
    for x in a["shapes"]:
        sh = x["shape"]
        lines.append(row([f"{sh['batch']} × {sh['seq']}", f"{sh['heads']} ({sh['kv_heads']}) × {sh['head_dim']}",
                          rate(x.get("boost")), rate(x.get("cudnn")), rate(x.get("torch"))]))
    if a.get("steps"):
        lines.append(f"\n{a['steps']}")
    return lines


def split(side):
    s = side and side.get("split")
    if not s:
        return "–"
    parts = [s["gemm_s"], s["attention_s"], s["other_s"], s.get("idle_s", 0.0)]
    total = sum(parts) or 1.0
    return " / ".join(f"{100 * p / total:.0f}" for p in parts)


def launches(side):
    """Kernels and GEMMs a step, and how many the host launched (graphs once each)."""
    l = side and side.get("launches_per_step")
    if not l:
        return "–"
    return f"{l['total']} ({l.get('from_host', l['total'])})"


def gpu_paper_rows(r):
    """The rows of one device benchmark record: a shape each."""
    lines = []
    for s in r["shapes"]:
        ours, plan = s.get("boost"), s.get("plan") or {}
        peer = s.get("torch") or s.get("torch_compiled")
        vs = s.get("vs_torch") or s.get("vs_torch_compiled")
        who = {"eager": "eager", "compiled": "compiled"}.get(s.get("peer"), "–")
        dims = s.get("dims") or {}
        model = f"{s['preset']} as tiny (d {dims.get('d', '?')}, {dims.get('layers', '?')} layers)" if s["model"] == "tiny" else s["model"]
        model += ", CUDA graphs" if s.get("cuda_graphs") else ""
        fits = "yes" if s.get("fits") else ("no" if s.get("fits") is False else "not run")
        lines.append(row([
            model, s["arch"], f"{s['seq']} × {s['micro_batch']}", s["recompute"], fits, step_ms(ours),
            "–" if not ours else f"{ours['tokens_per_sec']:.0f}",
            "–" if not ours or ours.get("mfu") is None else f"{100 * ours['mfu']:.1f} %", split(ours),
            size(ours and ours.get("peak_memory_bytes")), launches(ours), who, step_ms(peer),
            "–" if vs is None else f"{vs:.2f}×", size(peer and peer.get("peak_memory_bytes")),
            "–" if not (peer or {}).get("split") else str(peer["split"].get("kernel_calls", "–")),
            "–" if not plan else f"{1e3 * plan['step_time_s']:.1f} ({pct(plan.get('step_error'))})",
            "–" if not plan else f"{size(plan.get('memory_bytes'))} ({pct(plan.get('memory_error'))})",
        ]))
    return lines


def gpu_paper_table(records, link_prefix):
    head = [
        "| model | arch | seq × mb | recompute | fits | boost step (ms; steps queued back to back) | tokens/s | MFU | GEMM / attention / other / idle (%) "
        "| peak memory | launches a step (from the host) | PyTorch | PyTorch step (ms) | PyTorch / boost | PyTorch peak memory "
        "| PyTorch kernels a step | plan step (ms, error) | plan memory (error) |",
        "|" + "---|" * 18,
    ]
    chosen = [r for r in records if r.get("schema") == GPU_PAPER]
    if not chosen:
        return "No device benchmark record yet: `bench/gpu_paper.sh` writes one on a GPU (see below)."
    out = []
    for r in chosen:
        gpu = ((r.get("probe") or {}).get("engine") or {}).get("name", "GPU not recorded")
        peak = (r.get("gemm_peak") or {}).get("peak_tflops")
        link = f"[{r['_file']}]({link_prefix}{r['_file']})" if "_file" in r else "this record"
        out.append(f"{gpu}, {r['mode']}, commit {r.get('commit') or 'not recorded'}; bf16 GEMM peak "
                   f"{'–' if peak is None else f'{peak:.3g} TFLOP/s'} (MFU's denominator); {link}.\n")
        out += head + gpu_paper_rows(r) + attention_rows(r) + [""]
    return "\n".join(out).rstrip()


def headline_table(records, link_prefix):
    lines = ["| what | machine | result | record |", "|---|---|---|---|"]
    chosen = sorted((r for r in records if r.get("readme")), key=lambda r: r["readme"])
    for r in chosen:
        link = f"[{r['id']}]({link_prefix}{r['_file']})"
        lines.append(row([r["title"], machine(r["machine"]), r["headline"], link]))
    return "\n".join(lines)


def splice(text, name, table, path):
    begin = f"<!-- results:{name} -->"
    end = "<!-- /results -->"
    start = text.find(begin)
    if start < 0:
        sys.exit(f"{path}: no {begin} marker")
    stop = text.find(end, start)
    if stop < 0:
        sys.exit(f"{path}: {begin} is not closed by {end}")
    return text[: start + len(begin)] + "\n" + table + "\n" + text[stop:]


def main():
    if sys.argv[1:2] == ["--gpu-paper"]:
        if len(sys.argv) != 3:
            sys.exit("usage: render.py --gpu-paper FILE")
        r = json.loads(pathlib.Path(sys.argv[2]).read_text(encoding="utf-8"))
        if r.get("schema") != GPU_PAPER:
            sys.exit(f"{sys.argv[2]}: not a {GPU_PAPER} record")
        print(gpu_paper_table([r], ""))
        return
    check = "--check" in sys.argv[1:]
    records = load_records()
    bench_records = [r for r in records if r.get("schema") != GPU_PAPER]
    targets = {
        ROOT / "docs/PERFORMANCE.md": [(g, group_table(bench_records, g, "../bench/results/")) for g in ("cpu", "gpu", "parallel", "other")]
        + [("gpu-paper", gpu_paper_table(records, "../bench/results/"))],
        ROOT / "README.md": [("headline", headline_table(bench_records, "bench/results/"))],
    }
    stale = []
    for path, tables in targets.items():
        old = path.read_text(encoding="utf-8")
        new = old
        for name, table in tables:
            new = splice(new, name, table, path)
        if new != old:
            stale.append(path.relative_to(ROOT))
            if not check:
                path.write_text(new, encoding="utf-8")
    if check and stale:
        sys.exit(f"out of date: {', '.join(map(str, stale))}; run python3 bench/results/render.py")
    for p in stale:
        print(f"rewrote {p}")


if __name__ == "__main__":
    main()

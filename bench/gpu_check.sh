#!/usr/bin/env bash
# The GPU checks of the CUDA backend, run on a machine with an NVIDIA GPU from binaries built
# on another one (a GPU machine may have no Rust toolchain). Build them with
# bench/gpu_build.sh, which fills BIN_DIR; then, on the GPU machine, from the repository root:
#
#   tar -xJf .gpu.tar.xz; tar -xJf .gpu-cpu.tar.xz   # the second for the cpu stage only
#   bench/gpu_check.sh BIN_DIR OUT_DIR [env] [tests] [train] [bench] [cpu]   (default: all five)
#
#   env    nvidia-smi, the libraries found, the probe
#   tests  every boost-cuda test binary (they pick the GPU when probe() finds one)
#   train  `boost train` on the demo corpus (data/ must be there): cuda against cpu, one rank,
#          and a tp2 grid whose ranks share the GPU (collectives staged through the host); a
#          dp2 ZeRO-1 pair on the GPU (50 steps), overlap on against off, must match bit for bit
#   bench  examples/cuda_bench against bench/torch_peer_cuda.py, same shape (BENCH_SHAPE), same GPU; then
#          a kernel-by-kernel profile of CoLA at each seq:micro_batch of PROFILE_SHAPES
#          (default 256:8)
#   cpu    the host CPU: every test binary of the workspace but boost-cuda's (the gemm
#          crate's AVX-512 kernels are built in by default; the CLI's tests run boost_cpu),
#          then `boost bench --arch cola,full --threads T` against the PyTorch CPU peer, each
#          run followed by boost_avx2's (AVX2 GEMM kernels only, the hand-written ones capped
#          at AVX2 by BOOST_CPU_CAPABILITY) where gpu_build made it; for each
#          T of CPU_BENCH_THREADS (default 2; a list, in order, e.g. "2 16 2"),
#          CPU_BENCH_REPEAT times each (default 3); it names the SIMD paths that ran. With
#          CPU_BENCH_LONG (sequence lengths), also cola at micro-batch 1 at those lengths.
#          cputests and cpubench name its two halves alone
#
# TEST_TIMEOUT (default 240) bounds each test binary's run, in seconds.
#
# cuBLAS and NCCL are taken from the Python environment's nvidia wheels (PyTorch's); NCCL's
# libnccl.so.2 is linked as libnccl.so, the name cudarc looks for. Logs go to OUT_DIR.
set -u
bin=$(cd "$1" && pwd)
# OUT_DIR must be new or empty: summary.txt, env.txt and logs.tar.gz (every log) are written there.
if [ -e "$2" ] && [ -n "$(ls -A "$2")" ]; then
    echo "gpu_check.sh: $2 is not empty; name a new or empty folder for the results" >&2
    exit 1
fi
out=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
runs=$(mktemp -d)   # the training runs' directories
stages=${*:-env tests train bench cpu}
root=$(pwd)

sp=$(python3 -c 'import site; print(site.getsitepackages()[0])')
libs=$(mktemp -d)
for name in libcublas.so.13 libcublasLt.so.13 libnvrtc.so.13; do
    f=$(find "$sp/nvidia" -name "$name" 2>/dev/null | head -1)
    [ -n "$f" ] && ln -sf "$f" "$libs/$name"
done
f=$(find "$sp/nvidia" -name 'libnccl.so.2' 2>/dev/null | head -1)
[ -n "$f" ] && ln -sf "$f" "$libs/libnccl.so" && ln -sf "$f" "$libs/libnccl.so.2"
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The test binaries find the fixtures at the path they were built in.
built_at=$(cat "$bin/BUILT_AT")
if [ ! -e "$built_at" ]; then
    mkdir -p "$(dirname "$built_at")" && ln -s "$root" "$built_at"
fi

summary=$out/summary.txt
# Each stage's logs are gathered in $log and appended to OUT_DIR/logs.tar when the stage ends,
# so that OUT_DIR holds three files whatever stage a time limit stops (a device tool may
# bring back only a few files).
log=$(mktemp -d)
pack() { (cd "$log" && [ -n "$(ls -A)" ] && tar -rf "$out/logs.tar" --remove-files -- *); }
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

has() { case " $stages " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if has env; then
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/env.txt"
    ls -l "$libs" >>"$out/env.txt"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' >>"$out/env.txt" 2>&1
    lscpu | grep -E 'Model name|^CPU\(s\)' >>"$out/env.txt"
    note "libraries: $(ls "$libs" | tr '\n' ' ')"
fi

# Every test binary in BIN_DIR/$1/CRATE/, run from crates/CRATE as cargo does, logged as
# $2-CRATE-NAME.log.
run_tests() {
    for t in "$bin/$1"/*/*; do
        name=$(basename "$t")
        crate=$(basename "$(dirname "$t")")
        start=$EPOCHREALTIME
        (cd "$root/crates/$crate" && timeout "${TEST_TIMEOUT:-240}" "$t" --test-threads=4 --nocapture >"$log/$2-$crate-$name.log" 2>&1)
        rc=$?
        took=$(python3 -c "print(f'{$EPOCHREALTIME - $start:.1f}')")
        res=$(grep -E '^test result:' "$log/$2-$crate-$name.log" | tail -1)
        note "$2 $crate/$name: rc $rc, $took s: $res"
        grep -E '^test .* FAILED$|panicked at' "$log/$2-$crate-$name.log" | head -8 | sed 's/^/    /' | tee -a "$summary"
    done
}

pack
if has tests; then
    run_tests tests test
fi

# One training run; prints its losses' file.
train_run() {
    local dir=$1
    shift
    "$bin/boost" train --quiet --set run.dir="$dir" "$@" >"$dir.log" 2>&1
    echo $?
}

pack
if has train; then
    steps=${TRAIN_STEPS:-300}
    common=(--set train.steps=$steps --set train.eval_every=100)
    for run in "cpu:--set train.device=cpu" "cuda:--set train.device=cuda" \
        "cpu-tp2:--set train.device=cpu --set parallel.tp=2" "cuda-tp2:--set train.device=cuda --set parallel.tp=2" \
        "cuda-dp2z-on:--set train.device=cuda --set parallel.dp=2 --set parallel.zero=1 --set parallel.overlap=true --set train.steps=50" \
        "cuda-dp2z-off:--set train.device=cuda --set parallel.dp=2 --set parallel.zero=1 --set parallel.overlap=false --set train.steps=50"; do
        name=${run%%:*}
        read -r -a args <<<"${run#*:}"
        s=$(date +%s)
        rc=$(train_run "$runs/$name" "${common[@]}" "${args[@]}")
        cp "$runs/$name/metrics.jsonl" "$log/metrics-$name.jsonl" 2>/dev/null
        cp "$runs/$name.log" "$log/train-$name.log"
        note "train $name: rc $rc, $(($(date +%s) - s)) s"
        [ "$rc" = 0 ] || tail -5 "$runs/$name.log" | sed 's/^/    /' | tee -a "$summary"
    done
    python3 - "$log" <<'EOF' | tee -a "$summary"
import json, sys, statistics
out = sys.argv[1]
def load(n):
    try:
        return [json.loads(l) for l in open(f"{out}/metrics-{n}.jsonl")]
    except OSError:
        return None
for a, b in [("cpu", "cuda"), ("cpu-tp2", "cuda-tp2"), ("cpu", "cpu-tp2"), ("cuda", "cuda-tp2")]:
    x, y = load(a), load(b)
    if not x or not y:
        print(f"{a} vs {b}: missing")
        continue
    n = min(len(x), len(y))
    rel = [abs(x[i]["loss"] - y[i]["loss"]) / abs(x[i]["loss"]) for i in range(n)]
    vx = [r["val_loss"] for r in x[:n] if "val_loss" in r]
    vy = [r["val_loss"] for r in y[:n] if "val_loss" in r]
    tx = statistics.median(r["tokens_per_sec"] for r in x[n // 2:n])
    ty = statistics.median(r["tokens_per_sec"] for r in y[n // 2:n])
    print(f"{a} vs {b}: {n} steps; train loss rel. diff max {max(rel):.2e}, last {rel[-1]:.2e}; "
          f"losses {x[0]['loss']:.4f}->{x[n-1]['loss']:.4f} / {y[0]['loss']:.4f}->{y[n-1]['loss']:.4f}; "
          f"val {vx[-1] if vx else '-'} / {vy[-1] if vy else '-'}; tok/s {tx:.0f} / {ty:.0f}")
x, y = load("cuda-dp2z-on"), load("cuda-dp2z-off")
if x and y:
    same = [a["loss"] for a in x] == [b["loss"] for b in y]
    print(f"cuda dp2 ZeRO-1, overlap on vs off: {len(x)} / {len(y)} steps, losses "
          f"{'bit-identical' if same else 'DIFFER'}")
else:
    print("cuda dp2 ZeRO-1, overlap on vs off: missing")
EOF
fi

pack
if has bench; then
    # Configurations arch:micro_batch:dtype[:seq] (BENCH_CONFIGS), each run BENCH_REPEAT times,
    # boost and PyTorch alternated.
    configs=${BENCH_CONFIGS:-cola:8:bf16 cola:8:fp32 cola:32:bf16 cola:32:fp32 full:8:bf16 full:8:fp32 full:32:bf16 full:32:fp32}
    # BENCH_SHAPE: the model's flags, the same for cuda_bench and the peer (default cola-60m's
    # shape at vocabulary 8192); the paper's 1B and larger run through bench/gpu_paper.sh.
    read -r -a shape <<<"${BENCH_SHAPE:---d 512 --d-ff 1376 --layers 8 --heads 8 --rank 128 --vocab 8192}"
    for cfg in $configs; do
        IFS=: read -r arch mb dtype seq <<<"$cfg"
        seq=${seq:-256}
        for rep in $(seq 1 "${BENCH_REPEAT:-1}"); do
            tag=$arch-$mb-$dtype-$seq-$rep
            flags=(--arch $arch "${shape[@]}" --seq $seq --micro-batch $mb --dtype $dtype --warmup 5 --rounds 20)
            "$bin/cuda_bench" "${flags[@]}" >"$log/bench-$tag.json" 2>"$log/bench-$tag.log"
            # An earlier build beside it (cuda_bench_base), for the A/B of a change.
            if [ -x "$bin/cuda_bench_base" ]; then
                "$bin/cuda_bench_base" "${flags[@]}" >"$log/bench-$tag-base.json" 2>>"$log/bench-$tag.log"
            fi
            python3 "$root/bench/torch_peer_cuda.py" --device cuda "${flags[@]}" --json \
                >"$log/bench-$tag-torch.json" 2>>"$log/bench-$tag.log"
            python3 - "$log" "$tag" <<'EOF2' | tee -a "$summary"
import json, sys
out, tag = sys.argv[1:]
def load(k):
    try:
        return json.loads(open(f"{out}/bench-{tag}{k}.json").read().strip().splitlines()[-1])
    except Exception:
        return None
r, b, p = load(""), load("-base"), load("-torch")
line = f"bench {tag}: "
line += f"boost {r['step_time_s']*1e3:.2f} ms ({r['tokens_per_sec']:.0f} tok/s)" if r else "boost failed"
if b:
    line += f", earlier build {b['step_time_s']*1e3:.2f} ms"
line += f", torch {p['step_time_s']*1e3:.2f} ms ({p['tokens_per_sec']:.0f} tok/s, peak {p.get('peak_memory_bytes', 0)/2**20:.0f} MiB)" if p else ", torch failed"
if r and p:
    line += f"; boost/torch speed {p['step_time_s']/r['step_time_s']:.2f}x"
print(line + f" (see bench-{tag}.log)")
EOF2
        done
    done
    # Where the time of CoLA at seq:micro_batch goes (PROFILE_SHAPES, default 256:8), kernel
    # by kernel (and the earlier build's).
    for sm in ${PROFILE_SHAPES:-256:8}; do
        for exe in cuda_bench cuda_bench_base; do
            [ -x "$bin/$exe" ] || continue
            echo "$exe, seq ${sm%%:*} x ${sm##*:}:" | tee -a "$summary"
            "$bin/$exe" --arch cola "${shape[@]}" --seq "${sm%%:*}" --micro-batch "${sm##*:}" --warmup 3 --rounds 3 --profile 5 2>&1 >/dev/null |
                grep -A30 '^profile:' | tee -a "$summary"
        done
    done
fi

pack
if has cpu || has cputests; then
    note "cpu: $(lscpu | grep -E 'Model name' | sed 's/ \+/ /g'), avx512f: $(grep -c avx512f /proc/cpuinfo) of $(nproc) cpus"
    # The CLI's tests run the `boost` they were built with, at its build path.
    if [ -x "$bin/boost_cpu" ] && [ ! -e "$built_at/target/release/boost" ]; then
        mkdir -p "$built_at/target/release" && cp "$bin/boost_cpu" "$built_at/target/release/boost"
    fi
    run_tests cpu-tests cpu-test
fi

pack
if has cpu || has cpubench; then
    # One `boost bench ARGS` as TAG, its JSON report summed up in a line of the summary.
    cpu_bench() {
        local exe=$1 tag=$2
        shift 2
        "$bin/$exe" bench "$@" --json >"$log/cpu-bench-$tag.json" 2>"$log/cpu-bench-$tag.log"
        python3 - "$log/cpu-bench-$tag.json" "$tag" <<'EOF3' | tee -a "$summary"
import json, sys
path, rep = sys.argv[1:]
try:
    r = json.load(open(path))
except Exception as e:
    print(f"cpu bench {rep}: failed ({e}); see cpu-bench-{rep}.log")
    sys.exit()
line = f"cpu bench {rep}: {r['cpu']}, {r['simd']}, {r['threads']} threads, GEMM peak {r['gemm_peak_gflops']:.1f} GFLOP/s"
for x in r["results"]:
    t = x.get("torch_ratio")
    line += (f"; {x['arch']} {x['step_time_s']:.3f} s/step, {x['tokens_per_sec']:.0f} tok/s, "
             f"attention {100 * x['attention_s'] / x['step_time_s']:.0f} %, MFU {100 * x['mfu']:.1f} %, "
             f"peak RSS {x['peak_rss_mib']:.0f} MiB, vs PyTorch " + (f"{t:.2f}x" if t else "-"))
print(line)
EOF3
    }
    default=$(test -x "$bin/boost_cpu" && echo boost_cpu || echo boost)
    n=0
    for threads in $(for t in ${CPU_BENCH_THREADS:-2}; do yes "$t" | head -n "${CPU_BENCH_REPEAT:-3}"; done); do
        n=$((n + 1))
        # The default build (AVX-512 GEMM kernels; boost_cpu, else the cuda build), then
        # boost_avx2 where made, with its hand-written kernels capped at AVX2 too
        # (BOOST_CPU_CAPABILITY), as an AVX2-only CPU would run them.
        for exe in $default boost_avx2; do
            [ -x "$bin/$exe" ] || continue
            cap=""
            [ "$exe" = boost_avx2 ] && cap=avx2
            BOOST_CPU_CAPABILITY=$cap cpu_bench "$exe" "$n-t$threads${exe#boost}" --arch cola,full --threads "$threads"
        done
    done
    # Long sequences at micro-batch 1 (CPU_BENCH_LONG, e.g. "2048 4096"), at each thread count.
    for seq in ${CPU_BENCH_LONG:-}; do
        for threads in ${CPU_BENCH_THREADS:-2}; do
            cpu_bench "$default" "long$seq-t$threads" --arch cola --seq "$seq" --micro-batch 1 --rounds 2 --threads "$threads"
        done
    done
fi

pack
[ -f "$out/logs.tar" ] && gzip "$out/logs.tar"

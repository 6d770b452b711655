#!/usr/bin/env bash
# The device benchmark: the paper's 1B shape trained on one GPU against PyTorch, in one call
# that fits a lent GPU's few minutes (bench/gpu_paper.py does the work; the stages, in order):
#
#   1. the probe: GPU, memory, driver; the cuBLAS, cuDNN and NCCL versions found
#   2. the bf16 GEMM peak at 8192³: the engine's cuBLAS call and torch.mm, side by side
#   3. attention alone, forward and backward, TFLOP/s at head_dim 64 and 128, seq 2048, 4096
#      and 8192: ours, cuDNN's (a `cudnn` bundle) and PyTorch's SDPA flash backend
#      (bench/gpu_paper_attention.py, bench/torch_attention.py)
#   4. preset 1b (d 2048, d_ff 5472, 24 layers, 32 heads, rank 512, vocabulary 32000), full
#      rank and CoLA, seq 4096 × micro-batch 4: our steps (examples/cuda_bench) alternated with
#      PyTorch eager's (bench/torch_peer_cuda.py: SDPA, fused AdamW, bf16 autocast), each
#      step split into GEMM, attention, other kernels and idle; peak memory; MFU against the
#      measured GEMM peak
#   5. the same at seq 4096 × 1; then, where train.attention = auto took cuDNN, the 1b shapes
#      at × 4 with our attention
#   6. 3b and 7b CoLA with `lowrank` and `full` recompute: whether each fits, step, memory
#   6b. the 1b CoLA shape at × 4 again with train.cuda_graphs (ours only)
#   7. beside every shape, `boost plan --cluster h100|h200` of it: step time, memory, error
#   8. as the budget allows, the 1b shapes against torch.compile (SDPA's flash backend)
#
# Each of our steps records its last step's kernel launches by kind and by kernel, GEMMs,
# waits, allocations and uploads, and with graphs the launches from the host
# (`launches_per_step`); and the seconds a step of as many steps queued back to back as the
# trainer runs them on one GPU, each read once the next is queued (`step_time_back_to_back_s`).
#
# On the GPU machine, from the repository root, with the bundle of bench/gpu_paper_build.sh:
#
#   tar -xJf .gpu-paper.tar.xz
#   bench/gpu_paper.sh .gpu-paper OUT_DIR [--budget SECONDS]   (default 300)
#
# A dry run on this machine, on the CUDA emulator at a tiny shape, the peer on the CPU where
# PyTorch is installed (this checkout's binaries, built with the emulator when absent):
#
#   bench/gpu_paper.sh --emulate OUT_DIR [--budget SECONDS]
#
# Each stage has its own timeout and the record, OUT_DIR/gpu_paper.json, is rewritten after
# each measurement: a run cut short keeps what it measured. Logs: OUT_DIR/*.log. The exit code
# is 1 when a stage failed (a shape refused by the memory check is a result, not a failure).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = --emulate ]; then
    [ $# -ge 2 ] || { echo "usage: bench/gpu_paper.sh --emulate OUT_DIR [--budget SECONDS]" >&2; exit 2; }
    out=$2
    shift 2
    # Built unless this build already has the emulator (a cuda-only cuda_bench lacks it); with
    # cuDNN's headers at hand (BOOST_CUDNN_INCLUDE) the `cudnn` feature too, as CI's tests.
    bin=$root/target/release
    if ! "$bin/examples/cuda_bench" --emulate --probe >/dev/null 2>&1; then
        (cd "$root" && cargo build --release -q -p boost-cuda --features "cuda,emulate${BOOST_CUDNN_INCLUDE:+,cudnn}" --example cuda_bench)
    fi
    [ -x "$bin/boost" ] || (cd "$root" && cargo build --release -q -p boost-cli)
    links=$(mktemp -d)
    trap 'rm -rf "$links"' EXIT
    ln -s "$bin/examples/cuda_bench" "$links/cuda_bench" && ln -s "$bin/boost" "$links/boost"
    python3 "$root/bench/gpu_paper.py" "$links" "$out" --emulate "$@"
    exit
fi
[ $# -ge 2 ] || { echo "usage: bench/gpu_paper.sh BIN_DIR OUT_DIR [--budget SECONDS]" >&2; exit 2; }
bin=$(cd "$1" && pwd)
out=$2
shift 2
# cuBLAS and NVRTC from the Python environment's nvidia wheels (PyTorch's), as gpu_check.sh;
# cuDNN from them too (a `cudnn` bundle opens it at run time: BOOST_CUDNN_LIB, its folder).
libs=$(mktemp -d)
trap 'rm -rf "$libs"' EXIT
sp=$(python3 -c 'import site; print(site.getsitepackages()[0])')
for name in libcublas.so.13 libcublasLt.so.13 libnvrtc.so.13; do
    f=$(find "$sp/nvidia" -name "$name" 2>/dev/null | head -1)
    [ -n "$f" ] && ln -sf "$f" "$libs/$name"
done
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ -z "${BOOST_CUDNN_LIB:-}" ] && [ -f "$sp/nvidia/cudnn/lib/libcudnn.so.9" ]; then
    export BOOST_CUDNN_LIB=$sp/nvidia/cudnn/lib
fi
python3 "$root/bench/gpu_paper.py" "$bin" "$out" "$@"

#!/usr/bin/env bash
# Builds the lean bundle that bench/gpu_paper.sh runs on a GPU machine: `boost` and
# examples/cuda_bench with the `cuda` feature, the kernels compiled ahead by nvcc 13.0 from
# PyPI (crates/cuda/compile-kernels.sh), and with `cudnn` (cuDNN's fused attention, headers
# from PyPI by crates/cuda/fetch-cudnn-headers.sh; without them the bundle is built without
# it, saying so), stripped, in DIR (default .gpu-paper, ignored by git)
# and DIR.tar.xz, which must stay under the 64 MiB a device call carries. The machine it runs
# on needs no network: the record's commit is written beside the binaries (COMMIT).
#
#   bench/gpu_paper_build.sh [DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/.gpu-paper}
cd "$root"
# Replace only what an earlier run of this script made: DIR a real folder holding the marker
# it leaves (MARK, with its exact first line), and DIR.tar.xz a regular file or absent. Any
# other file, folder or link at either path is kept, and the build stops before compiling.
mark="$dir/.gpu_paper_build"
ours() { [ -d "$dir" ] && [ ! -L "$dir" ] && [ -f "$mark" ] && [ "$(head -n1 "$mark")" = "made by bench/gpu_paper_build.sh" ]; }
if [ -e "$dir" ] || [ -L "$dir" ]; then
    ours || { echo "gpu_paper_build.sh: $dir exists and was not made by this script; it is kept: choose another DIR" >&2; exit 1; }
fi
if [ -e "$dir.tar.xz" ] || [ -L "$dir.tar.xz" ]; then
    { ours && [ -f "$dir.tar.xz" ] && [ ! -L "$dir.tar.xz" ]; } ||
        { echo "gpu_paper_build.sh: $dir.tar.xz exists and was not made by this script; it is kept: choose another DIR" >&2; exit 1; }
fi
eval "$(bash crates/cuda/compile-kernels.sh)"
features=cuda
if headers=$(bash crates/cuda/fetch-cudnn-headers.sh); then
    eval "$headers"
    features=cuda,cudnn
else
    echo "gpu_paper_build.sh: no cuDNN headers; the bundle runs our attention only (train.attention = auto takes it)" >&2
fi
cargo build --release -p boost-cli --features "$features"
cargo build --release -p boost-cuda --features "$features" --example cuda_bench
rm -rf "$dir" "$dir.tar.xz" && mkdir -p "$dir"
cp target/release/boost target/release/examples/cuda_bench "$dir/"
strip -s "$dir/boost" "$dir/cuda_bench"
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD || commit="$commit+changes"
echo "$commit" >"$dir/COMMIT"
echo "$features" >"$dir/FEATURES"
echo "made by bench/gpu_paper_build.sh" >"$mark"
tar -C "$(dirname "$dir")" -cJf "$dir.tar.xz" "$(basename "$dir")"
size=$(stat -c %s "$dir.tar.xz")
du -sh "$dir" "$dir.tar.xz"
if [ "$size" -gt $((64 << 20)) ]; then
    echo "gpu_paper_build.sh: $dir.tar.xz is $((size >> 20)) MiB, over the 64 MiB a device call carries" >&2
    exit 1
fi

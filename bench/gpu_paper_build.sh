#!/usr/bin/env bash
# Builds the lean bundle that bench/gpu_paper.sh runs on a GPU machine: `boost` and
# examples/cuda_bench with the `cuda` feature, the kernels compiled ahead by nvcc 13.0 from
# PyPI (crates/cuda/compile-kernels.sh), stripped, in DIR (default .gpu-paper, ignored by git)
# and DIR.tar.xz, which must stay under the 64 MiB a device call carries. The machine it runs
# on needs no network: the record's commit is written beside the binaries.
#
#   bench/gpu_paper_build.sh [DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/.gpu-paper}
cd "$root"
# Replace only what an earlier run of this script made (it leaves COMMIT in DIR).
for p in "$dir" "$dir.tar.xz"; do
    if [ -e "$p" ] && [ ! -f "$dir/COMMIT" ]; then
        echo "gpu_paper_build.sh: $p exists and was not made by this script; choose another DIR" >&2
        exit 1
    fi
done
eval "$(bash crates/cuda/compile-kernels.sh)"
cargo build --release -p boost-cli --features cuda
cargo build --release -p boost-cuda --features cuda --example cuda_bench
rm -rf "$dir" "$dir.tar.xz" && mkdir -p "$dir"
cp target/release/boost target/release/examples/cuda_bench "$dir/"
strip -s "$dir/boost" "$dir/cuda_bench"
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD || commit="$commit+changes"
echo "$commit" >"$dir/COMMIT"
tar -C "$(dirname "$dir")" -cJf "$dir.tar.xz" "$(basename "$dir")"
size=$(stat -c %s "$dir.tar.xz")
du -sh "$dir" "$dir.tar.xz"
if [ "$size" -gt $((64 << 20)) ]; then
    echo "gpu_paper_build.sh: $dir.tar.xz is $((size >> 20)) MiB, over the 64 MiB a device call carries" >&2
    exit 1
fi

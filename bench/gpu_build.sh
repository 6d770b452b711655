#!/usr/bin/env bash
# Builds what bench/gpu_check.sh runs on a GPU machine, here, into DIR (default .gpu, ignored
# by git): the boost-cuda test binaries, `boost` and examples/cuda_bench, all with the `cuda`
# feature and the kernels compiled ahead by nvcc 13.0 (crates/cuda/compile-kernels.sh), and
# the boost-tensor test binaries (the gemm crate's AVX-512 kernels built in, as by default,
# for the machine's CPU), and `boost` with the AVX2 kernels only as boost_avx2. Stripped,
# and packed with the demo corpus into DIR.tar.xz to travel light.
#
#   bench/gpu_build.sh [DIR]
#   BASE_REV=<git revision> bench/gpu_build.sh [DIR]   # also cuda_bench of that revision, as
#                                                      # cuda_bench_base (gpu_check's A/B)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/.gpu}
cd "$root"
# Replace only what an earlier run of this script made (it leaves BUILT_AT in DIR).
for p in "$dir" "$dir.tar.xz"; do
    if [ -e "$p" ] && [ ! -f "$dir/BUILT_AT" ]; then
        echo "gpu_build.sh: $p exists and was not made by this script; choose another DIR" >&2
        exit 1
    fi
done
eval "$(bash crates/cuda/compile-kernels.sh)"
rm -rf "$dir" "$dir.tar.xz" && mkdir -p "$dir/tests" "$dir/cpu-tests"
# Copy the test binaries that `cargo test ARGS --no-run` builds into DEST (the lib's as "unit").
collect_tests() {
    local dest=$1
    shift
    cargo test --release "$@" --no-run --message-format=json 2>/dev/null |
        python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        kind = m["target"]["kind"]
        if kind == ["test"] or kind == ["lib"]:
            print("unit" if kind == ["lib"] else m["target"]["name"], m["executable"])
' | while read -r name exe; do
        cp "$exe" "$dest/$name"
    done
}
collect_tests "$dir/tests" -p boost-cuda --features cuda
# The CPU backend's own tests with the gemm crate's AVX-512 kernels built in: a GPU machine's
# host CPU usually has AVX-512, which the development machines may lack (the `cpu` stage).
collect_tests "$dir/cpu-tests" -p boost-tensor
# `cargo build --release ARGS` of revision REV in a temporary worktree, into target/TARGET (so
# this tree's build is left as it is), after the command PREP (`:` for none) ran there; the
# worktree is removed afterwards.
worktree_build() {
    local rev=$1 target=$2 prep=$3 tmp
    shift 3
    tmp=$(mktemp -d)
    git worktree add --detach "$tmp/src" "$rev" >/dev/null
    (cd "$tmp/src" && "$prep" && CARGO_TARGET_DIR="$root/target/$target" cargo build --release "$@")
    git worktree remove --force "$tmp/src" && rmdir "$tmp"
}
# `boost` with the gemm crate's AVX2 kernels only (boost-tensor without its default `avx512`),
# as boost_avx2: gpu_check's cpu stage runs it beside `boost` to compare the two GEMM paths on
# one CPU. Built from this tree's tracked files (`git stash create` records them without
# touching the tree; it prints nothing when they match HEAD).
avx2_only() {
    sed -i 's/^default = \["avx512"\]$/default = []/' crates/tensor/Cargo.toml
    grep -q '^default = \[\]$' crates/tensor/Cargo.toml
}
tracked=$(git stash create)
worktree_build "${tracked:-HEAD}" gpu-avx2 avx2_only -p boost-cli
cp "$root/target/gpu-avx2/release/boost" "$dir/boost_avx2"
cargo build --release -p boost-cli --features cuda
cargo build --release -p boost-cuda --features cuda --example cuda_bench
cp target/release/boost target/release/examples/cuda_bench "$dir/"
if [ -n "${BASE_REV:-}" ]; then
    # The earlier build, for the A/B.
    worktree_build "$BASE_REV" gpu-base : -p boost-cuda --features cuda --example cuda_bench
    cp "$root/target/gpu-base/release/examples/cuda_bench" "$dir/cuda_bench_base"
    git rev-parse "$BASE_REV" >"$dir/BASE_REV"
fi
strip -s "$dir"/boost* "$dir"/cuda_bench* "$dir"/tests/* "$dir"/cpu-tests/*
echo "$root" >"$dir/BUILT_AT"
# One compressed bundle to carry: the binaries and, when built, the demo corpus (a GPU machine
# may have no network to fetch it).
tar -C "$root" -cJf "$dir.tar.xz" "$(basename "$dir")" $(test -d data/shakespeare && echo data/shakespeare)
du -sh "$dir" "$dir.tar.xz"

#!/usr/bin/env bash
# Builds what bench/gpu_check.sh runs on a GPU machine, here, into DIR (default .gpu, ignored
# by git): the boost-cuda test binaries, `boost` and examples/cuda_bench, all with the `cuda`
# feature and the kernels compiled ahead by nvcc 13.0 (crates/cuda/compile-kernels.sh); and,
# for the machine's host CPU, every other crate's test binaries and `boost` without cuda
# (boost_cpu), the gemm crate's AVX-512 kernels built in as by default, and `boost` with the
# AVX2 kernels only (boost_avx2). Stripped, and packed in two bundles to travel light (a
# device tool may carry 64 MiB a call): DIR.tar.xz, the GPU's binaries with the demo corpus
# (stages env, tests, train, bench), and DIR-cpu.tar.xz, the host CPU's (stage cpu).
#
#   bench/gpu_build.sh [DIR]
#   BASE_REV=<git revision> bench/gpu_build.sh [DIR]   # also cuda_bench of that revision, as
#                                                      # cuda_bench_base (gpu_check's A/B)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/.gpu}
cd "$root"
# Replace only what an earlier run of this script made (it leaves BUILT_AT in DIR).
for p in "$dir" "$dir.tar.xz" "$dir-cpu.tar.xz"; do
    if [ -e "$p" ] && [ ! -f "$dir/BUILT_AT" ]; then
        echo "gpu_build.sh: $p exists and was not made by this script; choose another DIR" >&2
        exit 1
    fi
done
eval "$(bash crates/cuda/compile-kernels.sh)"
rm -rf "$dir" "$dir.tar.xz" "$dir-cpu.tar.xz" && mkdir -p "$dir"
# Copy the test binaries that `cargo test ARGS --no-run` builds into DEST/CRATE/ (CRATE: the
# package's folder under crates/; the lib's tests as "unit"), as gpu_check.sh runs them.
collect_tests() {
    local dest=$1
    shift
    cargo test --release "$@" --no-run --message-format=json 2>/dev/null |
        python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        kind = m["target"]["kind"]
        if kind == ["test"] or kind == ["lib"]:
            crate = os.path.basename(os.path.dirname(m["manifest_path"]))
            print(crate, "unit" if kind == ["lib"] else m["target"]["name"], m["executable"])
' | while read -r crate name exe; do
        mkdir -p "$dest/$crate" && cp "$exe" "$dest/$crate/$name"
    done
}
collect_tests "$dir/tests" -p boost-cuda --features cuda
# Every other crate's tests, with the gemm crate's AVX-512 kernels built in (the default): a GPU
# machine's host CPU usually has AVX-512, which the development machines may lack (the `cpu`
# stage). The CLI's tests run the `boost` built beside them, kept as boost_cpu (the cuda build
# below replaces target/release/boost).
collect_tests "$dir/cpu-tests" --workspace --exclude boost-cuda
cp target/release/boost "$dir/boost_cpu"
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
strip -s "$dir"/boost* "$dir"/cuda_bench* "$dir"/tests/*/* "$dir"/cpu-tests/*/*
echo "$root" >"$dir/BUILT_AT"
# The bundles: the GPU's binaries with, when built, the demo corpus (a GPU machine may have no
# network to fetch it); the host CPU's (about 20 MB), compressed with xz's 64 MiB window, which
# finds what the test binaries share.
b=$(basename "$dir")
tar -C "$root" --exclude="$b/cpu-tests" --exclude="$b/boost_cpu" --exclude="$b/boost_avx2" \
    -cJf "$dir.tar.xz" "$b" $(test -d data/shakespeare && echo data/shakespeare)
XZ_OPT=-9 tar -C "$root" -cJf "$dir-cpu.tar.xz" "$b/cpu-tests" "$b/boost_cpu" "$b/boost_avx2" "$b/BUILT_AT"
du -sh "$dir" "$dir.tar.xz" "$dir-cpu.tar.xz"

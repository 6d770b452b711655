#!/usr/bin/env bash
# Compiles every kernel of crates/cuda/kernels with nvcc 13.0 from PyPI — PTX for compute_80
# and an sm_90 cubin each, warnings as errors — and installs NVRTC 13.0 beside it, so that
# `cargo test -p boost-cuda --features cuda,emulate` also embeds the nvcc output and checks
# the NVRTC fallback. Every CUDA component is pinned to 13.0.x: the GPU machines' driver 580
# rejects PTX from newer compilers.
#
#   crates/cuda/compile-kernels.sh [DIR]     (DIR: where to install; default ~/.cache/boost-cuda-13.0)
#
# Prints the exports that point the build (BOOST_NVCC) and the NVRTC test (LD_LIBRARY_PATH)
# at DIR; `eval "$(crates/cuda/compile-kernels.sh)"` applies them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-${BOOST_CUDA_TOOLS:-$HOME/.cache/boost-cuda-13.0}}
nvcc="$dir/nvidia/cu13/bin/nvcc"
if [ ! -x "$nvcc" ] || [ ! -e "$dir/nvidia/cu13/lib/libnvrtc.so.13" ]; then
    python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location --root-user-action=ignore --target "$dir" \
        nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
        nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 nvidia-cuda-nvrtc==13.0.88 >&2
fi
"$nvcc" --version | grep -q "release 13.0," || { echo "$nvcc is not CUDA 13.0" >&2; exit 1; }
# The most local memory a kernel may use, in bytes, for spilled registers or for arrays that
# ptxas could not keep in registers (its stack frame): k_attn_tc_bwd_kv_32 spills one 8-byte
# pair across its loop (stored before, loaded after). Local memory inside a loop costs a round
# trip each time: at head_dim 128 the tensor-core attention kernels once spilled 236 and 304
# bytes, and kept dK's and dV's accumulators (512 bytes) there.
max_local=8
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
total=0
for f in "$here"/kernels/*.cu; do
    n=$(basename "$f" .cu)
    "$nvcc" --ptx -arch=compute_80 -std=c++17 -Werror all-warnings -I "$here/kernels" -o "$out/$n.ptx" "$f"
    info=$("$nvcc" --cubin -arch=sm_90 -std=c++17 -Werror all-warnings -Xptxas -v -I "$here/kernels" -o "$out/$n.cubin" "$f" 2>&1) ||
        { echo "$info" >&2; exit 1; }
    # Local memory by kernel (ptxas: "Compiling entry function 'k'", then "N bytes stack frame,
    # M bytes spill stores, ..."): at most $max_local bytes of either.
    local_mem=$(echo "$info" | awk -v max="$max_local" '
        /Compiling entry function/ { k = $0; sub(/.*function .?/, "", k); sub(/.? for .*/, "", k) }
        /bytes stack frame/ {
            for (i = 1; i + 3 <= NF; i++)
                if ($(i + 1) == "bytes" && ($(i + 2) == "stack" || $(i + 3) == "stores,") && $i + 0 > max)
                    printf "%s%s (%d bytes %s)", sep, k, $i, ($(i + 2) == "stack") ? "stack frame" : "spilled", sep = "; "
        }')
    [ -z "$local_mem" ] || { echo "$n.cu: local memory past $max_local bytes (ptxas, sm_90): $local_mem" >&2; exit 1; }
    k=$(grep -c '^\.visible \.entry' "$out/$n.ptx")
    want=$(grep -c '^KERNEL(' "$f")
    [ "$k" = "$want" ] || { echo "$n.cu: $k kernels in the PTX, $want in the source" >&2; exit 1; }
    total=$((total + k))
    echo "compiled $n.cu: $k kernels (PTX compute_80, cubin sm_90)" >&2
done
echo "all $total kernels compiled with $("$nvcc" --version | grep release)" >&2
echo "export BOOST_NVCC=$nvcc"
echo "export LD_LIBRARY_PATH=$dir/nvidia/cu13/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"

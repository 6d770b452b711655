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
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
total=0
for f in "$here"/kernels/*.cu; do
    n=$(basename "$f" .cu)
    "$nvcc" --ptx -arch=compute_80 -std=c++17 -Werror all-warnings -I "$here/kernels" -o "$out/$n.ptx" "$f"
    "$nvcc" --cubin -arch=sm_90 -std=c++17 -Werror all-warnings -I "$here/kernels" -o "$out/$n.cubin" "$f"
    k=$(grep -c '^\.visible \.entry' "$out/$n.ptx")
    want=$(grep -c '^KERNEL(' "$f")
    [ "$k" = "$want" ] || { echo "$n.cu: $k kernels in the PTX, $want in the source" >&2; exit 1; }
    total=$((total + k))
    echo "compiled $n.cu: $k kernels (PTX compute_80, cubin sm_90)" >&2
done
echo "all $total kernels compiled with $("$nvcc" --version | grep release)" >&2
echo "export BOOST_NVCC=$nvcc"
echo "export LD_LIBRARY_PATH=$dir/nvidia/cu13/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"

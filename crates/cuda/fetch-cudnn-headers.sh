#!/usr/bin/env bash
# Fetches the headers the `cudnn` feature of boost-cuda compiles against, from PyPI: the
# cuDNN frontend (header-only C++, nvidia-cudnn-frontend) and cuDNN's own headers
# (nvidia-cudnn-cu13). Only their include/ folders are kept, in DIR/include, and cuDNN's
# loader (libcudnn.so.9 and libcudnn_graph.so.9, 5 MB) in DIR/lib, which opens without a GPU
# for a check of the run-time loading; the wheels (the cuDNN one is about 350 MB, nearly all
# engine libraries) are deleted. Nothing is linked: libcudnn is opened at run time.
#
#   crates/cuda/fetch-cudnn-headers.sh [DIR]    (default ~/.cache/boost-cudnn-9.13)
#
# Prints the export that points the build at them (BOOST_CUDNN_INCLUDE);
# `eval "$(crates/cuda/fetch-cudnn-headers.sh)"` applies it. The CUDA headers the frontend
# also includes come from crates/cuda/compile-kernels.sh (beside its nvcc).
set -euo pipefail
frontend=1.32.0
cudnn=9.13.1.26
dir=${1:-${BOOST_CUDNN_HEADERS:-$HOME/.cache/boost-cudnn-9.13}}
inc="$dir/include"
stamp="$inc/.versions"
# DIR is this script's own: it replaces DIR/include and DIR/lib, so a folder (or a link to
# one) that holds anything and lacks the mark it leaves (or, from before the mark, its
# version stamp) is refused, untouched.
mark="$dir/.boost-cudnn-headers"
ours() { [ -f "$mark" ] || grep -q '^frontend .*, cudnn ' "$stamp" 2>/dev/null; }
if [ -e "$dir" ] && ! ours && [ -n "$(ls -A "$dir" 2>/dev/null || echo x)" ]; then
    echo "fetch-cudnn-headers.sh: $dir holds files this script did not write (no $mark); it is kept: name a new or empty folder" >&2
    exit 1
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "frontend $frontend, cudnn $cudnn" ] || [ ! -f "$dir/lib/libcudnn_graph.so.9" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    python3 -m pip download --quiet --disable-pip-version-check --no-cache-dir --no-deps --only-binary=:all: -d "$tmp" \
        "nvidia-cudnn-frontend==$frontend" "nvidia-cudnn-cu13==$cudnn" >&2
    mkdir -p "$tmp/x"
    for whl in "$tmp"/*.whl; do
        python3 - "$whl" "$tmp/x" <<'PY'
import sys, zipfile
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    keep = ("include/", "nvidia/cudnn/include/", "nvidia/cudnn/lib/libcudnn.so.9", "nvidia/cudnn/lib/libcudnn_graph.so.9")
    names = [n for n in z.namelist() if n.startswith(keep) and not n.endswith("/")]
    z.extractall(out, names)
PY
    done
    [ -f "$tmp/x/include/cudnn_frontend.h" ] && [ -f "$tmp/x/nvidia/cudnn/include/cudnn.h" ] ||
        { echo "fetch-cudnn-headers.sh: the wheels lack include/cudnn_frontend.h or cudnn.h" >&2; exit 1; }
    cp -r "$tmp/x/nvidia/cudnn/include/." "$tmp/x/include/"
    echo "frontend $frontend, cudnn $cudnn" >"$tmp/x/include/.versions"
    mkdir -p "$dir" && echo "boost-cuda's cuDNN headers (crates/cuda/fetch-cudnn-headers.sh)" >"$mark"
    rm -rf "$inc" "$dir/lib" && mv "$tmp/x/include" "$inc" && mv "$tmp/x/nvidia/cudnn/lib" "$dir/lib"
    echo "cuDNN headers (frontend $frontend, cuDNN $cudnn) in $inc, its loader in $dir/lib" >&2
fi
echo "export BOOST_CUDNN_INCLUDE=$inc"

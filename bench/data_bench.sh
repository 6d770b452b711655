#!/usr/bin/env bash
# `boost data` against Python `tokenizers` on the same JSONL corpus and tokenizer.json, in one
# run: ROUNDS alternating pairs on CORPUS, each timed by /usr/bin/time -v (wall time, peak RSS).
# Usage: bench/data_bench.sh BOOST_BINARY CORPUS.jsonl TOKENIZER.json WORKDIR [ROUNDS]
# Prints one JSON line per run (boost's --json summary, or the peer's), then wall time and
# peak RSS from /usr/bin/time.
set -euo pipefail
boost=$1 corpus=$2 tok=$3 work=$4 rounds=${5:-3}
threads=$(nproc)
mkdir -p "$work"
here=$(cd "$(dirname "$0")" && pwd)
for r in $(seq 1 "$rounds"); do
  rm -rf "$work/ds"
  /usr/bin/time -v "$boost" data --input "$corpus" --out "$work/ds" --tokenizer "$tok" --json \
    2> "$work/boost.err" | sed "s/^/boost round $r: /"
  grep -E "Elapsed|Maximum resident" "$work/boost.err" | sed "s/^/boost round $r: /"
  rm -rf "$work/ds" "$work/peer.bin"
  /usr/bin/time -v python3 "$here/data_peer.py" "$corpus" "$tok" "$work/peer.bin" --threads "$threads" \
    2> "$work/peer.err" | sed "s/^/peer round $r: /"
  grep -E "Elapsed|Maximum resident" "$work/peer.err" | sed "s/^/peer round $r: /"
  rm -f "$work/peer.bin"
done

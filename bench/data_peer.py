"""The Python peer of `boost data --tokenizer T`: Hugging Face `tokenizers` (the Rust library
behind it, with its own thread pool) encodes the same JSONL corpus with the same tokenizer.json,
batch by batch, appending each document's ids and the end-of-text id to a uint16/uint32 file.
It holds one batch at a time, like `boost data`, and prints one JSON line: documents, tokens,
seconds, MB/s of input and peak RSS.

Usage: python3 bench/data_peer.py CORPUS.jsonl TOKENIZER.json OUT.bin [--threads N]"""

import argparse
import array
import json
import os
import resource
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("tokenizer")
    ap.add_argument("out")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--batch-bytes", type=int, default=8 << 20)
    a = ap.parse_args()
    os.environ["RAYON_NUM_THREADS"] = str(a.threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(a.tokenizer)
    eos = tok.token_to_id("<|endoftext|>")
    typecode = "H" if tok.get_vocab_size() <= 65536 else "I"
    t0 = time.perf_counter()
    docs = tokens = 0
    size = os.path.getsize(a.corpus)
    with open(a.corpus, "rb") as f, open(a.out, "wb") as out:
        batch, nbytes = [], 0

        def flush():
            nonlocal docs, tokens
            ids = array.array(typecode)
            for enc in tok.encode_batch_fast(batch, add_special_tokens=False):
                ids.extend(enc.ids)
                ids.append(eos)
            ids.tofile(out)
            docs += len(batch)
            tokens += len(ids)
            batch.clear()

        for line in f:
            if not line.strip():
                continue
            text = json.loads(line)["text"]
            batch.append(text)
            nbytes += len(line)
            if nbytes >= a.batch_bytes or len(batch) >= 4096:
                flush()
                nbytes = 0
        if batch:
            flush()
    secs = time.perf_counter() - t0
    print(json.dumps({
        "peer": "tokenizers " + tokenizers.__version__,
        "documents": docs,
        "tokens": tokens,
        "input_bytes": size,
        "seconds": secs,
        "mb_per_s": size / 1e6 / secs,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "threads": a.threads,
    }))


if __name__ == "__main__":
    main()

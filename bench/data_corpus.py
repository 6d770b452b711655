"""Writes a synthetic JSONL corpus for the `boost data` benchmark: documents of Zipf-distributed
words (so a BPE has real merges to apply) with punctuation and line breaks, deterministic from
the seed. Usage: python3 bench/data_corpus.py OUT.jsonl MEGABYTES [--seed S]"""

import argparse
import json
import random


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("megabytes", type=float)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    weights = [12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8, 2.4, 2.4, 2.2, 2.0, 2.0, 1.9,
               1.5, 1.0, 0.8, 0.2, 0.2, 0.1, 0.1]
    words = sorted({"".join(rng.choices(letters, weights, k=rng.randint(1, 10))) for _ in range(60000)})
    rng.shuffle(words)
    zipf = [1.0 / (r + 1) for r in range(len(words))]
    target = int(a.megabytes * 1e6)
    written = 0
    doc = 0
    with open(a.out, "w") as f:
        while written < target:
            n = int(rng.paretovariate(1.2) * 150)
            body = rng.choices(words, zipf, k=min(n, 50000))
            parts = []
            for i, w in enumerate(body):
                parts.append(w)
                r = rng.random()
                parts.append(", " if r < 0.06 else ".\n" if r < 0.09 else ". " if r < 0.12 else " ")
            line = json.dumps({"id": doc, "text": "".join(parts).strip()}) + "\n"
            f.write(line)
            written += len(line)
            doc += 1


if __name__ == "__main__":
    main()

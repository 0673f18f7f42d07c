"""Writes N int32 token ids below VOCAB (a fixed pseudo-random stream).

    tokens.py OUT [--count N] [--vocab V]
"""
import argparse
import array

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--count", type=int, default=4096)
parser.add_argument("--vocab", type=int, default=512)
args = parser.parse_args()
state = 12345
ids = array.array("i")
for _ in range(args.count):
    state = (state * 1103515245 + 12345) % 2**31
    ids.append((state >> 8) % args.vocab)
with open(args.out, "wb") as f:
    f.write(ids.tobytes())

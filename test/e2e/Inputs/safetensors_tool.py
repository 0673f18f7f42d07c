#!/usr/bin/env python3
# ===- safetensors_tool.py - Inspect and edit safetensors files ------------===#
#
# Part of the Loom project.
#
# ===-----------------------------------------------------------------------===#
#
#   list FILE               one line per tensor: name dtype shape (sorted)
#   drop FILE OUT NAME...   OUT is FILE without the named tensors (e.g. a
#                           Loom checkpoint made to look like a Hugging Face
#                           one)
#
# Plain Python (no numpy or torch): the format is a little-endian u64 header
# length, a JSON header and the tensor bytes.
#
# ===-----------------------------------------------------------------------===#

import json
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def main():
    cmd = sys.argv[1]
    header, body = read(sys.argv[2])
    meta = header.pop("__metadata__", None)
    if cmd == "list":
        for name in sorted(header):
            t = header[name]
            print(name, t["dtype"], t["shape"])
        return
    assert cmd == "drop", cmd
    out, drop = sys.argv[3], set(sys.argv[4:])
    missing = drop - set(header)
    if missing:
        sys.exit("no tensor %s in %s" % (sorted(missing)[0], sys.argv[2]))
    new, blobs, offset = {}, [], 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        if name in drop:
            continue
        b, e = t["data_offsets"]
        blobs.append(body[b:e])
        new[name] = dict(t, data_offsets=[offset, offset + e - b])
        offset += e - b
    if meta is not None:
        new["__metadata__"] = meta
    text = json.dumps(new).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


if __name__ == "__main__":
    main()

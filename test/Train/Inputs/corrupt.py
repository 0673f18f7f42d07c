"""Damages a loom-train cache entry the ways a disk, a killed process or a
person can. PATH may be a glob pattern; it must match one path.

    corrupt.py flip FILE        one byte of the middle changed (same size)
    corrupt.py truncate FILE    the second half cut off
    corrupt.py write FILE TEXT  the contents replaced by TEXT
    corrupt.py foreign ENTRY    the entry replaced by a directory of other
                                files with an entry.json of another format
    corrupt.py file ENTRY       the entry replaced by a plain file
    corrupt.py swap ENTRY OTHER ENTRY replaced by OTHER (another key's)
    corrupt.py killed ENTRY     the entry made what a compile killed before
                                its rename leaves: .tmp-<key>-XXXXXX without
                                entry.json
"""
import glob
import os
import shutil
import sys


def one(pattern):
    paths = glob.glob(pattern)
    if len(paths) != 1:
        sys.exit("corrupt.py: %r matches %d paths" % (pattern, len(paths)))
    return paths[0]


mode, path = sys.argv[1], one(sys.argv[2])
if mode in ("flip", "truncate", "write"):
    data = bytearray(open(path, "rb").read())
    if mode == "flip":
        data[len(data) // 2] ^= 0x01
    elif mode == "truncate":
        data = data[: len(data) // 2]
    else:
        data = sys.argv[3].encode()
    with open(path, "wb") as f:
        f.write(data)
elif mode == "foreign":
    shutil.rmtree(path)
    os.mkdir(path)
    with open(os.path.join(path, "entry.json"), "w") as f:
        f.write('{"format": "something-else", "files": []}\n')
    with open(os.path.join(path, "notes.txt"), "w") as f:
        f.write("not a compiled program\n")
elif mode == "file":
    shutil.rmtree(path)
    with open(path, "w") as f:
        f.write("not a directory\n")
elif mode == "swap":
    other = one(sys.argv[3])
    shutil.rmtree(path)
    os.rename(other, path)
elif mode == "killed":
    parent, key = os.path.split(path)
    os.remove(os.path.join(path, "entry.json"))
    os.rename(path, os.path.join(parent, ".tmp-%s-bbbbbb" % key))
else:
    sys.exit("corrupt.py: unknown mode " + mode)

"""engine/sha256.c against Python's hashlib: messages of every length around the padding
boundaries (0-130 bytes), larger random files, and the same bytes fed in pieces of 1, 7, 64
and 1000 bytes. A digest is exact, so equality is the only tolerance.

usage: test_sha256.py DUMP
"""
import hashlib
import os
import random
import subprocess
import sys
import tempfile

import checks
from checks import expect

dump = sys.argv[1]
rng = random.Random(14)
with tempfile.TemporaryDirectory() as tmp:
    sizes = list(range(0, 131)) + [1000, 4095, 4096, 65535, 65536, 65537, 1 << 20 | 5]
    paths, want = [], []
    for n in sizes:
        data = bytes(rng.getrandbits(8) for _ in range(n)) if n < 70000 else os.urandom(n)
        path = os.path.join(tmp, f"m{n}")
        with open(path, "wb") as f:
            f.write(data)
        paths.append(path)
        want.append(hashlib.sha256(data).hexdigest())
    out = subprocess.run([dump, "sha256"] + paths, capture_output=True, text=True, check=True).stdout.split("\n")
    bad = [n for n, line, w in zip(sizes, out, want) if line.split() != [w] * 5]
    expect(f"{len(sizes)} messages (0-130 bytes, 1000 B .. 1 MiB), whole files and in pieces of 1/7/64/1000 "
           "bytes: every digest equals hashlib.sha256", not bad and len(out) >= len(sizes), f"differ at sizes {bad[:10]}")
sys.exit(checks.exit_status())

"""An op given a length past its table stops instead of reading on.

The embeddings op reads row t of the position table (max_position_embeddings rows) for a
token at position t; a sequence longer than the table would read the parameters stored after
it as positions, silently (bertpre eval of a 128-position model on 256-token rows printed a
loss). backend.h gives the op the table's rows, and every backend stops the process naming
both lengths. `test_cuda_ops_emu PREC --past-positions BACKEND` calls embeddings_forward with
sequences of 9 tokens on a table of 8 rows (the rows after it allocated, so that reading on
would not fault); it must exit 1 with the message, never return (exit 3: it read past the table).

usage: test_op_bounds.py TEST_CUDA_OPS_EMU
"""
import subprocess
import sys

import checks
from checks import expect

ops = sys.argv[1]
for prec in ("fp32", "fp16"):
    for backend in ("cpu", "cuda"):
        if backend == "cpu" and prec != "fp32":
            continue  # the CPU reference computes in FP32 only
        p = subprocess.run([ops, prec, "--past-positions", backend], capture_output=True, text=True, timeout=120)
        expect(f"embeddings_forward, T = 9 on a table of 8 rows, {backend} {prec}: exit 1 naming both lengths",
               p.returncode == 1 and "sequence length 9 is longer than the position table of 8 rows" in p.stderr,
               f"exit {p.returncode}\n{p.stdout}{p.stderr}")
sys.exit(checks.exit_status())

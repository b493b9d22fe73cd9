"""The fused attention backward is never replaced without a word, and never when asked for.

flash_attention.cu runs the fused cluster kernel where the device holds a cluster of the
size a sequence needs (cudaOccupancyMaxActiveClusters > 0), the delta + dq + dk/dv kernels
otherwise. The emulation answers that query with BERTPRE_TEST_EMU_CLUSTER_OCCUPANCY
(test-only), so the path for a device that answers 0 runs here:
- no BERTPRE_ATTN_BACKWARD: the split kernels run, every attention check of the FP16 op
  test passes against the CPU reference, and stderr names the device, the cluster, the reason
  and "runs the kernels without clusters" (tools/gpu_suite.sh fails a check whose output
  holds that notice, so a GPU suite cannot pass on the split kernels in the fused one's name);
- BERTPRE_ATTN_BACKWARD=fused: exit 1 with an error naming the variable and the reason,
  before any attention backward ran;
- without the hook: no notice (the fused kernel ran).

usage: test_attn_fallback.py TEST_CUDA_OPS_EMU
"""
import os
import subprocess
import sys

import checks
from checks import expect

ops = sys.argv[1]
base = {k: v for k, v in os.environ.items() if k not in ("BERTPRE_ATTN_BACKWARD", "BERTPRE_TEST_EMU_CLUSTER_OCCUPANCY")}
NOTICE = "runs the kernels without clusters"
REASON = "BERTPRE_TEST_EMU_CLUSTER_OCCUPANCY says so"


def run(extra):
    return subprocess.run([ops, "fp16", "-o", "attention"], env={**base, **extra}, capture_output=True, text=True,
                          timeout=600)


p = run({"BERTPRE_TEST_EMU_CLUSTER_OCCUPANCY": "0"})
expect("occupancy 0: the op test passes on the split kernels (exit 0)", p.returncode == 0, p.stdout[-3000:] + p.stderr)
expect("occupancy 0: stderr says the backward runs without clusters, and why",
       NOTICE in p.stderr and REASON in p.stderr and "CUDA emulation" in p.stderr, p.stderr)
expect("occupancy 0: attention checks ran", " attention" in p.stdout and "0 failed" in p.stdout, p.stdout[-2000:])

p = run({"BERTPRE_TEST_EMU_CLUSTER_OCCUPANCY": "0", "BERTPRE_ATTN_BACKWARD": "fused"})
err = p.stderr
expect("occupancy 0, BERTPRE_ATTN_BACKWARD=fused: exit 1", p.returncode == 1, f"exit {p.returncode}\n{err}")
expect("occupancy 0, BERTPRE_ATTN_BACKWARD=fused: the error names the variable and the reason",
       "error: BERTPRE_ATTN_BACKWARD=fused" in err and REASON in err and "cannot run" in err, err)
expect("occupancy 0, BERTPRE_ATTN_BACKWARD=fused: no split kernels in its place", NOTICE not in err, err)

p = run({"BERTPRE_ATTN_BACKWARD": "fused"})
expect("no hook, BERTPRE_ATTN_BACKWARD=fused: passes with no fallback notice",
       p.returncode == 0 and NOTICE not in p.stderr, f"exit {p.returncode}\n{p.stderr}")

sys.exit(checks.exit_status())

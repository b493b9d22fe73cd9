"""The GPU tests on a machine without a GPU: they skip (exit 77) by default and fail (exit 1,
saying BERTPRE_REQUIRE_GPU) when BERTPRE_REQUIRE_GPU=1, which tools/gpu_suite.sh sets on GPU
machines so that a broken driver or a missing library cannot pass as a skip. Skipped where
a GPU is visible (then the GPU suite itself runs those binaries).

usage: test_gpu_required.py -- COMMAND... [-- COMMAND...]
"""
import os
import subprocess
import sys

import checks
from checks import expect

commands, cur = [], None
for a in sys.argv[1:]:
    if a == "--":
        cur = []
        commands.append(cur)
    else:
        cur.append(a)

for cmd in commands:
    name = " ".join(os.path.basename(c) for c in cmd[:3])
    env = dict(os.environ)
    env.pop("BERTPRE_REQUIRE_GPU", None)
    plain = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if plain.returncode != 77:
        print(f"SKIP: {name} did not skip (exit {plain.returncode}): a GPU is visible, the GPU suite covers it")
        sys.exit(77)
    expect(f"{name}: skips without BERTPRE_REQUIRE_GPU", "SKIP" in plain.stdout, plain.stdout[-300:])
    env["BERTPRE_REQUIRE_GPU"] = "1"
    req = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    expect(f"{name}: exit 1 with BERTPRE_REQUIRE_GPU=1", req.returncode == 1, req.returncode)
    expect(f"{name}: the message names BERTPRE_REQUIRE_GPU", "BERTPRE_REQUIRE_GPU" in req.stdout, req.stdout[-300:])
sys.exit(checks.exit_status())

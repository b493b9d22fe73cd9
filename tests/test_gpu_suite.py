"""tools/gpu_suite.sh's verdict and packing, with stand-ins for the GPU, the build, the tests,
the sanitizer and the bench (no GPU needed):

- the verdict (sourced functions): a failing check and a counted failure each print their own
  FAIL line, and "failed checks: N" counts exactly the FAIL lines; a SKIP and a CUT are
  counted apart and are not failures;
- san_check with a stand-in compute-sanitizer: a clean run passes; a run that times out, one
  that reports an error and is cut before its summary, and one that ends with no message all
  stay failures; only a sanitizer that says it cannot run ("Error: Device not supported") is
  "SKIP ... sanitizer unavailable on this machine" with that message;
- `run head` in a copy of the script, the GPU, meson, ninja, compute-sanitizer and the bench
  replaced by stand-ins: OUTDIR holds exactly summary.txt, checks.txt, bench.txt, bench.json
  and head-rest.tar.gz (the log and the bench's other files inside), and no work folder is
  left behind; `run ops` likewise: summary.txt, checks.txt, ops-rest.tar.gz; `run bench` with
  BENCH_MODEL, BENCH_SHAPES, BENCH_COMPILE and PART_SECONDS hands bench_gpu.py --model,
  --shapes, --compile and a --deadline; `run variants`
  with a flag variant and an env: one, the profiles of each in variants.txt, the env: one's
  run with its variable; a bench whose bertpre run the limit cut: a CUT line and exit 3; with HEAD_SECONDS too short for every test the rest are CUT, not failed
  (exit 3); killed with SIGKILL during the bench, OUTDIR still holds the summary and the
  check lines of the tests that ran (packed every PACK_EVERY = 1 s).

usage: test_gpu_suite.py GPU_SUITE_SH
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

import checks
from checks import expect

suite = os.path.abspath(sys.argv[1])


def sourced(script, cwd):
    """Runs bash SCRIPT after sourcing the suite's functions, with dest and log in CWD."""
    head = f'. "{suite}"; dest="{cwd}"; log="{cwd}/x.log"; : >"$log"; : >"$dest/summary.txt"\n'
    return subprocess.run(["bash", "-c", head + script], capture_output=True, text=True, timeout=120, cwd=cwd)


def lines(path):
    return open(path).read().splitlines() if os.path.exists(path) else []


with tempfile.TemporaryDirectory() as tmp:
    # The verdict: every counted failure has its own FAIL line.
    d = os.path.join(tmp, "verdict")
    os.makedirs(d)
    p = sourced('check "passes" 10 true; check "fails" 10 false; counted_fail "bench: a stand-in failure"\n'
                'check "skips" 10 bash -c "echo \'Skipped:            1\'"\n'
                'limit_s=20; reserve_s=15; check "no time for it" 10 true; finish 0', d)
    summary = lines(os.path.join(d, "summary.txt"))
    fail_lines = [x for x in summary if x.startswith("FAIL")]
    expect("the verdict: 'failed checks: 2 (cut: 1, skipped: 1)', two FAIL lines, exit 1",
           p.returncode == 1 and summary[-1:] == ["failed checks: 2 (cut: 1, skipped: 1)"] and len(fail_lines) == 2,
           "\n".join(summary) + p.stderr)
    expect("the FAIL lines name the failing check and the counted failure",
           len(fail_lines) == 2 and "fails" in fail_lines[0] and fail_lines[1] == "FAIL  bench: a stand-in failure",
           summary)
    expect("a check the command's limit leaves no time for: 'CUT  no time for it ... not run'",
           any(x.startswith("CUT") and "no time for it" in x and "not run" in x for x in summary), summary)

    # san_check with stand-in sanitizers.
    fake = os.path.join(tmp, "sanitizer")
    with open(fake, "w") as f:
        f.write("""#!/bin/sh
echo "========= COMPUTE-SANITIZER"
case "$STANDIN_CASE" in
clean) echo "test output"; echo "========= ERROR SUMMARY: 0 errors"; exit 0 ;;
timeout) sleep 30 ;;
finding) echo "========= Invalid __global__ write of size 4 bytes"; echo "=========     at layernorm_forward+0x1c0"; exit 3 ;;
silent) exit 1 ;;
unsupported) echo "========= Error: Device not supported. Supported devices are compute capability 7.5 and newer"; exit 1 ;;
esac
""")
    os.chmod(fake, 0o755)
    cases = {"clean": "PASS", "timeout": "FAIL (timed out after 2s)", "finding": "FAIL", "silent": "FAIL",
             "unsupported": "SKIP"}
    for case, status in cases.items():
        d = os.path.join(tmp, "san-" + case)
        os.makedirs(d)
        p = sourced(f'STANDIN_CASE={case} san_check "memcheck {case}" 2 "{fake}" --tool memcheck prog; finish 0', d)
        summary = lines(os.path.join(d, "summary.txt"))
        line = next((x for x in summary if f"memcheck {case}" in x), "")
        want_verdict = f"failed checks: {0 if status in ('PASS', 'SKIP') else 1} (cut: 0, skipped: " \
                       f"{1 if status == 'SKIP' else 0})"
        extra = ""
        if case == "unsupported":
            extra = " with the sanitizer's message"
            ok = line.endswith("sanitizer unavailable on this machine: Error: Device not supported. Supported devices "
                               "are compute capability 7.5 and newer")
        else:
            ok = True
        expect(f"san_check, a sanitizer that {case}: {status}{extra}, '{want_verdict}'",
               line.startswith(status) and ok and summary[-1:] == [want_verdict], "\n".join(summary) + p.stderr)

    # run head with stand-ins for the GPU machine.
    tree = os.path.join(tmp, "tree")
    os.makedirs(os.path.join(tree, "tools"))
    shutil.copy(suite, os.path.join(tree, "tools", "gpu_suite.sh"))
    deps = os.path.join(tree, ".gpu-deps")
    for f in subprocess.run(["bash", "-c", f'. "{suite}"; echo "${{bundle_files[@]}}"'], capture_output=True,
                            text=True, cwd=tmp).stdout.split():
        os.makedirs(os.path.dirname(os.path.join(deps, f)), exist_ok=True)
        open(os.path.join(deps, f), "w").close()
    bin_dir = os.path.join(tmp, "bin")
    os.makedirs(bin_dir)
    real_python = shutil.which("python3")
    stand_ins = {
        "nvidia-smi": 'case "$*" in *compute_cap*) echo 9.0 ;; *) echo "Stand-in GPU, 0.0, 1 MiB, 1 MHz" ;; esac',
        "nvcc": 'echo "stand-in nvcc"',
        "ninja": "exit 0",
        "meson": 'case "$1" in\n'
                 'setup) mkdir -p "$2" && touch "$2/build.ninja" ;;\n'
                 'test) for t; do :; done; sleep "${STANDIN_TEST_SECONDS:-0}"; echo "ok   $t: worst 1e-7"\n'
                 '      echo "Ok:                 1" ;;\n'
                 'esac',
        "compute-sanitizer": 'echo "========= COMPUTE-SANITIZER"; echo "========= ERROR SUMMARY: 0 errors"',
        "python3": 'if [ "$1" = tools/bench_gpu.py ] && [ "$4" = --profile ]; then\n'
                   '  mkdir -p "$3"; printf "# bertpre op profile, X=%s\\ngroup GEMMs 1.0 ms\\n" "${X:-unset}" '
                   '>"$3/profile-$5.txt"; exit 0\n'
                   'elif [ "$1" = tools/bench_gpu.py ]; then\n'
                   '  while [ "$1" != --out ]; do shift; done; dir=$2\n'
                   '  echo \'[{"framework": "gemm", "tflops": {"fp16": 1.0}}]\' >"$dir/bench.json"\n'
                   '  echo "GPU: Stand-in GPU; these are this GPU\'s figures" >"$dir/bench.txt"\n'
                   '  echo "args: $*" >>"$dir/bench.txt"\n'
                   '  echo "config" >"$dir/bertpre-128x256-fp16.json"\n'
                   '  [ -n "$STANDIN_BENCH_CUT" ] && echo "cut: bertpre at 128x256 fp16: timed out" >>"$dir/bench.txt"\n'
                   '  sleep "${STANDIN_BENCH_SECONDS:-0}"; exit 0\n'
                   f'fi\nexec {real_python} "$@"',
    }
    for name, body in stand_ins.items():
        with open(os.path.join(bin_dir, name), "w") as f:
            f.write("#!/bin/sh\n" + body + "\n")
        os.chmod(os.path.join(bin_dir, name), 0o755)
    work = os.path.join(tmp, "work")
    os.makedirs(work)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"], TMPDIR=work, BERTPRE_COMMIT="stand-in",
               PACK_EVERY="1")

    def head(out, **extra):
        return subprocess.Popen(["bash", os.path.join(tree, "tools", "gpu_suite.sh"), "run", "head", out],
                                cwd=tree, env=dict(env, **extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)

    out = os.path.join(tmp, "out-whole")
    p = head(out, HEAD_SECONDS="120")
    text = p.communicate(timeout=300)[0]
    files = sorted(os.listdir(out)) if os.path.isdir(out) else []
    expect("run head: exit 0, OUTDIR holds exactly summary.txt, checks.txt, bench.txt, bench.json, head-rest.tar.gz",
           p.returncode == 0 and files == ["bench.json", "bench.txt", "checks.txt", "head-rest.tar.gz", "summary.txt"],
           f"exit {p.returncode}, files {files}\n{text[-3000:]}")
    summary = lines(os.path.join(out, "summary.txt"))
    passed = [x for x in summary if x.startswith("PASS")]
    expect("summary.txt: configure, build, 10 tests, memcheck and bench PASS; 'failed checks: 0 (cut: 0, skipped: 0)'",
           len(passed) == 14 and summary[-1:] == ["failed checks: 0 (cut: 0, skipped: 0)"], "\n".join(summary))
    expect("checks.txt: the check line of each of the 10 tests",
           len([x for x in lines(os.path.join(out, "checks.txt")) if x.startswith("ok ")]) == 10,
           lines(os.path.join(out, "checks.txt")))
    names = []
    if os.path.exists(os.path.join(out, "head-rest.tar.gz")):
        with tarfile.open(os.path.join(out, "head-rest.tar.gz")) as t:
            names = sorted(os.path.normpath(n) for n in t.getnames())
    expect("head-rest.tar.gz: head.log and the bench's other files, not the files beside it",
           "head.log" in names and "bertpre-128x256-fp16.json" in names and "summary.txt" not in names, names)
    expect("the work folder is removed", os.listdir(work) == [], os.listdir(work))

    out = os.path.join(tmp, "out-bench-cut")
    p = head(out, HEAD_SECONDS="120", STANDIN_BENCH_CUT="1")
    p.communicate(timeout=300)
    summary = lines(os.path.join(out, "summary.txt"))
    expect("a bertpre bench run cut at the limit: exit 3, 'CUT   bench: 1 bertpre run(s) at the command's limit', "
           "'failed checks: 0 (cut: 1, skipped: 0)'",
           p.returncode == 3 and "CUT   bench: 1 bertpre run(s) at the command's limit" in summary and
           summary[-1:] == ["failed checks: 0 (cut: 1, skipped: 0)"], f"exit {p.returncode}\n" + "\n".join(summary))

    out = os.path.join(tmp, "out-ops")
    p = subprocess.run(["bash", os.path.join(tree, "tools", "gpu_suite.sh"), "run", "ops", out], cwd=tree, env=env,
                       capture_output=True, text=True, timeout=300)
    files = sorted(os.listdir(out)) if os.path.isdir(out) else []
    expect("run ops: exit 0, OUTDIR holds exactly summary.txt, checks.txt and ops-rest.tar.gz",
           p.returncode == 0 and files == ["checks.txt", "ops-rest.tar.gz", "summary.txt"],
           f"exit {p.returncode}, files {files}\n{p.stdout[-2000:]}")

    out = os.path.join(tmp, "out-bench-modernbert")
    p = subprocess.run(["bash", os.path.join(tree, "tools", "gpu_suite.sh"), "run", "bench", out], cwd=tree,
                       env=dict(env, BENCH_MODEL="configs/modernbert-base.json", BENCH_SHAPES="1024x32:bf16",
                                BENCH_COMPILE="2", PART_SECONDS="300"), capture_output=True, text=True, timeout=300)
    text = open(os.path.join(out, "bench.txt")).read() if os.path.exists(os.path.join(out, "bench.txt")) else ""
    args = next((x for x in text.splitlines() if x.startswith("args: ")), "").split()
    deadline = args[args.index("--deadline") + 1] if "--deadline" in args else ""
    expect("run bench with BENCH_MODEL, BENCH_SHAPES, BENCH_COMPILE=2 and PART_SECONDS=300: exit 0, bench_gpu.py given "
           "--model, --shapes, --compile 2 and a --deadline (seconds since the epoch)",
           p.returncode == 0 and args[args.index("--model") + 1:args.index("--model") + 2] == ["configs/modernbert-base.json"]
           and "--shapes" in args and args[args.index("--shapes") + 1] == "1024x32:bf16"
           and args[args.index("--compile") + 1] == "2" and deadline.isdigit(),
           f"exit {p.returncode}\n{text}\n{p.stdout[-2000:]}")

    out = os.path.join(tmp, "out-variants")
    p = subprocess.run(["bash", os.path.join(tree, "tools", "gpu_suite.sh"), "run", "variants", out], cwd=tree,
                       env=dict(env, VARIANTS="env:X=1|-DFA_FWD_CARVEOUT=67"), capture_output=True, text=True,
                       timeout=300)
    text = open(os.path.join(out, "variants.txt")).read() if os.path.exists(os.path.join(out, "variants.txt")) else ""
    expect("run variants 'env:X=1|-DFA_FWD_CARVEOUT=67': exit 0, variants.txt holds variants 0-2 at seq 128 and 512, "
           "variant 1 run with X=1 and the others without",
           p.returncode == 0 and all(f"variant {i} " in text for i in range(3)) and text.count("seq 128:") == 3 and
           text.count("profile, X=1\n") == 2 and text.count("profile, X=unset\n") == 4, f"exit {p.returncode}\n{text}\n{p.stdout[-3000:]}\n{p.stderr[-1000:]}")

    out = os.path.join(tmp, "out-short")
    p = head(out, HEAD_SECONDS="32", STANDIN_TEST_SECONDS="2")
    text = p.communicate(timeout=300)[0]
    summary = lines(os.path.join(out, "summary.txt"))
    cut = [x for x in summary if x.startswith("CUT")]
    expect("HEAD_SECONDS 32 with 2 s tests: exit 3, the later checks CUT, none FAIL, 'failed checks: 0 (cut: N, ...'",
           p.returncode == 3 and cut and not any(x.startswith("FAIL") for x in summary) and
           summary[-1:] == [f"failed checks: 0 (cut: {len(cut)}, skipped: 0)"], f"exit {p.returncode}\n" +
           "\n".join(summary))

    out = os.path.join(tmp, "out-killed")
    p = head(out, HEAD_SECONDS="300", STANDIN_BENCH_SECONDS="60")
    deadline = time.time() + 120
    while time.time() < deadline and not any("memcheck" in x for x in lines(os.path.join(out, "summary.txt"))):
        time.sleep(0.5)
    time.sleep(1.5)
    os.kill(p.pid, signal.SIGKILL)
    time.sleep(2.5)  # the packer ends within a second of the script
    summary = lines(os.path.join(out, "summary.txt"))
    expect("killed with SIGKILL during the bench: OUTDIR still has the summary with the 10 tests' PASS lines and "
           "checks.txt", len([x for x in summary if x.startswith("PASS") and "_gpu_" in x]) == 10 and
           len(lines(os.path.join(out, "checks.txt"))) == 10, "\n".join(summary))
    os.killpg(p.pid, signal.SIGKILL)  # the stand-in bench's sleep
    p.communicate(timeout=60)
sys.exit(checks.exit_status())

"""README.md's "Pretrain on your own text" and "Fine-tuning the export" followed as written,
in a copy of the repository (the files git tracks, as they are in the working tree), with the
commands parsed from README.md, run by bash from the copy's root with Debian's python3 first on
the PATH (no .venv/bin), as on a fresh machine.

The copy shares the source's .venv and build/ (symbolic links): a first build takes minutes, so
`tools/setup.sh` and `tools/build.sh` (run as written, exit 0) only check here. The text is
about 300 KB of the Python standard library's docstrings (my-texts/, a file per module). The
pretrain line runs as written plus `--set train.steps=40 --set train.log_every=5` (the tiny
preset's 1,200 steps take minutes); at step 5 it gets SIGINT on its process group (Ctrl-C):
it must stop non-zero without an export; the README's resume line, as written, must finish
it (exit 0, the export, eval.json, the plot, one "next:" block), and every "next:" line runs as
printed (LABELLED: a folder made here). Then the README's Python tool lines: plot_metrics.py
--tensorboard (event files), `.venv/bin/tensorboard --logdir` (serves: it prints its
address, then is stopped), and finetune.py with --data as a folder and as a TSV (exit 0, a
held-out accuracy); the line on the demo's export is left to the finetune test (minutes).

usage: test_readme.py SOURCE_ROOT
"""
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import checks
from checks import expect
from data_fixtures import copy_tracked, python_docstrings, require

source = os.path.abspath(sys.argv[1])
if not os.path.exists(os.path.join(source, ".venv", "bin", "python")) or not os.path.exists(
        os.path.join(source, "build", "bertpre")):
    print("SKIP: needs the source's .venv (tools/setup.sh) and build/bertpre (tools/build.sh)")
    sys.exit(77)
require(os.path.join(source, "build", "bertpre"), "hdf5", "sentencepiece")
readme = open(os.path.join(source, "README.md")).read()


def section(title):
    start = readme.index(f"## {title}")
    end = readme.find("\n## ", start + 1)
    return readme[start:end if end > 0 else None]


def block_commands(text):
    """Indented command lines of a section's code blocks, without their comments."""
    return [line.strip().split("  #")[0].strip() for line in text.splitlines()
            if re.match(r"^    (tools/|\.venv/)", line)]


def inline_commands(text):
    """Commands in `backticks` of the prose that start with tools/ or .venv/."""
    return [" ".join(c.split()) for c in re.findall(r"`([^`]+)`", text, re.S) if c.startswith(("tools/", ".venv/"))]


own, tune = section("Pretrain on your own text"), section("Fine-tuning the export")
setup_lines = block_commands(own)
prose = inline_commands(own)
finetune_lines = block_commands(tune)
print("README commands:", setup_lines, prose, finetune_lines, sep="\n  ")

with tempfile.TemporaryDirectory() as tmp:
    clone = os.path.join(tmp, "bertpre")
    copy_tracked(source, clone)
    for shared in (".venv", "build"):
        os.symlink(os.path.join(source, shared), os.path.join(clone, shared))
    texts = os.path.join(clone, "my-texts")
    written = python_docstrings(texts, packages=["email", "json", "http", "xml", "logging", "importlib",
                                                              "urllib"])
    size = sum(os.path.getsize(f) for f in written)
    print(f"my-texts/: {len(written)} files, {size} bytes")
    path = ":".join(p for p in os.environ.get("PATH", "").split(":") if ".venv" not in p and "pyenv" not in p)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "BERTPRE")}
    env.update(PATH="/usr/bin:/bin:" + path)

    def shell(command, **kw):
        return subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, cwd=clone, **kw)

    setups = [c for c in setup_lines if c.startswith(("tools/setup.sh", "tools/build.sh"))]
    pretrain = [c for c in setup_lines if c.startswith("tools/pretrain.sh")]
    expect(f"README: set-up lines tools/setup.sh then tools/build.sh: {setups}",
           setups == ["tools/setup.sh", "tools/build.sh"])
    dry = subprocess.run(["ninja", "-C", os.path.join(source, "build"), "-n"], capture_output=True, text=True)
    for command in setups:
        if command == "tools/build.sh" and "no work to do" not in dry.stdout:
            # The copy's build/ is the source's: a build there would reconfigure it from the copy.
            print("SKIP: 'tools/build.sh' in the copy (the source's build is not up to date: run tools/build.sh)")
            continue
        p = shell(command)
        expect(f"'{command}' as written: exit 0", p.returncode == 0, p.stdout[-1500:] + p.stderr[-1500:])
    expect(f"README: one pretrain line: {pretrain}", len(pretrain) == 1)
    resume = [c for c in prose if "--resume" in c]
    expect(f"README: the resume line: {resume}", len(resume) == 1)
    if pretrain and resume:
        log = os.path.join(tmp, "pretrain.log")
        job = subprocess.Popen(["bash", "-c", pretrain[0] + " --set train.steps=40 --set train.log_every=5"],
                               stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env, cwd=clone,
                               start_new_session=True)
        end = time.time() + 240
        while time.time() < end and job.poll() is None and not re.search(r"step +5/", open(log).read()):
            time.sleep(0.2)
        os.killpg(job.pid, signal.SIGINT)
        status = job.wait(120)
        out = open(log).read()
        expect(f"'{pretrain[0]}' interrupted at step 5 (Ctrl-C): exit {status}, non-zero, no export",
               status != 0 and "training stopped at step" in out
               and not os.path.exists(os.path.join(clone, "my-run", "export")), out[-2500:])
        p = shell(resume[0])
        expect(f"'{resume[0]}' as written: exit 0, the export, eval.json, the plot",
               p.returncode == 0 and all(os.path.exists(os.path.join(clone, "my-run", f))
                                         for f in ("export/config.json", "eval.json", "metrics.png")),
               p.stdout[-2500:] + p.stderr[-2500:])
        expect("one 'next:' block", p.stdout.count("\nnext:") == 1, p.stdout[-1500:])
        labelled = os.path.join(clone, "labelled")
        for k, name in enumerate(sorted(written)[:24]):
            os.makedirs(os.path.join(labelled, "ab"[k % 2]), exist_ok=True)
            with open(os.path.join(labelled, "ab"[k % 2], f"{k}.txt"), "w") as f:
                f.write(open(name).read()[:500])
        for line in p.stdout[p.stdout.find("\nnext:") + 7:].splitlines():
            if not line.startswith("  "):
                break
            command = line.split("   #")[0].strip().replace(" LABELLED", " labelled")
            q = shell(command)
            expect(f"next: '{command[:100]}' as printed: exit 0", q.returncode == 0, q.stdout[-1500:] + q.stderr[-1500:])

    for command in (c for c in prose if c.startswith("tools/plot_metrics.py")):
        q = shell(command)
        tb = os.path.join(clone, "tb")
        expect(f"'{command}' as written: exit 0, event files in tb/",
               q.returncode == 0 and os.path.isdir(tb) and os.listdir(tb), q.stdout[-1500:] + q.stderr[-1500:])
    for command in (c for c in prose if c.startswith(".venv/bin/tensorboard")):
        said = os.path.join(tmp, "tensorboard.log")
        board = subprocess.Popen(["bash", "-c", "exec " + command], stdout=open(said, "w"), stderr=subprocess.STDOUT,
                                 env=env, cwd=clone, start_new_session=True)
        seen, end = "", time.time() + 60
        while time.time() < end and board.poll() is None and "http://" not in seen:
            time.sleep(0.2)
            seen = open(said, errors="replace").read()
        serving = "http://" in seen and board.poll() is None
        os.killpg(board.pid, signal.SIGTERM)
        board.wait(30)
        expect(f"'{command}' as written serves (prints its address)", serving, seen[-1500:])

    tsv = os.path.join(clone, "labelled.tsv")
    with open(tsv, "w") as f:
        for k, name in enumerate(sorted(written)[:30]):
            text = " ".join(open(name).read()[:400].split())
            f.write(f"{'ab'[k % 2]}\t{text}\n")
    for command in finetune_lines:
        if "build/demo/export" in command:
            print(f"SKIP: '{command}' (the demo's export and its minutes-long task: the finetune test runs it)")
            continue
        q = shell(command)
        expect(f"'{command}' as written: exit 0, a held-out accuracy",
               q.returncode == 0 and "held-out accuracy" in q.stdout, q.stdout[-1500:] + q.stderr[-1500:])

sys.exit(checks.exit_status())

"""Fault injection: what survives a full disk, a SIGKILL at any moment, damaged checkpoint
files and a shard damaged while it is being read. Every case runs a tiny BERT (2 layers,
hidden 16) for a few steps; the reference of "nothing lost" is the uninterrupted run of the
same binary, compared bit for bit.

Cases (one meson test each):
  diskfull   the LD_PRELOAD injector (tests/fault_inject.c) gives the checkpoint directory
             room for the probe and one checkpoint: the second write fails with exit 1 naming
             the file and ENOSPC, its temporary directory is gone, the first checkpoint
             verifies; a retry with --resume auto ends bitwise equal to the uninterrupted
             run. No room at all: the run stops before its first step. A file system with less
             free space than a checkpoint: a warning naming both sizes. train.metrics_file on a
             full device (/dev/full): exit 1 naming the file and ENOSPC, after the checkpoint of
             the step whose log line failed (complete, and it resumes); without
             train.checkpoint_dir exit 1 all the same.
  sigkill    24 trials: SIGKILL at a random moment of a run that checkpoints every step (12
             of them inside a checkpoint write, at a random file, the other 12 at a random
             time), then --resume auto until done: every trial's final weights, moments and
             state bitwise equal to the uninterrupted run, and every step's logged losses too.
  damaged_checkpoint  each file of a checkpoint truncated (2 lengths) and bit-flipped (3 random
             bits): every one of the 20 damaged copies is refused with exit 1 naming the file.
  prep_diskfull  tokenizer train into a directory with room for nothing, half the model, the
             model and 20 bytes (the injector): exit 1 naming the file and ENOSPC, nothing left
             (no cut .model, no empty .vocab); onto an existing model: exit 1, the model unchanged.
             prep into a directory with room for 0, 5,000 and 40,000 bytes (the injector):
             exit 1 with one line naming the shard file and ENOSPC, no HDF5 dump, and no
             unfinished (.partial) file left; with room, the same prep writes its shards; with
             room for all but the last byte of them (the disk fills while the last shard is
             closed, the others closed under their temporary names) and stopped by a bad JSONL
             line at the end of its input: exit 1, none of the unfinished shards left.
  durable    the write protocol of every file bertpre leaves behind (docs/RELIABILITY.md),
             traced by the injector (BERTPRE_FAULT_TRACE) over tokenizer train, prep, a
             training run with checkpoints and --eval-json, eval --json, export and import:
             each file lies under its final name only through a rename or link (of itself or
             of its directory) after it was last created; nothing is renamed or linked into
             place with a write not yet fsynced; each rename or link into a final name is
             followed by an fsync of that name's directory. The lock files and the metrics
             file (a log appended a line at a time) are the documented exceptions; the
             metrics file is fsynced before each checkpoint is renamed into place.
  damaged_shard  a shard's gzip chunks overwritten while `bertpre train` reads it: exit 1
             with an error naming the file, the dataset and the row, and none of HDF5's own
             diagnostics (HDF5-DIAG) on stderr.

usage: test_faults.py BERTPRE FAULT_INJECT_SO CASE
"""
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import checks
from checks import expect

bertpre, injector, case = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
have_hdf5 = checks.features(bertpre)["hdf5"]
MODEL = {"vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 32, "max_position_embeddings": 32}
TRAIN = {"micro_batch_size": 4, "global_batch_size": 8, "seq_length": 24, "max_predictions_per_seq": 4,
         "steps": 8, "log_every": 1, "learning_rate": 0.01, "warmup_proportion": 0.25, "checkpoint_every": 1,
         "keep_checkpoints": 2}
COMPARED = ("step", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "lr", "loss_scale", "skipped_steps")
CKPT_FILES = ("model.safetensors", "optimizer.safetensors", "state.json")


def config(tmp, name, **train):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        json.dump({"model": MODEL, "train": {**TRAIN, **train}}, f)
    return path


def run(cfg, *args, env=None):
    return subprocess.run([bertpre, "train", cfg, *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def fault_env(directory, **values):
    env = {"LD_PRELOAD": injector, "BERTPRE_FAULT_DIR": os.path.abspath(directory)}
    env.update({f"BERTPRE_FAULT_{k.upper()}": str(v) for k, v in values.items()})
    return env


def step_dir(root, step):
    return os.path.join(root, f"step-{step:09d}")


def digests(d):
    out = {}
    for name in CKPT_FILES:
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
        if name == "state.json":  # the config records paths, elapsed_s the time: both differ between runs
            state = json.loads(data)
            state.pop("config"), state.pop("config_hash"), state.pop("elapsed_s", None)
            data = json.dumps(state, sort_keys=True).encode()
        out[name] = hashlib.sha256(data).hexdigest()
    return out


def logged(path):
    """Metrics by step; a step logged twice (before a crash and again after the resume) must
    be logged the same both times."""
    rows, clash = {}, []
    with open(path) as f:
        for line in f:
            m = json.loads(line)
            row = {k: m[k] for k in COMPARED}
            if m["step"] in rows and rows[m["step"]] != row:
                clash.append(m["step"])
            rows[m["step"]] = row
    return rows, clash


def reference(tmp):
    root = os.path.join(tmp, "ref")
    p = run(config(tmp, "ref.json", checkpoint_dir=root, metrics_file=root + ".jsonl"))
    if p.returncode != 0:
        expect("the uninterrupted run exits 0", False, p.stderr)
        sys.exit(1)
    return root, digests(step_dir(root, TRAIN["steps"])), logged(root + ".jsonl")[0]


def case_diskfull(tmp):
    ref_root, ref_final, _ = reference(tmp)
    one = sum(os.path.getsize(os.path.join(step_dir(ref_root, TRAIN["steps"]), n)) for n in CKPT_FILES + ("COMPLETE",))
    root = os.path.join(tmp, "full")
    cfg = config(tmp, "full.json", checkpoint_dir=root)
    p = run(cfg, env=fault_env(root, space=one + 200))
    expect("room for one checkpoint: the second write fails with exit 1, naming the file and ENOSPC",
           p.returncode == 1 and "No space left on device" in p.stderr and root in p.stderr, p.stderr[-800:])
    names = sorted(set(os.listdir(root)) - {".bertpre-lock"})  # the directory's lock file stays
    expect("the failed write removed its temporary directory; step 1 is there", names == ["step-000000001"], names)
    v = run(cfg, "--resume", step_dir(root, 1), "--set", "train.steps_this_run=1")
    expect("the checkpoint written before the disk filled verifies and resumes", v.returncode == 0, v.stderr[-600:])
    shutil.rmtree(step_dir(root, 2))
    os.makedirs(os.path.join(root, ".tmp-step-000000002.999"))  # as a crash during a write leaves it
    r = run(cfg, "--resume", "auto")
    expect("a retry with space: removes the stale temporary directory, says so, and exits 0",
           r.returncode == 0 and "removed 1 temporary directory" in r.stdout, r.stdout[-600:] + r.stderr)
    expect("the retried run ends bitwise equal to the uninterrupted run (weights, moments, state)",
           digests(step_dir(root, TRAIN["steps"])) == ref_final)

    root2 = os.path.join(tmp, "nospace")
    p = run(config(tmp, "nospace.json", checkpoint_dir=root2, metrics_file=root2 + ".jsonl"),
            env=fault_env(root2, space=0))
    expect("no room at all: exit 1 before the first step, naming train.checkpoint_dir and the probe file",
           p.returncode == 1 and "checkpoint_dir" in p.stderr and ".probe-" in p.stderr and
           not any(line.startswith("step ") for line in p.stdout.splitlines()) and
           not os.path.exists(root2 + ".jsonl"), p.stdout[-300:] + p.stderr)

    root3 = os.path.join(tmp, "small")
    p = run(config(tmp, "small.json", checkpoint_dir=root3, steps=1), env=fault_env(root3, free=9 * 4096))
    expect("less free space than one checkpoint: a warning naming the free space and the checkpoint size, "
           "then the run", p.returncode == 0 and "warning" in p.stderr and "0.0369 MB free" in p.stderr and
           "(0.141 MB: weights and two LAMB moments)" in p.stderr, p.stderr)


    if os.path.exists("/dev/full"):
        root4 = os.path.join(tmp, "metrics-full")
        cfg = config(tmp, "metrics-full.json", checkpoint_dir=root4, checkpoint_every=0, metrics_file="/dev/full")
        p = run(cfg)
        expect("metrics file on a full device: exit 1 naming the file and ENOSPC, after a complete checkpoint of "
               "step 1 (its log line failed)", p.returncode == 1 and "'/dev/full' (train.metrics_file) failed: No "
               "space left on device (errno 28)" in p.stderr and os.path.isfile(step_dir(root4, 1) + "/COMPLETE"),
               p.stdout[-600:] + p.stderr)
        v = run(cfg, "--resume", "auto", "--set", "train.metrics_file=")
        expect("that checkpoint resumes to the end", v.returncode == 0 and "resumed from" in v.stdout and
               os.path.isfile(step_dir(root4, TRAIN["steps"]) + "/COMPLETE"), v.stdout[-600:] + v.stderr)
        p = run(config(tmp, "metrics-full-nockpt.json", metrics_file="/dev/full"))
        expect("the same without train.checkpoint_dir: exit 1 naming the file, saying nothing was saved",
               p.returncode == 1 and "/dev/full" in p.stderr and "nothing was saved" in p.stderr, p.stderr)
    else:
        print("skip: metrics file on a full device (no /dev/full)")


def logged_lines(path):
    try:
        with open(path) as f:
            return sum(1 for line in f if line.endswith("\n"))
    except FileNotFoundError:
        return 0


def case_sigkill(tmp):
    ref_root, ref_final, ref_logged = reference(tmp)
    started = time.time()
    run(config(tmp, "timing.json", checkpoint_dir=os.path.join(tmp, "timing")))
    duration = time.time() - started
    rng = random.Random(1414)
    trials, equal, kills_in_write, kills_running = 24, 0, 0, 0
    for trial in range(trials):
        root = os.path.join(tmp, f"t{trial}")
        cfg = config(tmp, f"t{trial}.json", checkpoint_dir=root, metrics_file=root + ".jsonl")
        if trial % 2 == 0:
            # Inside a checkpoint write: the Nth write dies after its first file.
            p = run(cfg, env={"BERTPRE_TEST_DIE_DURING_CHECKPOINT": str(rng.randint(1, TRAIN["steps"]))})
            kills_in_write += p.returncode == -signal.SIGKILL
        else:
            # At a random point of the run: after a random number of logged steps (0 = during
            # start-up) and a random part of one step's time, whatever the machine's load.
            proc = subprocess.Popen([bertpre, "train", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            target, deadline = rng.randint(0, TRAIN["steps"] - 2), time.time() + 20 * duration + 30
            while proc.poll() is None and time.time() < deadline and logged_lines(root + ".jsonl") < target:
                time.sleep(0.002)
            time.sleep(rng.uniform(0.0, duration / TRAIN["steps"]))
            kills_running += proc.poll() is None
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        for _ in range(3):
            r = run(cfg, "--resume", "auto")
            if r.returncode == 0:
                break
        final = step_dir(root, TRAIN["steps"])
        rows, clash = logged(root + ".jsonl") if os.path.exists(root + ".jsonl") else ({}, [])
        ok = (r.returncode == 0 and os.path.isdir(final) and digests(final) == ref_final and not clash and
              rows == ref_logged)
        equal += ok
        if not ok:
            expect(f"trial {trial}: resumed run bitwise equal to the uninterrupted one", False,
                   f"exit {r.returncode} {r.stderr[-500:]} clash {clash}")
    print(f"sigkill: {trials} trials ({kills_in_write} killed inside a checkpoint write, {trials - trials // 2} at "
          f"a random time of which {kills_running} hit the running process), {equal} resumed bitwise equal, "
          f"{trials - equal} lost or different")
    expect(f"{trials} SIGKILL trials: every resume ends bitwise equal to the uninterrupted run (final "
           "weights, moments, state; every step's losses)", equal == trials)
    expect("the kills inside a checkpoint write happened", kills_in_write == trials // 2, kills_in_write)
    expect("at least half of the random-time kills hit the process while it ran", kills_running >= trials // 4, kills_running)


def case_damaged_checkpoint(tmp):
    ref_root, _, _ = reference(tmp)
    good = step_dir(ref_root, TRAIN["steps"])
    cfg = config(tmp, "damaged.json", checkpoint_dir=os.path.join(tmp, "d"))
    rng = random.Random(7)
    tried = refused = 0
    for name in CKPT_FILES + ("COMPLETE",):
        size = os.path.getsize(os.path.join(good, name))
        damages = [("truncated to half", lambda b: b[:size // 2]), ("truncated by two bytes", lambda b: b[:-2])]
        for _ in range(3):
            bit = rng.randrange(size * 8)
            damages.append((f"bit {bit} flipped",
                            lambda b, bit=bit: b[:bit // 8] + bytes([b[bit // 8] ^ (1 << (bit % 8))]) + b[bit // 8 + 1:]))
        for what, damage in damages:
            copy = os.path.join(tmp, "copy")
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(good, copy)
            with open(os.path.join(good, name), "rb") as f:
                data = f.read()
            with open(os.path.join(copy, name), "wb") as f:
                f.write(damage(data))
            p = run(cfg, "--resume", copy)
            tried += 1
            ok = p.returncode == 1 and os.path.join(copy, name) in p.stderr
            refused += ok
            if not ok:
                expect(f"{name} {what}: refused naming the file", False, f"exit {p.returncode}: {p.stderr[-500:]}")
    print(f"damaged_checkpoint: {tried} damaged copies, {refused} refused naming the file, "
          f"{tried - refused} accepted, 0 crashes")
    expect(f"{tried} truncated or bit-flipped checkpoint files: each refused with exit 1 naming the file",
           refused == tried == 20)


def text_corpus(tmp, lines, seed):
    """A corpus of `lines` sentences, a document per 6 (the cases that prep need HDF5 and
    SentencePiece: without them, SKIP)."""
    if not (have_hdf5 and checks.features(bertpre)["sentencepiece"]):
        print("SKIP: prep needs HDF5 and SentencePiece (libhdf5-dev, libsentencepiece-dev not found)")
        sys.exit(77)
    rng = random.Random(seed)
    words = ("the kernel driver reads a buffer from memory and writes it to disk when the device is ready; each "
             "page holds data for one task").split()
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w") as f:
        for i in range(lines):
            f.write(" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))).capitalize() + ".\n")
            if i % 6 == 5:
                f.write("\n")
    return corpus


def case_prep_diskfull(tmp):
    corpus = text_corpus(tmp, 3000, 11)
    prefix = os.path.join(tmp, "spm")
    p = subprocess.run([bertpre, "tokenizer", "train", "--model-prefix", prefix, "--vocab-size", "60", corpus],
                       capture_output=True, text=True, timeout=120)
    expect("a tokenizer trains on the corpus", p.returncode == 0, p.stderr)
    # tokenizer train on a full disk: room for nothing, for part of the model, for the model
    # and part of the vocabulary.
    model_size = os.path.getsize(prefix + ".model")
    full = os.path.join(tmp, "full")
    for space in (0, model_size // 2, model_size + 20):
        os.makedirs(full, exist_ok=True)
        p = subprocess.run([bertpre, "tokenizer", "train", "--model-prefix", os.path.join(full, "spm"),
                            "--vocab-size", "60", corpus], capture_output=True, text=True, timeout=120,
                           env={**os.environ, **fault_env(full, space=space)})
        left = sorted(os.listdir(full))
        expect(f"tokenizer train with room for {space} bytes: exit 1 naming the file and ENOSPC, nothing left in "
               "the directory", p.returncode == 1 and "ENOSPC" in p.stderr and os.path.join(full, "spm.") in
               p.stderr and left == [], f"exit {p.returncode}: {p.stderr[-800:]} left {left}")
    with open(prefix + ".model", "rb") as f:
        before = f.read()
    p = subprocess.run([bertpre, "tokenizer", "train", "--model-prefix", prefix, "--vocab-size", "60", corpus],
                       capture_output=True, text=True, timeout=120)
    with open(prefix + ".model", "rb") as f:
        kept = f.read() == before
    expect("tokenizer train onto an existing model: exit 1 naming it, the model unchanged", p.returncode == 1 and
           prefix + ".model" in p.stderr and "never replaced" in p.stderr and kept, p.stderr)
    out = os.path.join(tmp, "out")

    def listing(d):  # what prep left in d (a failed prep removes a folder it made, and its lock file)
        return sorted(os.listdir(d)) if os.path.isdir(d) else []

    prep = [bertpre, "prep", "--tokenizer", prefix + ".model", "--seq-length", "24", "--max-predictions", "4",
            "--no-progress", "--shards", "2", "--eval-fraction", "0.1", "--output", out, corpus]
    # Room for nothing, for part of the first chunk, and for several chunks of the three files.
    for space in (0, 5000, 40000):
        os.makedirs(out, exist_ok=True)
        p = subprocess.run(prep, capture_output=True, text=True, timeout=120, env={**os.environ, **fault_env(out, space=space)})
        lines = p.stderr.strip().splitlines()
        left = listing(out)  # a failed prep removes its lock file too
        expect(f"prep with room for {space} bytes: exit 1, one line naming a shard file of {out} and ENOSPC, no "
               "HDF5 dump, nothing left in the directory", p.returncode == 1 and len(lines) == 1 and out in lines[0]
               and ".hdf5" in lines[0] and "ENOSPC" in lines[0] and "HDF5-DIAG" not in p.stderr and
               "errno =" not in p.stderr and left == [], f"exit {p.returncode}: {p.stderr[-800:]} left {left}")
    p = subprocess.run(prep, capture_output=True, text=True, timeout=120)
    left = listing(out)
    expect("the same prep with room: exit 0, three shards", p.returncode == 0 and left ==
           ["eval-00000.hdf5", "train-00000.hdf5", "train-00001.hdf5"], p.stderr + str(left))
    # Room for all but the last byte of the three shards: the disk fills while the last shard
    # is closed, after the two train shards were closed under their temporary names (the
    # writes before the closes are the same bytes whatever the threads' order, so this fails
    # at the same place every run). Those closed, not yet renamed files go too.
    total = sum(os.path.getsize(os.path.join(out, name)) for name in left)
    shutil.rmtree(out)
    os.makedirs(out)
    p = subprocess.run(prep, capture_output=True, text=True, timeout=120,
                       env={**os.environ, **fault_env(out, space=total - 1)})
    left = listing(out)
    expect(f"prep with room for all but 1 of the {total} bytes of its shards: exit 1 naming the last shard and "
           "ENOSPC, and none of the shards closed before it left behind", p.returncode == 1 and "ENOSPC" in p.stderr
           and ".tmp-eval-00000.hdf5.partial" in p.stderr and left == [], f"exit {p.returncode}: {p.stderr[-800:]} "
           f"left {left}")
    # An input error while the shards are being written (a line that is not JSON, --bad-lines
    # stop): exit 1 naming the line, no unfinished shard left.
    bad = os.path.join(tmp, "bad.jsonl")
    with open(corpus) as f, open(bad, "w") as g:
        for block in f.read().split("\n\n"):
            g.write(json.dumps({"text": block}) + "\n")
        g.write("{not json\n")
    shutil.rmtree(out)
    p = subprocess.run([a if a != corpus else bad for a in prep] + ["--format", "jsonl"], capture_output=True,
                       text=True, timeout=120)
    left = listing(out)
    expect("prep stopped by a bad JSONL line at the end of its input: exit 1 naming the line, no unfinished shard "
           "left", p.returncode == 1 and "bad.jsonl:" in p.stderr and "not JSON" in p.stderr and left == [],
           f"exit {p.returncode}: {p.stderr[-800:]} left {left}")


def check_trace(trace_path, root, exempt):
    """The protocol of the durable case, from the injector's trace, for every file under root."""
    with open(trace_path) as f:
        events = [line.rstrip("\n").split(" ") for line in f]
    unsynced = [(events[i - 1], e[1]) for i, e in enumerate(events) if e[0] == "unsynced"]
    expect("nothing is renamed or linked into place with a write not yet fsynced", not unsynced,
           "\n".join(f"{' '.join(before)}: {path}" for before, path in unsynced[:10]))
    no_dir_sync = []
    for i, e in enumerate(events):
        if e[0] in ("rename", "link") and not os.path.basename(e[2]).startswith("."):
            parent = os.path.dirname(e[2])
            if not any(x[0] == "fsync" and x[1] == parent for x in events[i + 1:]):
                no_dir_sync.append(" ".join(e))
    expect("every rename or link into a final name is followed by an fsync of its directory", not no_dir_sync,
           "\n".join(no_dir_sync[:10]))
    placed, written_in_place, seen = 0, [], 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            if name in exempt:
                continue
            seen += 1
            created = max((i for i, e in enumerate(events) if e[0] == "create" and e[1] == path), default=-1)
            put = max((i for i, e in enumerate(events) if e[0] in ("rename", "link") and
                       (path == e[2] or path.startswith(e[2] + "/"))), default=-1)
            if put > created:
                placed += 1
            else:
                written_in_place.append(path)
    expect(f"each of the {seen} files left under {root} came into place by a rename or link after it was written",
           seen > 0 and not written_in_place, "\n".join(written_in_place[:20]))
    return seen


def case_durable(tmp):
    corpus = text_corpus(tmp, 1500, 5)
    out, trace = os.path.join(tmp, "out"), os.path.join(tmp, "trace.txt")
    os.makedirs(out)
    env = {**os.environ, **fault_env(out, trace=trace)}

    def step(what, args):
        p = subprocess.run([bertpre, *args], capture_output=True, text=True, timeout=240, env=env)
        expect(f"{what} exits 0 under the tracer", p.returncode == 0, p.stdout[-800:] + p.stderr[-1500:])
        if p.returncode != 0:
            sys.exit(1)

    spm = os.path.join(out, "tok", "spm")
    step("tokenizer train", ["tokenizer", "train", "--model-prefix", spm, "--vocab-size", "60", corpus])
    shards = os.path.join(out, "shards")
    step("prep", ["prep", "--tokenizer", spm + ".model", "--seq-length", "24", "--max-predictions", "4",
                  "--no-progress", "--shards", "2", "--eval-fraction", "0.1", "--output", shards, corpus])
    ck = os.path.join(out, "ck")
    cfg = config(tmp, "durable.json", data=os.path.join(shards, "train-*.hdf5"),
                 eval_data=os.path.join(shards, "eval-*.hdf5"), tokenizer=spm + ".model", steps=3,
                 checkpoint_dir=ck, metrics_file=os.path.join(out, "metrics.jsonl"))
    with open(cfg) as f:
        c = json.load(f)
    c["model"]["vocab_size"] = 64
    with open(cfg, "w") as f:
        json.dump(c, f)
    step("train with checkpoints and --eval-json", ["train", cfg, "--eval-json", os.path.join(out, "train-eval.json")])
    step("eval --json", ["eval", step_dir(ck, 3), "--data", os.path.join(shards, "eval-*.hdf5"), "--json",
                         os.path.join(out, "eval.json")])
    step("export", ["export", step_dir(ck, 3), "--tokenizer", spm + ".model", "--out", os.path.join(out, "hf")])
    step("import", ["import", os.path.join(out, "hf"), "--out", os.path.join(out, "imported")])
    names = {name for _, _, files in os.walk(out) for name in files}
    expect("every kind of output was written: shards, checkpoints, the tokenizer, the export, the imported weights "
           "and both result files", {"train-00000.hdf5", "eval-00000.hdf5", "COMPLETE", "optimizer.safetensors",
                                    "spm.model", "spm.vocab", "config.json", "model.safetensors", "eval.json",
                                    "train-eval.json"} <= names, sorted(names))
    check_trace(trace, out, exempt={".bertpre-lock", ".bertpre-prep-lock", "metrics.jsonl"})
    # The metrics log is not renamed: it is fsynced before each checkpoint goes into place.
    with open(trace) as f:
        events = [line.split() for line in f]
    metrics, late = os.path.join(out, "metrics.jsonl"), []
    for i, e in enumerate(events):
        if e[0] == "rename" and re.fullmatch(r"step-\d+", os.path.basename(e[2])):
            last_sync = max((j for j, x in enumerate(events[:i]) if x[:2] == ["fsync", metrics]), default=-1)
            last_checkpoint = max((j for j, x in enumerate(events[:i]) if x[0] == "rename" and
                                   re.fullmatch(r"step-\d+", os.path.basename(x[2]))), default=-1)
            if last_sync < max(last_checkpoint, 0):
                late.append(e[2])
    expect("the metrics file is fsynced before each of the 3 checkpoints is renamed into place",
           not late and sum(e[0] == "rename" and re.fullmatch(r"step-\d+", os.path.basename(e[2])) is not None
                            for e in events) == 3, late)


def case_damaged_shard(tmp):
    if not have_hdf5:
        print("SKIP: bertpre was built without HDF5 (libhdf5-dev not found)")
        sys.exit(77)
    import h5py
    import numpy as np
    rng = np.random.default_rng(3)
    S, P, V, N = TRAIN["seq_length"], TRAIN["max_predictions_per_seq"], MODEL["vocab_size"], 1024
    paths = []
    for s in range(2):
        ids = rng.integers(5, V, size=(N, S)).astype(np.int32)
        ids[:, 0], ids[:, -1] = 2, 3
        pos = np.sort(np.stack([rng.choice(np.arange(1, S - 1), P, replace=False) for _ in range(N)]), axis=1)
        data = {"input_ids": ids, "input_mask": np.ones((N, S), np.int8),
                "segment_ids": (np.arange(S) >= S // 2).astype(np.int8)[None].repeat(N, 0),
                "masked_lm_positions": pos.astype(np.int32),
                "masked_lm_ids": np.take_along_axis(ids, pos, axis=1).astype(np.int32),
                "next_sentence_labels": rng.integers(0, 2, N).astype(np.int8)}
        path = os.path.join(tmp, f"shard-{s}.hdf5")
        with h5py.File(path, "w") as f:
            for k, v in data.items():
                f.create_dataset(k, data=v, compression="gzip", chunks=(256,) + v.shape[1:])
        paths.append(path)
    chunks = []  # (path, byte offset, size) of every input_ids chunk
    for path in paths:
        with h5py.File(path, "r") as f:
            d = f["input_ids"]
            chunks += [(path, d.id.get_chunk_info(i).byte_offset, d.id.get_chunk_info(i).size)
                       for i in range(d.id.get_num_chunks())]
    cfg = config(tmp, "shards.json", data=",".join(paths), steps=100000, checkpoint_every=0, log_every=1)
    proc = subprocess.Popen([bertpre, "train", cfg], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while True:  # the first step is done: the loader is reading
        line = proc.stdout.readline()
        if not line or line.startswith("step"):
            break
    for path, offset, size in chunks:
        with open(path, "r+b") as f:
            f.seek(offset)
            f.write(bytes(rng.integers(0, 256, size, dtype=np.uint8)))
    out, err = proc.communicate(timeout=120)
    expect("a shard damaged mid-run: exit 1 with an error naming the file, dataset 'input_ids' and the row",
           proc.returncode == 1 and "shard-" in err and "'input_ids'" in err and "row" in err,
           f"exit {proc.returncode}: {err[-1500:]}")
    expect("no HDF5 diagnostics on stderr, only bertpre's message (one line)",
           "HDF5-DIAG" not in err and len(err.strip().splitlines()) == 1, err[-1500:])


with tempfile.TemporaryDirectory() as tmp:
    {"diskfull": case_diskfull, "sigkill": case_sigkill, "damaged_checkpoint": case_damaged_checkpoint,
     "damaged_shard": case_damaged_shard, "prep_diskfull": case_prep_diskfull, "durable": case_durable}[case](tmp)
sys.exit(checks.exit_status())

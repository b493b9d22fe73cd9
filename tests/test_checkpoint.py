"""Checkpoints of `bertpre train`: bit-exact resume, crash safety, preemption, and the errors
for a checkpoint that does not fit the config.

Cases (one per meson test):
  resume     2k steps in one run against k steps (train.steps_this_run), then --resume auto
             (also with batch-size warmup, resumed inside its ramp)
             for the other k: every step's losses, accuracy, lr and loss scale, and the final
             weights, LAMB moments and loop state, all bitwise equal (dropout on, 2
             accumulated micro-batches); a periodic checkpoint resumed by directory gives the
             same; keep_checkpoints keeps the newest K.
  resume_shards  the same on HDF5 shards through the loader (2 shards of 44 samples, an epoch
             every 11 steps, so the 24 steps cross epoch ends; dynamic masking on): the
             loader's cursor in the checkpoint continues with the very next batch.
  mpi        the resume case with 2 MPI ranks on shards: both ranks' loader cursors are stored
             (rank 0 and 1) and restored; resuming with 1 rank is an error naming the ranks.
  sigkill    the process SIGKILLs itself in the middle of a checkpoint write
             (BERTPRE_TEST_DIE_DURING_CHECKPOINT, test-only): the previous checkpoint is
             complete, --resume auto takes it and ends with the uninterrupted run's weights.
  sigterm    SIGTERM, SIGUSR1, SIGHUP and a first SIGINT (Ctrl-C, said on stderr) during
             training: exit 0 with a complete checkpoint of the last step logged, which resumes.
             Stopped between log lines (log_every 1000), the steps since the last line get
             their metrics line, at the checkpoint's step. A first SIGINT during a train.eval_every
             evaluation (HDF5) ends it between micro-batches: exit 0 within half the evaluation's
             time, no eval line, the step's checkpoint. A second
             SIGINT during a step (of a larger model, about a second long) ends the process at once:
             killed by SIGINT within 3 s, no checkpoint of that step.
  lock       two `train --resume auto` on one train.checkpoint_dir: the second is refused with
             exit 1 before any step, naming the first run's host, pid and start time; the first
             runs on undisturbed (checkpointing every step) and stops on SIGTERM with a complete
             checkpoint; the same refusal under `mpirun -np 2` (rank 0 holds the lock); after
             the first run, and after a run killed by SIGKILL, the directory is free. --dry-run
             is refused with the same message while the lock is held; on a free directory it
             leaves the lock file's line as it was and creates nothing in an absent or empty one.
  lock_removed  `rm -rf` of the checkpoint directory of a running job: a second run that took
             the directory since makes the first stop at its checkpoint (exit 1 naming the
             second, nothing written there) while the second goes on; with no other run the
             job makes the directory again, locks it, warns and writes its checkpoint there.
  errors     a checkpoint of another model, another seed or schedule, an incomplete one, a
             weights-only one given to --resume, an edited state.json (against the manifest's
             SHA-256, and against the config hash): clear errors naming the field and values.
             An empty directory, a root of incomplete step directories and a directory without
             checkpoint files given to --resume or --init-from are said to be what they are; a
             checkpoint root given to --resume resumes its newest checkpoint. --dry-run refuses
             what the run refuses (another train.steps or seed on --resume auto, a new run into
             a directory of checkpoints) and removes nothing.
  resume_gpu the resume case on the CUDA backend in FP16 with dynamic loss scaling (suite
             'gpu'; skipped where no GPU is visible).
  resume_emu the same on the emulated CUDA backend (train.backend = cuda-emu).
  resume_optimizers  the resume case with LARS (linear schedule) and with AdamW (cosine
             schedule, label smoothing 0.1): their state (LARS's momentum buffer, AdamW's
             moments) in optimizer.safetensors and state.json, bitwise. With HDF5: at learning
             rate 0, label smoothing 0.3 changes the logged training MLM loss and not the
             evaluation's (eval_data reports the plain cross-entropy).
  init_from  --init-from starts a new run (another seq_length, a fresh optimizer) from a
             checkpoint's weights: with learning rate 0 the weights come out unchanged; a
             checkpoint root stands for its newest checkpoint. Weights holding a NaN are
             refused, with and without --dry-run, by the same message naming the tensor.
             Across train.objective: mlm+nsp weights into an MLM-only run (the pooler and NSP
             head left out, said) and back (they start as a fresh run's, said); --resume with
             another objective is refused naming it.
  init_tile  --init-from SMALL --init-tile: a ModernBERT of 3 layers, hidden 64, GeGLU 96 tiled
             into one of 6 layers, hidden 100, GeGLU 161 (layers 0 0 1 2 2 2: rounding half to
             even; odd and even growth), and a BERTForMaskedLM (2 layers) into a deeper, wider
             BertForPreTraining: at learning rate 0 every tensor equals ModernBERT's rule
             (tile_weights_from_middle, written here as its loops: the original in the middle,
             copies outward) applied to the smaller checkpoint by numpy; the tensors without a
             counterpart (the ModernBERT's final norm, layer 1's attn_norm from layer 0, which has
             none; BERT's pooler and NSP head) bitwise a fresh run's. Refused, with --dry-run too, naming the field and both values: a narrower
             model, another vocabulary, another architecture; --init-tile without --init-from.
The reference of "bitwise equal" is the uninterrupted run of the same binary: resume must not
change a single bit of what training computes.

usage: test_checkpoint.py BERTPRE CASE
"""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import checks
from checks import expect

with checks.needs("numpy and safetensors"):
    import numpy as np
    from safetensors.numpy import load_file, save_file

bertpre, case = sys.argv[1], sys.argv[2]
HAVE = checks.features(bertpre)
MODEL = {"vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 32, "max_position_embeddings": 32}  # dropout 0.1, BertConfig's default
TRAIN = {"micro_batch_size": 4, "global_batch_size": 8, "seq_length": 24, "max_predictions_per_seq": 4,
         "steps": 12, "log_every": 1, "learning_rate": 0.01, "warmup_proportion": 0.25, "checkpoint_every": 0}
LOCK = ".bertpre-lock"  # the lock file of train.checkpoint_dir, not a checkpoint
COMPARED = ("step", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "lr", "loss_scale", "skipped_steps")



def write_config(tmp, name, model=None, **train):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        json.dump({"model": model or MODEL, "train": {**TRAIN, **train}}, f)
    return path


LAUNCH = []  # mpirun and its options, for the mpi case


def train(config, *args, env=None, check=True, launch=None):
    p = subprocess.run((LAUNCH if launch is None else launch) + [bertpre, "train", config, *args],
                       capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=300)
    if check and p.returncode != 0:
        expect(f"bertpre train {' '.join(args)} exits 0", False, p.stdout[-2000:] + p.stderr)
        sys.exit(1)
    return p


def metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def same_metrics(what, a, b):
    rows_a = [{k: m[k] for k in COMPARED} for m in a]
    rows_b = [{k: m[k] for k in COMPARED} for m in b]
    diff = next((f"{x}\n{y}" for x, y in zip(rows_a, rows_b) if x != y), "")
    expect(f"{what}: {len(rows_a)} steps logged, losses, accuracy, lr, loss scale bitwise equal",
           len(rows_a) == len(rows_b) and not diff and len(rows_a) > 0, diff or f"{len(rows_a)} vs {len(rows_b)}")


def same_checkpoint(what, dir_a, dir_b, files=("model.safetensors", "optimizer.safetensors")):
    for name in files:
        a, b = load_file(os.path.join(dir_a, name)), load_file(os.path.join(dir_b, name))
        bad = [k for k in a if k not in b or a[k].shape != b[k].shape or a[k].tobytes() != b[k].tobytes()]
        expect(f"{what}: {name}: all {len(a)} tensors bitwise equal", set(a) == set(b) and not bad,
               f"differ: {bad[:5]}")
    states = []
    for d in (dir_a, dir_b):
        with open(os.path.join(d, "state.json")) as f:
            s = json.load(f)
        states.append({k: s[k] for k in ("step", "iteration", "skipped_steps", "schedule", "optimizer",
                                         "loss_scaler", "rng", "data")})
    expect(f"{what}: state.json step, iteration, schedule, optimizer, loss scaler, rng, cursors equal",
           states[0] == states[1], f"{states[0]}\n{states[1]}")


def rehash(ckpt, name):
    """Records the SHA-256 of the edited file `name` in the checkpoint's manifest (COMPLETE)."""
    with open(os.path.join(ckpt, "COMPLETE")) as f:
        manifest = json.load(f)
    with open(os.path.join(ckpt, name), "rb") as f:
        manifest["sha256"][name] = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(ckpt, "COMPLETE"), "w") as f:
        json.dump(manifest, f)


def complete(d):
    return os.path.isfile(os.path.join(d, "COMPLETE"))


def step_dir(root, step):
    return os.path.join(root, f"step-{step:09d}")


def case_resume(tmp):
    k = TRAIN["steps"] // 2
    cfg = write_config(tmp, "run.json")
    a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
    train(cfg, "--set", f"train.checkpoint_dir={a}", "--set", f"train.metrics_file={a}.jsonl")
    first = train(cfg, "--set", f"train.checkpoint_dir={b}", "--set", f"train.metrics_file={b}.jsonl",
                  "--set", f"train.steps_this_run={k}")
    expect(f"steps_this_run={k}: stops after step {k} with a checkpoint",
           complete(step_dir(b, k)) and not os.path.exists(step_dir(b, 2 * k)) and "--resume auto" in first.stdout,
           first.stdout[-800:])
    second = train(cfg, "--set", f"train.checkpoint_dir={b}", "--set", f"train.metrics_file={b}.jsonl",
                   "--resume", "auto")
    expect(f"--resume auto takes step {k}", f"resumed from {step_dir(b, k)} at step {k}" in second.stdout,
           second.stdout[:1500])
    same_metrics(f"{2 * k} steps vs {k} + resume + {k}", metrics(f"{a}.jsonl"), metrics(f"{b}.jsonl"))
    same_checkpoint(f"{2 * k} steps vs {k} + resume + {k}", step_dir(a, 2 * k), step_dir(b, 2 * k))

    # Batch-size warmup (train.batch_warmup_*): one micro-batch of 4 per rank while a rank's
    # tokens so far (rows x 24) stay below 800 (W = 800 x ranks), i.e. steps 1-9, then two;
    # resumed at step 6, inside the ramp, the run repeats the uninterrupted one bit for bit (the
    # sizes follow from the step alone). On one rank the plain run's batch, on two (mpi) twice it.
    ranks = 2 if LAUNCH else 1
    ramp = ["--set", f"train.batch_warmup_min_size={4 * ranks}", "--set", f"train.batch_warmup_tokens={800 * ranks}",
            "--set", f"train.global_batch_size={8 * ranks}"]
    w, x = os.path.join(tmp, "w"), os.path.join(tmp, "x")
    whole = train(cfg, *ramp, "--set", f"train.checkpoint_dir={w}", "--set", f"train.metrics_file={w}.jsonl")
    expect(f"batch-size warmup: the plan says {4 * ranks} sequences at first, {8 * ranks} from step 10 on",
           f"batch-size warmup: {4 * ranks} sequences at first, one micro-batch per rank more at a time, {8 * ranks} "
           "from step 10 on" in whole.stdout, whole.stdout[:1500])
    train(cfg, *ramp, "--set", f"train.checkpoint_dir={x}", "--set", f"train.metrics_file={x}.jsonl",
          "--set", f"train.steps_this_run={k}")
    train(cfg, *ramp, "--set", f"train.checkpoint_dir={x}", "--set", f"train.metrics_file={x}.jsonl",
          "--resume", "auto")
    same_metrics(f"batch-size warmup: {2 * k} steps vs {k} + resume + {k}", metrics(f"{w}.jsonl"),
                 metrics(f"{x}.jsonl"))
    same_checkpoint(f"batch-size warmup: {2 * k} steps vs {k} + resume + {k}", step_dir(w, 2 * k),
                    step_dir(x, 2 * k))
    # Against the plain run (8 sequences a step): on one rank the ramp's 4 make other losses from
    # step 1; on two its steps 1-9 are the plain run's 8 sequences, numbered alike, so their
    # losses are equal bit for bit, and the 16 of step 10 on differ.
    diff = [m["mlm_loss"] != n["mlm_loss"] for m, n in zip(metrics(f"{a}.jsonl"), metrics(f"{w}.jsonl"))]
    want = [True] * len(diff) if ranks == 1 else [False] * 9 + [True] * (len(diff) - 9)
    expect(f"the warmup run against the plain run, step by step: losses differ at {want}", diff == want, diff)

    # train.unpad is recorded; resuming with another value works and warns that the run is no
    # longer bitwise the uninterrupted one. The function is the same (the synthetic batches
    # have short sequences, so auto ran unpadded): the losses agree to FP32 rounding, 1e-4.
    with open(os.path.join(step_dir(b, k), "state.json")) as f:
        recorded = json.load(f)["config"]["train"].get("unpad")
    expect("the checkpoint records train.unpad (auto, the default)", recorded == "auto", recorded)
    e = os.path.join(tmp, "e")
    other = train(cfg, "--set", f"train.checkpoint_dir={e}", "--set", f"train.metrics_file={e}.jsonl",
                  "--set", "train.unpad=off", "--resume", step_dir(b, k))
    expect("resuming with train.unpad = off warns: no longer bitwise the same",
           "no longer bitwise the same" in other.stderr, other.stderr[-800:])
    full, padded = metrics(f"{a}.jsonl")[k:], metrics(f"{e}.jsonl")
    worst = max(abs(x[n] - y[n]) / abs(x[n]) for x, y in zip(full, padded) for n in ("mlm_loss", "nsp_loss"))
    expect(f"resumed padded, the last {k} steps' losses within 1e-4 of the unpadded run's ({worst:.1e})",
           len(full) == len(padded) == k and worst <= 1e-4, f"{len(full)} / {len(padded)} rows")

    # A new run on the metrics file of an earlier run keeps that run's lines as FILE.1 (the
    # resumed run above appended to its file instead: its comparison needs all 12 lines).
    with open(f"{a}.jsonl") as f:
        earlier = f.read()
    again = train(cfg, "--set", f"train.checkpoint_dir={a}-again", "--set", f"train.metrics_file={a}.jsonl")
    kept = f"{a}.jsonl.1"
    expect("a new run keeps an earlier run's metrics file as FILE.1, saying so",
           os.path.isfile(kept) and open(kept).read() == earlier and f"kept as {kept}" in again.stdout,
           again.stdout[:1500])
    same_metrics("the new run's own metrics file against the earlier run's", metrics(kept), metrics(f"{a}.jsonl"))

    # Periodic checkpoints, the oldest pruned; one of them resumed by its directory.
    c = os.path.join(tmp, "c")
    train(cfg, "--set", f"train.checkpoint_dir={c}", "--set", "train.checkpoint_every=3",
          "--set", "train.keep_checkpoints=2")
    kept = sorted(set(os.listdir(c)) - {LOCK})
    last = TRAIN["steps"]
    expect("checkpoint_every=3, keep_checkpoints=2: the newest two are kept",
           kept == [f"step-{last - 3:09d}", f"step-{last:09d}"], kept)
    d = os.path.join(tmp, "d")
    train(cfg, "--set", f"train.checkpoint_dir={d}", "--set", f"train.metrics_file={d}.jsonl",
          "--resume", step_dir(c, last - 3))
    same_metrics(f"resume of step {last - 3} by directory, the last 3 steps", metrics(f"{a}.jsonl")[last - 3:],
                 metrics(f"{d}.jsonl"))
    same_checkpoint(f"resume of step {last - 3} by directory", step_dir(a, last), step_dir(d, last))


def write_shards(tmp, n_shards, rows, S=TRAIN["seq_length"], P=TRAIN["max_predictions_per_seq"]):
    with checks.needs("h5py", hint="tools/setup.sh installs python3-h5py"):
        import h5py
    rng = np.random.default_rng(5)
    V = MODEL["vocab_size"]
    for s in range(n_shards):
        ids = rng.integers(5, V, size=(rows, S))
        lengths = rng.integers(max(12, P + 3), S + 1, size=rows)
        mask = (np.arange(S)[None, :] < lengths[:, None]).astype(np.int8)
        ids = ids * mask
        ids[:, 0] = 2
        ids[np.arange(rows), lengths - 1] = 3
        segments = ((np.arange(S)[None, :] >= (lengths // 2)[:, None]) & (mask == 1)).astype(np.int8)
        positions = np.zeros((rows, P), dtype=np.int32)
        for r in range(rows):
            positions[r] = np.sort(rng.choice(np.arange(1, lengths[r] - 1), size=P, replace=False))
        data = {"input_ids": ids.astype(np.int32), "input_mask": mask, "segment_ids": segments,
                "masked_lm_positions": positions,
                "masked_lm_ids": np.take_along_axis(ids, positions, axis=1).astype(np.int32),
                "next_sentence_labels": rng.integers(0, 2, size=rows).astype(np.int8)}
        with h5py.File(os.path.join(tmp, f"shard-{s}.hdf5"), "w") as f:
            for k, v in data.items():
                f.create_dataset(k, data=v)
    return os.path.join(tmp, "shard-*.hdf5")


def case_resume_shards(tmp):
    if not HAVE["hdf5"]:
        print("SKIP: bertpre was built without HDF5 (libhdf5-dev not found)")
        sys.exit(77)
    TRAIN.update(steps=24, data=write_shards(tmp, 2, 44), dynamic_masking=1)
    case_resume(tmp)
    p = train(write_config(tmp, "synthetic.json", data=""), "--resume", step_dir(os.path.join(tmp, "a"), 24),
              check=False)
    expect("a checkpoint of shard data resumed without train.data: error naming train.data",
           p.returncode == 1 and "train.data" in p.stderr, p.stderr)


def case_mpi(tmp):
    import shutil
    mpirun = shutil.which("mpirun")
    if not HAVE["mpi"] or not mpirun or not HAVE["hdf5"]:
        print("SKIP: needs a build with MPI and HDF5 and mpirun on PATH (tools/setup.sh installs them)")
        sys.exit(77)
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    if os.geteuid() == 0:  # Open MPI refuses root unless told twice
        os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    LAUNCH[:] = [mpirun, "-np", "2", "--oversubscribe"]
    TRAIN.update(steps=12, data=write_shards(tmp, 1, 60))
    case_resume(tmp)
    with open(os.path.join(step_dir(os.path.join(tmp, "b"), 6), "state.json")) as f:
        cursors = json.load(f)["data"]["cursors"]
    expect("2 ranks' loader cursors stored, rank 0 then rank 1, each 6 integers",
           [len(c) for c in cursors] == [6, 6] and [c[3] for c in cursors] == [0, 1], cursors)
    p = train(write_config(tmp, "run.json"), "--resume", step_dir(os.path.join(tmp, "b"), 6), launch=[],
              check=False)
    expect("resuming 2 ranks' checkpoint on 1 rank: error naming both counts",
           p.returncode == 1 and "2 rank(s)" in p.stderr and "has 1" in p.stderr, p.stderr)


def case_sigkill(tmp):
    cfg = write_config(tmp, "run.json")
    a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
    train(cfg, "--set", f"train.checkpoint_dir={a}")
    p = train(cfg, "--set", f"train.checkpoint_dir={b}", "--set", "train.checkpoint_every=3",
              env={"BERTPRE_TEST_DIE_DURING_CHECKPOINT": "2"}, check=False)
    expect("the process died by SIGKILL during its second checkpoint write", p.returncode == -signal.SIGKILL,
           f"exit {p.returncode}\n{p.stdout[-600:]}{p.stderr}")
    names = sorted(os.listdir(b))
    expect("the previous checkpoint (step 3) is complete, step 6 was never renamed into place",
           complete(step_dir(b, 3)) and not os.path.exists(step_dir(b, 6)) and
           any(n.startswith(".tmp-step-000000006") for n in names), names)
    r = train(cfg, "--set", f"train.checkpoint_dir={b}", "--resume", "auto")
    expect("--resume auto takes step 3", f"resumed from {step_dir(b, 3)} at step 3" in r.stdout, r.stdout[:1500])
    expect("the interrupted write's temporary directory is cleaned up",
           not any(n.startswith(".tmp-") for n in os.listdir(b)), os.listdir(b))
    same_checkpoint("crash at step 6, resume from step 3", step_dir(a, 12), step_dir(b, 12))


def wait_for_lines(path, n, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline and (not os.path.exists(path) or len(open(path).readlines()) < n):
        time.sleep(0.01)


def case_sigterm(tmp):
    def hangup_default():  # a test run under nohup would pass SIGHUP on ignored
        signal.signal(signal.SIGHUP, signal.SIG_DFL)

    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP):
        name = signal.Signals(sig).name
        root, log = os.path.join(tmp, name), os.path.join(tmp, name + ".jsonl")
        cfg = write_config(tmp, "long.json", steps=100000, checkpoint_dir=root, metrics_file=log)
        p = subprocess.Popen([bertpre, "train", cfg], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=hangup_default)
        wait_for_lines(log, 3)
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
        expect(f"{name}: exit status 0", p.returncode == 0, f"exit {p.returncode}\n{out[-600:]}{err}")
        last = metrics(log)[-1]["step"]
        names = sorted(set(os.listdir(root)) - {LOCK})
        expect(f"{name}: a complete checkpoint of the last step logged ({last}), the only one",
               complete(step_dir(root, last)) and names == [f"step-{last:09d}"], names)
        expect(f"{name}: the log says how to continue", f"stopped by signal {int(sig)}" in out, out[-400:])
        if sig == signal.SIGINT:
            expect("SIGINT: says on stderr that it stops with a checkpoint and that a second one stops at once",
                   "SIGINT: stopping after this step with a checkpoint" in err and "second Ctrl-C" in err, err)
        r = train(cfg, "--resume", "auto", "--set", "train.steps_this_run=2")
        expect(f"{name}: the checkpoint resumes and runs on",
               f"resumed from {step_dir(root, last)} at step {last}" in r.stdout and
               complete(step_dir(root, last + 2)), r.stdout[:1500])

    # A stop between log lines (log_every 1000): the steps since the last line (none here) get
    # their metrics line, at the step of the checkpoint, before it is written.
    root, log = os.path.join(tmp, "between"), os.path.join(tmp, "between.jsonl")
    cfg = write_config(tmp, "between.json", steps=100000, log_every=1000, checkpoint_every=5, keep_checkpoints=1,
                       checkpoint_dir=root, metrics_file=log)
    p = subprocess.Popen([bertpre, "train", cfg], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (os.path.isdir(root) and any(n.startswith("step-") for n in os.listdir(root))):
        time.sleep(0.01)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    lines = metrics(log) if os.path.exists(log) else []
    names = sorted(n for n in os.listdir(root) if n.startswith("step-"))
    expect("SIGTERM between log lines (log_every 1000): exit 0, one metrics line, at the step of the stop's "
           "checkpoint, with finite losses", p.returncode == 0 and len(lines) == 1 and
           names == [f"step-{lines[0]['step']:09d}"] and complete(os.path.join(root, names[0])) and
           all(abs(lines[0][k]) < 1e30 for k in ("mlm_loss", "nsp_loss")) and
           sum(line.startswith("step ") for line in out.splitlines()) == 1, f"{lines} {names}\n{out[-600:]}{err}")

    # A second SIGINT: steps of a larger model take seconds, so it lands inside one.
    root, log = os.path.join(tmp, "twice"), os.path.join(tmp, "twice.jsonl")
    big = {**MODEL, "hidden_size": 128, "num_attention_heads": 4, "intermediate_size": 512,
           "max_position_embeddings": 128}
    if HAVE["hdf5"]:
        # A first SIGINT during a train.eval_every evaluation (800 rows of 128 tokens at the
        # larger model: several seconds) ends it between micro-batches, and the run at once.
        for name, rows in (("train", 64), ("held", 800)):
            os.makedirs(os.path.join(tmp, name))
            write_shards(os.path.join(tmp, name), 1, rows, S=128, P=20)
        eroot, elog = os.path.join(tmp, "evalstop"), os.path.join(tmp, "evalstop.jsonl")
        cfg = write_config(tmp, "evalstop.json", model=big, steps=1000, seq_length=128, max_predictions_per_seq=20,
                           micro_batch_size=16, global_batch_size=16, checkpoint_dir=eroot, metrics_file=elog,
                           eval_every=1, data=os.path.join(tmp, "train", "shard-0.hdf5"),
                           eval_data=os.path.join(tmp, "held", "shard-0.hdf5"))
        p = subprocess.Popen([bertpre, "train", cfg], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = ""
        for line in p.stdout:
            seen += line
            if line.startswith("eval: 1 shard"):
                break
        p.send_signal(signal.SIGINT)  # at once: the pass has 50 micro-batches to go
        start = time.time()
        out, err = p.communicate(timeout=120)
        took = time.time() - start
        lines = metrics(elog)
        # "interrupted" is printed only when the pass stops before its last micro-batch
        # (engine/train_data.c), so it says the evaluation was cut short, whatever the time.
        expect(f"a first SIGINT during an eval_every evaluation: exit 0 ({took:.2f} s after the signal), the "
               "evaluation said interrupted (stopped before its last micro-batch), no eval line, the step-1 "
               "checkpoint", p.returncode == 0 and "interrupted by a stop signal" in out and
               not any(m.get("eval") for m in lines) and complete(step_dir(eroot, 1)),
               f"exit {p.returncode}\n{seen[-300:]}{out[-600:]}{err[-600:]}")
    else:
        print("skip: SIGINT during an evaluation (needs HDF5)")
    cfg = write_config(tmp, "twice.json", model=big, steps=1000, seq_length=128, micro_batch_size=16,
                       global_batch_size=16, checkpoint_dir=root, metrics_file=log)
    p = subprocess.Popen([bertpre, "train", cfg], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_lines(log, 1, 120)
    p.send_signal(signal.SIGINT)
    first = p.stderr.readline()
    p.send_signal(signal.SIGINT)
    start = time.time()
    out, err = p.communicate(timeout=60)
    took = time.time() - start
    logged = metrics(log)[-1]["step"]
    # The first SIGINT's handler is reset (SA_RESETHAND), so the second one's default action ends
    # the process: killed by SIGINT is "at once"; a run that waited for the step's end would
    # exit 0 with a checkpoint.
    expect(f"a second SIGINT during a step: killed by SIGINT ({took:.2f} s after it), no checkpoint",
           "SIGINT: stopping" in first and p.returncode == -signal.SIGINT and
           not any(n.startswith("step-") for n in os.listdir(root)), f"exit {p.returncode}, step {logged}\n{first}{err}")


def case_lock(tmp):
    import socket
    root, log = os.path.join(tmp, "shared"), os.path.join(tmp, "first.jsonl")
    cfg = write_config(tmp, "long.json", steps=100000, checkpoint_dir=root, checkpoint_every=1, keep_checkpoints=2)
    first = subprocess.Popen([bertpre, "train", cfg, "--resume", "auto", "--set", f"train.metrics_file={log}"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_lines(log, 3)
    second = train(cfg, "--resume", "auto", check=False)
    holder = f"host {socket.gethostname()}, pid {first.pid}, started "
    expect("a second `train --resume auto` on the directory: exit 1 before any step, naming the first run's host, "
           "pid and start time", second.returncode == 1 and "in use by another run" in second.stderr and
           holder in second.stderr and root in second.stderr and
           not any(line.startswith("step ") for line in second.stdout.splitlines()), second.stderr)
    dry = train(cfg, "--resume", "auto", "--dry-run", check=False)
    expect("--dry-run while the first run holds the directory: refused as the run is (exit 1, the same message "
           "naming the holder)", dry.returncode == 1 and dry.stderr == second.stderr, dry.stderr + second.stderr)
    mpirun = shutil.which("mpirun")
    if HAVE["mpi"] and mpirun:
        if os.geteuid() == 0:  # Open MPI refuses root unless told twice
            os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        ranks = train(cfg, "--resume", "auto", check=False, launch=[mpirun, "-np", "2", "--oversubscribe"])
        expect("the same under `mpirun -np 2` (rank 0 takes the lock): refused naming the first run",
               ranks.returncode != 0 and holder in ranks.stderr, ranks.stderr[-1500:])
    else:
        print("skip: the 2-rank refusal (needs a build with MPI and mpirun on PATH)")
    wait_for_lines(log, len(metrics(log)) + 3)
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=60)
    last = metrics(log)[-1]["step"]
    expect(f"the first run went on undisturbed: exit 0 on SIGTERM at step {last}, its checkpoint complete",
           first.returncode == 0 and complete(step_dir(root, last)), f"exit {first.returncode}\n{err}")
    with open(os.path.join(root, LOCK)) as f:
        line = f.read()
    dry = train(cfg, "--resume", "auto", "--dry-run", check=False)
    with open(os.path.join(root, LOCK)) as f:
        after = f.read()
    expect("--dry-run on the freed directory: exit 0, the lock file's holder line left as it was",
           dry.returncode == 0 and after == line and holder in line, dry.stderr + line + after)
    for what, directory in (("an absent", os.path.join(tmp, "absent")), ("an empty", os.path.join(tmp, "empty"))):
        if "empty" in what:
            os.makedirs(directory)
        dry = train(cfg, "--set", f"train.checkpoint_dir={directory}", "--dry-run", check=False)
        left = sorted(os.listdir(directory)) if os.path.exists(directory) else None
        expect(f"--dry-run into {what} checkpoint_dir: exit 0, nothing created (no lock file)",
               dry.returncode == 0 and left == (None if "absent" in what else []), f"{left}\n{dry.stderr}")
    r = train(cfg, "--resume", "auto", "--set", "train.steps_this_run=1", check=False)
    expect("after the first run ended, the next one takes the directory and resumes",
           r.returncode == 0 and f"resumed from {step_dir(root, last)}" in r.stdout, r.stdout[-600:] + r.stderr)
    killed = subprocess.Popen([bertpre, "train", cfg, "--resume", "auto", "--set", f"train.metrics_file={log}.2"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_lines(log + ".2", 2)
    killed.kill()
    killed.wait()
    r = train(cfg, "--resume", "auto", "--set", "train.steps_this_run=1", check=False)
    expect("the lock of a run killed by SIGKILL ends with it: the next run resumes",
           r.returncode == 0 and "resumed from" in r.stdout, r.stdout[-600:] + r.stderr)


def case_lock_removed(tmp):
    import socket
    root = os.path.join(tmp, "ck")
    cfg = write_config(tmp, "long.json", steps=100000, checkpoint_dir=root, checkpoint_every=1, keep_checkpoints=2)

    def start(log, *args):
        return subprocess.Popen([bertpre, "train", cfg, "--resume", "auto", "--set", f"train.metrics_file={log}",
                                 *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def stop(run, log):
        """SIGTERM; its stderr, last logged step and the lock file's line."""
        run.send_signal(signal.SIGTERM)
        err = run.communicate(timeout=60)[1]
        with open(os.path.join(root, LOCK)) as f:
            return err, metrics(log)[-1]["step"], f.read()

    # The first run (no periodic checkpoint, so that no write is under way) loses its
    # directory to `rm -rf` while stopped; a second run takes the directory; the first,
    # continued and sent SIGTERM, must not write its checkpoint there.
    first_log, second_log = os.path.join(tmp, "first.jsonl"), os.path.join(tmp, "second.jsonl")
    train(cfg, "--set", "train.steps_this_run=2")
    first = start(first_log, "--set", "train.checkpoint_every=0")
    wait_for_lines(first_log, 3)
    first.send_signal(signal.SIGSTOP)
    shutil.rmtree(root)
    second = start(second_log)
    wait_for_lines(second_log, 3)
    first.send_signal(signal.SIGCONT)
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=60)
    holder = f"host {socket.gethostname()}, pid {second.pid}, started "
    expect("the run whose directory was removed and then taken by another run stops at its checkpoint: exit 1 "
           "naming the directory, the other run's host and pid, and the step not written",
           first.returncode == 1 and "was removed while this run held it" in err and holder in err and root in err
           and "without writing its checkpoint of step" in err, f"exit {first.returncode}\n{err[-1500:]}")
    leftovers = [n for n in os.listdir(root) if str(first.pid) in n]
    expect("the stopped run left nothing in the directory (no temporary checkpoint of its pid)", not leftovers,
           str(leftovers))
    wait_for_lines(second_log, len(metrics(second_log)) + 2)
    err, last, lock_line = stop(second, second_log)
    expect(f"the second run went on undisturbed: exit 0 on SIGTERM at step {last}, its checkpoint complete, the "
           "lock file naming it", second.returncode == 0 and complete(step_dir(root, last)) and
           f"pid {second.pid}," in lock_line, f"exit {second.returncode}\n{err[-1500:]}")

    # Removed with no other run about: the run makes the directory again, locks it and says
    # so; its checkpoint is written there.
    third_log = os.path.join(tmp, "third.jsonl")
    third = start(third_log, "--set", "train.checkpoint_every=0")
    wait_for_lines(third_log, len(metrics(second_log)) + 3)
    shutil.rmtree(root)
    err, last, lock_line = stop(third, third_log)
    expect(f"the run warned that its directory was removed, made it again with its lock, and ends with exit 0 and a "
           f"complete checkpoint of step {last}", third.returncode == 0 and
           "was removed or replaced while this run held it" in err and complete(step_dir(root, last)) and
           f"pid {third.pid}," in lock_line, f"exit {third.returncode}\n{err[-1500:]}")

def case_errors(tmp):
    cfg = write_config(tmp, "run.json")
    a = os.path.join(tmp, "a")
    train(cfg, "--set", f"train.checkpoint_dir={a}", "--set", "train.checkpoint_every=6")
    ckpt = step_dir(a, 6)
    cases = [
        ("another seed", ["--set", "train.seed=7"], ["train.seed", "42", "7", ckpt, "--init-from"]),
        ("another schedule", ["--set", "train.learning_rate=0.02"], ["train.learning_rate", "0.01", "0.02"]),
        ("another model", ["--set", "model.hidden_size=32"], ["model.hidden_size", "16", "32", ckpt]),
        ("another global batch", ["--set", "train.global_batch_size=16"], ["train.global_batch_size", "8", "16"]),
        ("another optimizer", ["--set", "train.optimizer=adamw"], ["train.optimizer", '"lamb"', '"adamw"']),
        ("another label smoothing", ["--set", "train.label_smoothing=0.1"], ["train.label_smoothing", "0.1"]),
    ]
    for what, args, words in cases:
        p = train(cfg, "--resume", ckpt, *args, check=False)
        expect(f"resume with {what}: exit 1, error naming {words[0]} and both values",
               p.returncode == 1 and all(w in p.stderr for w in words), p.stderr)
    partial = os.path.join(tmp, "partial")
    os.makedirs(partial)
    for name in ("model.safetensors", "state.json"):
        with open(os.path.join(ckpt, name), "rb") as src, open(os.path.join(partial, name), "wb") as dst:
            dst.write(src.read())
    p = train(cfg, "--resume", partial, check=False)
    expect("resume of a directory without COMPLETE: error naming it incomplete",
           p.returncode == 1 and "incomplete" in p.stderr and partial in p.stderr, p.stderr)
    # Said for what is there: nothing, a root of step directories none complete, or no checkpoint file.
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    root = os.path.join(tmp, "root")
    os.makedirs(os.path.join(root, "step-000000003"))
    other = os.path.join(tmp, "other")
    os.makedirs(other)
    open(os.path.join(other, "notes.txt"), "w").close()
    for what, directory, words in (("an empty directory", empty, ["empty", "no checkpoint at all"]),
                                   ("a root whose one step directory is incomplete", root,
                                    ["checkpoint root", "step-000000003", "no complete checkpoint"]),
                                   ("a directory without checkpoint files", other, ["no checkpoint at all"])):
        for option in ("--resume", "--init-from"):
            p = train(cfg, option, directory, check=False)
            expect(f"{option} {what}: exit 1 naming it and saying {words}, not 'incomplete'",
                   p.returncode == 1 and directory in p.stderr and all(w in p.stderr for w in words) and
                   "incomplete" not in p.stderr, p.stderr)
    p = train(cfg, "--resume", a, check=False)
    expect("--resume of a checkpoint root: its newest checkpoint, as eval and export take it",
           p.returncode == 0 and f"resumed from {step_dir(a, 12)} at step 12" in p.stdout, p.stdout[-800:] + p.stderr)
    # --dry-run makes the run's checks, and changes nothing.
    before = sorted(os.listdir(a))
    for args in (["--set", "train.steps=350"], ["--set", "train.seed=7"]):
        run_p = train(cfg, "--set", f"train.checkpoint_dir={a}", "--resume", "auto", *args, check=False)
        dry = train(cfg, "--set", f"train.checkpoint_dir={a}", "--resume", "auto", *args, "--dry-run", check=False)
        expect(f"--resume auto {' '.join(args)} --dry-run: refused as the run refuses it (exit 1, the same message)",
               dry.returncode == 1 and run_p.returncode == 1 and dry.stderr == run_p.stderr and
               "does not fit" in dry.stderr, dry.stderr + run_p.stderr)
    dry = train(cfg, "--set", f"train.checkpoint_dir={a}", "--dry-run", check=False)
    expect("a new run's --dry-run into a directory holding checkpoints: refused naming them",
           dry.returncode == 1 and "step-000000012" in dry.stderr and "--overwrite-checkpoints" in dry.stderr,
           dry.stderr)
    dry = train(cfg, "--set", f"train.checkpoint_dir={a}", "--dry-run", "--overwrite-checkpoints", check=False)
    expect("--dry-run --overwrite-checkpoints: exit 0, says what the run would remove, removes nothing",
           dry.returncode == 0 and "would remove 2 checkpoints" in dry.stdout and sorted(os.listdir(a)) == before,
           dry.stdout[-500:] + dry.stderr)
    dry = train(cfg, "--set", f"train.checkpoint_dir={a}", "--resume", "auto", "--dry-run", check=False)
    expect("--resume auto --dry-run of the same run: exit 0", dry.returncode == 0, dry.stderr)
    p = train(cfg, "--resume", "auto", check=False)
    expect("--resume auto without train.checkpoint_dir: error", p.returncode == 1 and "checkpoint_dir" in p.stderr,
           p.stderr)
    moved = os.path.join(tmp, "moved")
    shutil.copytree(ckpt, moved)
    before = sorted(os.listdir(a))
    p = train(cfg, "--resume", moved, "--set", f"train.checkpoint_dir={a}", check=False)
    expect("resume from a checkpoint outside a train.checkpoint_dir holding another run's: exit 1 naming both, "
           "nothing removed", p.returncode == 1 and a in p.stderr and moved in p.stderr and
           "--overwrite-checkpoints" in p.stderr and sorted(os.listdir(a)) == before and before,
           p.stderr + str(before))
    p = train(cfg, "--set", "train.steps_this_run=3", check=False)
    expect("steps_this_run without checkpoint_dir: error naming both fields",
           p.returncode == 1 and "steps_this_run" in p.stderr and "checkpoint_dir" in p.stderr, p.stderr)
    with open(os.path.join(ckpt, "state.json")) as f:
        state = json.load(f)
    state["step"] = 5
    with open(os.path.join(ckpt, "state.json"), "w") as f:
        json.dump(state, f, indent=2, sort_keys=True)
    p = train(cfg, "--resume", ckpt, check=False)
    expect("a state.json whose step was edited: error naming the file and its SHA-256 against the manifest",
           p.returncode == 1 and f"{ckpt}/state.json" in p.stderr and "SHA-256" in p.stderr, p.stderr)
    # The same edit with the manifest recomputed: the config hash still catches a changed config.
    state["config"]["train"]["seed"] = 1
    with open(os.path.join(ckpt, "state.json"), "w") as f:
        json.dump(state, f)
    rehash(ckpt, "state.json")
    p = train(cfg, "--resume", ckpt, check=False)
    expect("a state.json whose config was edited (manifest recomputed): error naming config_hash",
           p.returncode == 1 and "config_hash" in p.stderr, p.stderr)


def case_init_from(tmp):
    cfg = write_config(tmp, "run.json")
    a = os.path.join(tmp, "a")
    train(cfg, "--set", f"train.checkpoint_dir={a}")
    b = os.path.join(tmp, "b")
    phase2 = write_config(tmp, "phase2.json", seq_length=32, max_predictions_per_seq=6, steps=2, learning_rate=0.0,
                          phase=2, checkpoint_dir=b)
    r = train(phase2, "--init-from", step_dir(a, 12))
    expect("--init-from says where the weights came from", f"weights from {step_dir(a, 12)}" in r.stdout,
           r.stdout[:1000])
    src, out = load_file(os.path.join(step_dir(a, 12), "model.safetensors")), load_file(
        os.path.join(step_dir(b, 2), "model.safetensors"))
    bad = [k for k in src if src[k].tobytes() != out[k].tobytes()]
    expect(f"learning rate 0 from the loaded weights: all {len(src)} tensors unchanged", not bad, bad[:5])
    with open(os.path.join(step_dir(b, 2), "state.json")) as f:
        state = json.load(f)
    expect("a new run: step 2, LAMB step 2, phase 2", (state["step"], state["optimizer"]["step"], state["phase"]) ==
           (2, 2, 2), state["optimizer"])
    r = train(phase2, "--init-from", a, "--set", f"train.checkpoint_dir={os.path.join(tmp, 'c')}")
    expect("--init-from a checkpoint root takes its newest checkpoint, as eval and export do",
           f"weights from {step_dir(a, 12)}" in r.stdout, r.stdout[:1000])
    p = train(phase2, "--init-from", step_dir(a, 12), "--set", "model.num_hidden_layers=3", check=False)
    expect("--init-from into another model shape: error naming model.num_hidden_layers",
           p.returncode == 1 and "model.num_hidden_layers" in p.stderr, p.stderr)
    # Across objectives (train.objective): mlm+nsp weights into an MLM-only run leave the pooler
    # and NSP head out; MLM-only weights into an mlm+nsp run start them fresh, as a new run does.
    mlm_dir, back_dir, fresh_dir = (os.path.join(tmp, n) for n in ("mlm", "back", "fresh"))
    r = train(phase2, "--init-from", step_dir(a, 12), "--set", "train.objective=mlm",
              "--set", f"train.checkpoint_dir={mlm_dir}")
    mlm = load_file(os.path.join(step_dir(mlm_dir, 2), "model.safetensors"))
    heads = ("bert.pooler.", "cls.seq_relationship.")
    kept = [k for k in src if not k.startswith(heads)]
    bad = [k for k in kept if k not in mlm or src[k].tobytes() != mlm[k].tobytes()]
    expect(f"mlm+nsp weights into train.objective mlm (lr 0): said; the {len(kept)} tensors of BertForMaskedLM "
           f"unchanged, no pooler or NSP tensor stored",
           "its pooler and NSP head are left out (train.objective mlm)" in r.stdout and not bad and
           sorted(mlm) == sorted(kept), (bad[:5], r.stdout[:1500]))
    r = train(phase2, "--init-from", step_dir(mlm_dir, 2), "--set", f"train.checkpoint_dir={back_dir}")
    train(phase2, "--set", f"train.checkpoint_dir={fresh_dir}")
    back = load_file(os.path.join(step_dir(back_dir, 2), "model.safetensors"))
    fresh = load_file(os.path.join(step_dir(fresh_dir, 2), "model.safetensors"))
    bad = [k for k in back if (mlm[k] if k in mlm else fresh[k]).tobytes() != back[k].tobytes()]
    expect("MLM-only weights into mlm+nsp (lr 0): said; the BertForMaskedLM tensors unchanged, the pooler and "
           "NSP head bitwise those of a fresh run with the same seed",
           "it has no NSP head (BertForMaskedLM): the pooler and NSP head start from fresh weights" in r.stdout
           and not bad and sorted(back) == sorted(src), (bad[:5], r.stdout[:1500]))
    p = train(cfg, "--resume", step_dir(a, 12), "--set", "train.objective=mlm",
              "--set", f"train.checkpoint_dir={os.path.join(tmp, 'z')}", check=False)
    expect("--resume with another train.objective: exit 1 naming the field, both values and --init-from",
           p.returncode == 1 and 'train.objective is "mlm+nsp" in the checkpoint and "mlm" in the config' in p.stderr
           and "--init-from" in p.stderr, p.stderr)
    # Weights holding a NaN: refused by the run and by its --dry-run, with the same message.
    nan = os.path.join(tmp, "nan")
    shutil.copytree(step_dir(a, 12), nan)
    weights = load_file(os.path.join(nan, "model.safetensors"))
    name = "bert.encoder.layer.1.attention.output.dense.weight"
    weights[name].reshape(-1)[5] = np.nan
    save_file(weights, os.path.join(nan, "model.safetensors"))
    rehash(nan, "model.safetensors")  # past the manifest: the values themselves are checked
    d = os.path.join(tmp, "d")
    run_p = train(phase2, "--init-from", nan, "--set", f"train.checkpoint_dir={d}", check=False)
    dry = train(phase2, "--init-from", nan, "--set", f"train.checkpoint_dir={d}", "--dry-run", check=False)
    message = f"{nan}/model.safetensors: tensor '{name}' element 5 is nan"
    expect("--init-from weights holding a NaN, with and without --dry-run: exit 1, the same message naming the "
           "file, tensor and element", run_p.returncode == 1 and dry.returncode == 1 and message in run_p.stderr and
           dry.stderr == run_p.stderr, run_p.stderr + dry.stderr)
    dry = train(phase2, "--init-from", step_dir(a, 12), "--set", f"train.checkpoint_dir={d}", "--dry-run",
                check=False)
    expect("--init-from a clean checkpoint --dry-run: exit 0", dry.returncode == 0, dry.stderr)
    # A resume reads the optimizer's state too: a NaN there is refused by the run and its dry run alike.
    e = os.path.join(tmp, "e")
    train(cfg, "--set", f"train.checkpoint_dir={e}", "--set", "train.steps_this_run=6")
    state = load_file(os.path.join(step_dir(e, 6), "optimizer.safetensors"))
    moment = "exp_avg." + name
    state[moment].reshape(-1)[5] = np.nan
    save_file(state, os.path.join(step_dir(e, 6), "optimizer.safetensors"))
    rehash(step_dir(e, 6), "optimizer.safetensors")
    run_p = train(cfg, "--resume", "auto", "--set", f"train.checkpoint_dir={e}", check=False)
    dry = train(cfg, "--resume", "auto", "--set", f"train.checkpoint_dir={e}", "--dry-run", check=False)
    message = f"{step_dir(e, 6)}/optimizer.safetensors: tensor '{moment}' element 5 is nan"
    expect("--resume from optimizer state holding a NaN, with and without --dry-run: exit 1, the same message",
           run_p.returncode == 1 and dry.returncode == 1 and message in run_p.stderr and dry.stderr == run_p.stderr,
           run_p.stderr + dry.stderr)


def resume_on(tmp, backend, missing):
    # The resume case on another backend in FP16 with dynamic loss scaling; skipped, saying
    # why, where the backend cannot run.
    TRAIN.update(backend=backend, precision="fp16")
    probe = train(write_config(tmp, "probe.json"), "--dry-run", check=False)
    why = checks.cuda_unavailable(bertpre, probe) if backend == "cuda" else (probe.stderr.strip() if probe.returncode else None)
    if why:
        # On a GPU machine (BERTPRE_REQUIRE_GPU=1, set by tools/gpu_suite.sh) a backend that
        # cannot start is a failure, not a skip.
        required = backend == "cuda" and os.environ.get("BERTPRE_REQUIRE_GPU", "0") != "0"
        print(f"{'FAIL: BERTPRE_REQUIRE_GPU is set but' if required else 'SKIP:'} {missing}: {why}")
        sys.exit(1 if required else 77)
    case_resume(tmp)


def case_resume_optimizers(tmp):
    base = dict(TRAIN)
    for name, fields, state in (("lars", {"optimizer": "lars", "learning_rate": 0.5, "trust_coefficient": 0.02,
                                          "lr_schedule": "linear"}, "momentum_buffer."),
                                ("adamw", {"optimizer": "adamw", "learning_rate": 2e-3, "lr_schedule": "cosine",
                                           "label_smoothing": 0.1}, "exp_avg_sq.")):
        TRAIN.clear()
        TRAIN.update(base, **fields)
        sub = os.path.join(tmp, name)
        os.makedirs(sub)
        print(f"-- {name}")
        case_resume(sub)
        last = step_dir(os.path.join(sub, "a"), TRAIN["steps"])
        names = load_file(os.path.join(last, "optimizer.safetensors"))
        with open(os.path.join(last, "state.json")) as f:
            opt = json.load(f)["optimizer"]
        expect(f"{name}: optimizer.safetensors holds {state}* tensors, state.json names the optimizer",
               any(k.startswith(state) for k in names) and opt["name"] == name, (sorted(names)[:3], opt))
    TRAIN.clear()
    TRAIN.update(base)
    if not HAVE["hdf5"]:
        return
    shard = write_shards(tmp, 1, 16)
    held_out = os.path.join(tmp, "held-out.hdf5")  # the same rows under another name: eval data is held out
    shutil.copy(shard.replace("*", "0"), held_out)
    outs = []
    for smoothing in (0.0, 0.3):
        cfg = write_config(tmp, "eval.json", steps=1, learning_rate=0.0, data=shard, eval_data=held_out,
                           label_smoothing=smoothing, metrics_file=os.path.join(tmp, f"eval-{smoothing}.jsonl"))
        outs.append((train(cfg).stdout, metrics(os.path.join(tmp, f"eval-{smoothing}.jsonl"))[0]["mlm_loss"]))
    evals = [next((line for line in out.splitlines() if line.startswith("eval |")), None) for out, _ in outs]
    expect(f"label smoothing 0.3 at learning rate 0: training MLM loss {outs[0][1]:.4f} -> {outs[1][1]:.4f}, the "
           f"evaluation line unchanged", evals[0] is not None and evals[0] == evals[1] and outs[0][1] != outs[1][1],
           f"{evals}")


def tile_from_middle(small, shape):
    """ModernBERT's tile_weights_from_middle, as its loops do it: the original centred, then the
    columns left and right of it copied outward from the original's, then the rows the same way."""
    small = small.reshape(small.shape[0], -1)
    rows, cols = shape[0], (shape[1] if len(shape) > 1 else 1)
    h, w = small.shape
    ro, co = (rows - h) // 2, (cols - w) // 2
    wide = np.zeros((h, cols), np.float32)
    wide[:, co:co + w] = small
    for i in range(co):
        wide[:, i] = wide[:, co + w - 1 - (co - i - 1) % w]
    for i in range(co + w, cols):
        wide[:, i] = wide[:, co + (i - co) % w]
    out = np.zeros((rows, cols), np.float32)
    out[ro:ro + h] = wide
    for i in range(ro):
        out[ro - 1 - i] = wide[h - 1 - i % h]
    for i in range(ro + h, rows):
        out[i] = wide[(i - ro) % h]
    return out.reshape(shape)


def tiled_reference(src, out, small_layers, big_layers, parts_of):
    """Every tensor of `out` from `src` by ModernBERT's init_model_from_pretrained: layer i from
    layer round(i * small / big) (Python's round, half to even); fused tensors part by part."""
    ref = {}
    for name, big in out.items():
        key = name
        for prefix in ("model.layers.", "bert.encoder.layer."):
            if name.startswith(prefix):
                layer, rest = name[len(prefix):].split(".", 1)
                key = f"{prefix}{round(int(layer) * small_layers / big_layers)}.{rest}"
        if key not in src:
            continue
        parts = parts_of(name)
        ref[name] = np.concatenate([tile_from_middle(p, q.shape) for p, q in
                                    zip(np.split(src[key], parts), np.split(big, parts))])
    return ref


def case_init_tile(tmp):
    modern = {"model_type": "modernbert", "vocab_size": 300, "hidden_size": 64, "num_hidden_layers": 3,
              "num_attention_heads": 4, "intermediate_size": 96, "max_position_embeddings": 64,
              "local_attention": 16, "pad_token_id": 0, "cls_token_id": 1, "sep_token_id": 2, "bos_token_id": 1,
              "eos_token_id": 2}
    large = {**modern, "hidden_size": 100, "num_hidden_layers": 6, "num_attention_heads": 5,
             "intermediate_size": 161}
    common = dict(objective="mlm", seq_length=32, max_predictions_per_seq=5, optimizer="adamw", weight_decay=0.0)
    small_cfg = write_config(tmp, "small.json", modern, **common, steps=4, learning_rate=0.01,
                             checkpoint_dir=os.path.join(tmp, "small"))
    train(small_cfg)
    src_dir = step_dir(os.path.join(tmp, "small"), 4)
    big_cfg = write_config(tmp, "big.json", large, **common, steps=1, learning_rate=0.0, seed=5)
    out_dir, fresh_dir = os.path.join(tmp, "big"), os.path.join(tmp, "fresh")
    r = train(big_cfg, "--init-from", src_dir, "--init-tile", "--set", f"train.checkpoint_dir={out_dir}")
    train(big_cfg, "--set", f"train.checkpoint_dir={fresh_dir}")
    expect("--init-tile says what it tiled", f"weights from {src_dir}, tiled from 3 layers of 64 into 6 of 100"
           in r.stdout, r.stdout[:1500])
    src = load_file(os.path.join(src_dir, "model.safetensors"))
    out = load_file(os.path.join(step_dir(out_dir, 1), "model.safetensors"))
    fresh = load_file(os.path.join(step_dir(fresh_dir, 1), "model.safetensors"))
    parts = lambda n: 3 if ".attn.Wqkv." in n else 2 if ".mlp.Wi." in n else 1
    ref = tiled_reference(src, out, 3, 6, parts)
    ref.pop("model.final_norm.weight", None)  # ModernBERT's tiling leaves the final norm as initialized
    bad = [k for k in ref if ref[k].shape != out[k].shape or ref[k].tobytes() != out[k].tobytes()]
    rest = sorted(set(out) - set(ref))
    expect(f"ModernBERT 3 x 64 -> 6 x 100 (lr 0): {len(ref)} tensors bitwise ModernBERT's tiling of the "
           f"checkpoint's (layers {[round(i * 3 / 6) for i in range(6)]})", not bad and len(ref) == len(out) - 2,
           bad[:5])
    # Layer 1 starts from layer 0, which has no attn_norm (ModernBERT's tile_norm skips its Identity).
    expect("the final norm and layer 1's attn_norm (from layer 0, which has none): bitwise a fresh run's (same seed)",
           rest == ["model.final_norm.weight", "model.layers.1.attn_norm.weight"] and
           all(out[k].tobytes() == fresh[k].tobytes() for k in rest), rest)
    norms = [k for k in src if k.endswith("norm.weight")]
    expect("the smaller checkpoint is trained (its norm weights are not all 1): the tiling is seen",
           any(not np.all(src[k] == 1) for k in norms), norms)
    # BERT: MLM-only 2 layers into a BertForPreTraining of 3, wider, longer position table.
    bert_small = {**MODEL}
    bert_big = {**MODEL, "hidden_size": 20, "num_hidden_layers": 3, "intermediate_size": 40,
                "max_position_embeddings": 40, "num_attention_heads": 2}
    b_cfg = write_config(tmp, "bsmall.json", bert_small, objective="mlm", steps=4,
                         checkpoint_dir=os.path.join(tmp, "bsmall"))
    train(b_cfg)
    b_src_dir = step_dir(os.path.join(tmp, "bsmall"), 4)
    b_big = write_config(tmp, "bbig.json", bert_big, steps=1, learning_rate=0.0, seed=5)
    train(b_big, "--init-from", b_src_dir, "--init-tile", "--set", f"train.checkpoint_dir={os.path.join(tmp, 'bb')}")
    train(b_big, "--set", f"train.checkpoint_dir={os.path.join(tmp, 'bf')}")
    src = load_file(os.path.join(b_src_dir, "model.safetensors"))
    out = load_file(os.path.join(step_dir(os.path.join(tmp, "bb"), 1), "model.safetensors"))
    fresh = load_file(os.path.join(step_dir(os.path.join(tmp, "bf"), 1), "model.safetensors"))
    ref = tiled_reference(src, out, 2, 3, lambda n: 1)
    bad = [k for k in ref if ref[k].tobytes() != out[k].tobytes()]
    heads = sorted(set(out) - set(ref))
    expect(f"BERT MLM-only 2 x 16 -> BertForPreTraining 3 x 20 (lr 0): {len(ref)} tensors bitwise the tiling "
           f"(layers {[round(i * 2 / 3) for i in range(3)]}), the pooler and NSP head ({len(heads)} tensors) a fresh "
           "run's", not bad and heads and all(k.startswith(("bert.pooler.", "cls.seq_relationship.")) and
                                               out[k].tobytes() == fresh[k].tobytes() for k in heads), (bad[:5], heads))
    # What does not tile: said before any work, by the run and its dry run alike.
    for what, cfg, field in (
            ("a narrower model", write_config(tmp, "narrow.json", {**modern, "hidden_size": 32, "num_attention_heads": 2},
                                              **common, steps=1), "model.hidden_size is 64 in the checkpoint and 32"),
            ("another vocabulary", write_config(tmp, "vocab.json", {**large, "vocab_size": 301}, **common, steps=1),
             "model.vocab_size is 300 in the checkpoint and 301"),
            ("another architecture", b_big, 'model_type is "modernbert" in the checkpoint and "bert"')):
        runs = [train(cfg, "--init-from", src_dir, "--init-tile", *dry, "--set",
                      f"train.checkpoint_dir={os.path.join(tmp, 'refused')}", check=False) for dry in ([], ["--dry-run"])]
        refused = os.path.join(tmp, "refused")
        expect(f"--init-tile into {what}: exit 1 naming the field and both values, the same with --dry-run; no "
               "checkpoint written", all(p.returncode == 1 and field in p.stderr and src_dir in p.stderr for p in runs)
               and not [n for n in (os.listdir(refused) if os.path.isdir(refused) else []) if n.startswith("step-")],
               runs[0].stderr + runs[1].stderr)
    p = train(big_cfg, "--init-tile", check=False)
    expect("--init-tile without --init-from: exit 1 saying so", p.returncode == 1 and "--init-from" in p.stderr,
           p.stderr)


def case_resume_gpu(tmp):
    resume_on(tmp, "cuda", "the cuda backend cannot run here")


def case_resume_emu(tmp):
    # Every CUDA kernel, the FP16 compute copies, dynamic loss scaling and the checkpoint's
    # device transfers, on a machine without a GPU.
    resume_on(tmp, "cuda-emu", "this build has no CUDA emulation")


with tempfile.TemporaryDirectory() as tmp:
    {"resume": case_resume, "resume_gpu": case_resume_gpu, "resume_emu": case_resume_emu, "resume_shards": case_resume_shards, "mpi": case_mpi, "sigkill": case_sigkill, "sigterm": case_sigterm, "lock": case_lock, "lock_removed": case_lock_removed, "errors": case_errors,
     "resume_optimizers": case_resume_optimizers,
     "init_from": case_init_from, "init_tile": case_init_tile}[case](tmp)
sys.exit(checks.exit_status())

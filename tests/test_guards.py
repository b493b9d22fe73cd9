"""Nothing lost, nothing silently accepted: one regression check per defect of the
checkpoint directory, the early checks, the data hygiene and the messages and exit codes.

Cases (one meson test each):
  run       a new run refuses a checkpoint directory holding another run's checkpoints,
            naming it and them, and leaves them untouched; --overwrite-checkpoints removes
            them; --resume auto continues. A checkpoint_dir that is a file, or under one, stops
            the run before its first step; weights holding NaN are refused. SIGTERM without
            checkpoint_dir exits 143. steps = 0, type_vocab_size = 1 and a directory as config
            are errors naming the file and field; so is a hidden size wider than the CUDA
            LayerNorm backward takes (cuda-emu), before the first step. A micro-batch of 2^20: the
            dry run names the one that fits within 20 s, the run reaches its out-of-memory
            message. Divergence at a fixed loss scale (FP32 CPU)
            gives advice without FP16 remedies. export into a non-empty directory is refused;
            import of a GPT-2 or RoBERTa config names the model type, and a BERT config whose
            architectures names RobertaForMaskedLM the field and the class.
  data      a missing eval_data stops the run before its first step; a directory as
            train.data leaves out prep's held-out eval-* shards; a shard listed
            twice, eval data that is also train data, and a FIFO as a shard are errors naming
            the shard; values are checked per block as read (a bad row in a block not yet read
            does not stop the start, and stops the run naming file, dataset and row when
            reached); a shard removed after a checkpoint is reported as a changed shard set (by
            --dry-run too); --dry-run with a missing train.data, or a metrics file in a missing
            directory, names it.
  prep      prep on empty input and on binary garbage: exit 1 "no usable text", no shard
            written; an output directory holding another run's shards is refused naming them;
            a SIGKILLed prep leaves no shard under a final name, one stopped by SIGTERM or
            SIGINT no file at all (its .partial shards removed); a second prep into the
            --output of a running one is refused at once naming the first, which ends whole;
            the tokenizer on an empty file, with fewer pieces than characters or a
            --character-coverage SentencePiece refuses,
            and --dry-run with a missing tokenizer are clear errors. prep --format lines of a
            paragraph per line, or of one-sentence documents, warns naming --format text (an
            error with --strict, nothing written); the cut tokens are checked against
            SentencePiece's Python package.

  result    eval --json and train --eval-json refuse an input shard, the config, a checkpoint's
            state.json, a file holding anything but an earlier result and a directory, with exit 1
            before the evaluation and the file untouched; a symbolic link is followed (it stays
            a link), '-' is standard output, /dev/null and a FIFO are written into and stay what
            they are, /dev/full is an ENOSPC error.
  overlap   tokenizer train and prep read overlapping inputs (the folder, again, a file in it, a
            link to it) once: the same tokenizer model and the same shards row for row (h5py) as
            the folder alone, no held-out row among the train rows, a warning naming the repeats.
  masking   whole-word masking of text without spaces (SentencePiece on generated Chinese-like
            text, where a "word" is a sentence): every row gets masked positions and the masked
            share is within 0.02 of 0.15, as prep says it (h5py the reader); --masked-lm-prob 0.5
            that --max-predictions caps is a warning naming the count that masks the rate. The
            shards record the SHA-256 of their tokenizer file (h5py), and train with another
            train.tokenizer is refused before any step (--dry-run), with the same one taken.
            train.mask_prob 1 is refused naming the highest rate a row holds; BERTPRE_PROGRESS_EVERY=abc
            is an error naming it.
  metrics   train.metrics_file naming the config, a file of other bytes (a tokenizer's), the
            run's shard or a FIFO: exit 1 naming it before any step and with --dry-run, the
            file untouched and no .1 copy made; /dev/null is taken. A resume after a metrics
            line cut off by a failed write removes the cut line: every line whole JSON.

usage: test_guards.py BERTPRE CASE
"""
import hashlib
import json
import os
import random
import shutil
import struct
import re
import signal
import stat
import subprocess
import sys
import tempfile
import time

import checks
from checks import expect

bertpre, case = sys.argv[1], sys.argv[2]
MODEL = {"vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 32, "max_position_embeddings": 32}
TRAIN = {"micro_batch_size": 4, "global_batch_size": 8, "seq_length": 24, "max_predictions_per_seq": 4,
         "steps": 4, "log_every": 1, "learning_rate": 0.01, "warmup_proportion": 0.25}


def need(*names):
    for name in names:
        if not checks.features(bertpre)[name]:
            print(f"SKIP: bertpre was built without {name}")
            sys.exit(77)


def config(tmp, name, model=None, **train):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        json.dump({"model": {**MODEL, **(model or {})}, "train": {**TRAIN, **train}}, f)
    return path


def bp(*args, timeout=120):
    return subprocess.run([bertpre, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def stepped(p):
    return any(line.startswith("step ") for line in p.stdout.splitlines())


LOCK = ".bertpre-lock"  # train.checkpoint_dir's lock file, rewritten by every run that takes it
PREP_LOCK = ".bertpre-prep-lock"  # prep's lock file in --output (removed by a prep of one rank, however it ends)


def shown(d):
    """What prep left in directory d, its lock file aside."""
    return sorted(n for n in os.listdir(d) if n != PREP_LOCK) if os.path.isdir(d) else []


def listing(root):
    return {n: os.stat(os.path.join(root, n)).st_mtime_ns for n in sorted(os.listdir(root)) if n != LOCK}


def checkpoints(root):
    return sorted(n for n in os.listdir(root) if n != LOCK)


def case_run(tmp):
    root = os.path.join(tmp, "ck")
    cfg = config(tmp, "a.json", checkpoint_dir=root, checkpoint_every=2)
    expect("first run exits 0", bp("train", cfg).returncode == 0)
    before = listing(root)
    p = bp("train", config(tmp, "b.json", checkpoint_dir=root, checkpoint_every=2, seed=7))
    expect("a new run into a directory with checkpoints: exit 1 naming the directory and its checkpoints, "
           "before any step", p.returncode == 1 and root in p.stderr and "step-000000002, step-000000004" in p.stderr
           and "--resume auto" in p.stderr and "--overwrite-checkpoints" in p.stderr and not stepped(p), p.stderr)
    expect("the other run's checkpoints are untouched", listing(root) == before)
    b = config(tmp, "b.json", checkpoint_dir=root, checkpoint_every=2, seed=7)
    p = bp("train", b, "--overwrite-checkpoints", "--set", "train.steps_this_run=2")
    with open(os.path.join(root, "step-000000002", "state.json")) as f:
        seed = json.load(f)["config"]["train"]["seed"]
    expect("--overwrite-checkpoints: says it removed them and writes the new run's", p.returncode == 0 and
           "removed 2 checkpoints" in p.stdout and seed == 7 and checkpoints(root) == ["step-000000002"],
           p.stdout[-500:] + p.stderr)
    p = bp("train", b, "--init-from", os.path.join(root, "step-000000002"), "--overwrite-checkpoints")
    expect("--overwrite-checkpoints never removes the checkpoint the run starts from: exit 1 naming it",
           p.returncode == 1 and "step-000000002" in p.stderr and checkpoints(root) == ["step-000000002"], p.stderr)
    p = bp("train", b, "--resume", "auto")
    expect("--resume auto continues into the same directory", p.returncode == 0 and
           "resumed from" in p.stdout and os.path.isdir(os.path.join(root, "step-000000004")), p.stderr)

    a_file = os.path.join(tmp, "a_file")
    open(a_file, "w").close()
    for what, directory in (("is a file", a_file), ("lies under a file", os.path.join(a_file, "ck"))):
        p = bp("train", config(tmp, "f.json", checkpoint_dir=directory))
        expect(f"checkpoint_dir that {what}: exit 1 naming the field and path before the first step",
               p.returncode == 1 and "checkpoint_dir" in p.stderr and directory in p.stderr and not stepped(p),
               p.stdout[-300:] + p.stderr)

    # Weights holding NaN, with the manifest recomputed so that only the value check can see it.
    nan_ckpt = os.path.join(tmp, "nan")
    shutil.copytree(os.path.join(root, "step-000000004"), nan_ckpt)
    model = os.path.join(nan_ckpt, "model.safetensors")
    with open(model, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        name = sorted(k for k in header if k != "__metadata__")[0]
        f.seek(8 + n + header[name]["data_offsets"][0])
        f.write(struct.pack("<f", float("nan")))
    with open(os.path.join(nan_ckpt, "COMPLETE")) as f:
        manifest = json.load(f)
    with open(model, "rb") as f:
        manifest["sha256"]["model.safetensors"] = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(nan_ckpt, "COMPLETE"), "w") as f:
        json.dump(manifest, f)
    p = bp("train", config(tmp, "nan.json", checkpoint_dir=os.path.join(tmp, "nan-run")), "--init-from", nan_ckpt)
    expect("weights holding NaN (manifest recomputed): exit 1 naming the file and tensor before any step",
           p.returncode == 1 and model in p.stderr and name in p.stderr and "nan" in p.stderr and not stepped(p),
           p.stderr)

    p = subprocess.Popen([bertpre, "train", config(tmp, "long.json", steps=1000000)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    while True:
        line = p.stdout.readline()
        if not line or line.startswith("step "):
            break
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    expect("SIGTERM without checkpoint_dir: nothing saved, exit 143 (128 + SIGTERM), saying so",
           p.returncode == 143 and "nothing was saved" in out, f"exit {p.returncode} {out[-300:]} {err}")

    p = bp("train", config(tmp, "s.json", steps=0))
    expect("steps = 0: exit 1 naming the file, field and value", p.returncode == 1 and "s.json" in p.stderr and
           "'steps' = 0" in p.stderr, p.stderr)
    p = bp("train", config(tmp, "t.json", model={"type_vocab_size": 1}))
    expect("type_vocab_size = 1: exit 1 naming the file, field and value", p.returncode == 1 and "t.json" in p.stderr
           and "'type_vocab_size' = 1" in p.stderr, p.stderr)
    p = bp("train", config(tmp, "w.json", model={"hidden_size": 4100, "num_attention_heads": 4}, backend="cuda-emu",
                           precision="fp16"))
    expect("a hidden size the CUDA LayerNorm backward cannot take (4100, not a multiple of 8): exit 1 before the "
           "first step, naming model.hidden_size and the limit", p.returncode == 1 and not stepped(p) and
           "model.hidden_size = 4100" in p.stderr and "4096" in p.stderr, p.stderr)
    p = bp("train", tmp)
    expect("a directory as config: exit 1 saying it is a directory", p.returncode == 1 and
           "is a directory" in p.stderr and "invalid JSON" not in p.stderr, p.stderr)
    p = bp("train", config(tmp, "d.json", learning_rate=1000.0, steps=60, loss_scale_max_skips=3))
    expect("divergence on the FP32 CPU: exit 1, advice without FP16 remedies (bf16, loss scale floor)",
           p.returncode == 1 and "fixed loss scale" in p.stderr and "bf16" not in p.stderr, p.stderr)

    # A micro-batch far beyond any machine's memory (a 60,000 GiB plan): the search for the
    # micro-batch that fits bisects (about 20 plans), so the dry run answers in 0.5 s on an idle
    # 2-core machine, most of it the start-up; a search down one micro-batch at a time took
    # minutes. The 60 s limit is a hang guard, not a verdict on speed (docs/TESTING.md).
    huge = config(tmp, "huge.json", model={"hidden_size": 1024, "num_attention_heads": 16, "intermediate_size": 4096,
                                           "num_hidden_layers": 1, "max_position_embeddings": 512},
                  micro_batch_size=1 << 20, global_batch_size=1 << 20, seq_length=512, max_predictions_per_seq=20)
    started = time.time()
    try:
        p = bp("train", huge, "--dry-run", timeout=60)
        seconds, ok, detail = time.time() - started, p.returncode == 0 and "would fit" in p.stderr, p.stderr
    except subprocess.TimeoutExpired:
        seconds, ok, detail = time.time() - started, False, "no answer within the 60 s hang guard"
    expect(f"--dry-run with micro-batch 1,048,576: exit 0, the micro-batch that fits named ({seconds:.1f} s)", ok,
           detail)

    # The real run reaches its allocation and stops there with the out-of-memory message. Its
    # address space is capped at 4 GiB, so the test never holds more whatever the machine, and
    # it runs without meson's MALLOC_PERTURB_ (which makes calloc write every page it returns).
    import resource

    def cap_memory():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    started = time.time()
    try:
        p = subprocess.run([bertpre, "train", huge], capture_output=True, text=True, timeout=60,
                           preexec_fn=cap_memory, env={k: v for k, v in os.environ.items() if k != "MALLOC_PERTURB_"})
        seconds, ok, detail = time.time() - started, p.returncode == 1 and "out of host memory" in p.stderr, p.stderr
    except subprocess.TimeoutExpired:
        seconds, ok, detail = time.time() - started, False, "no answer within the 60 s hang guard"
    expect(f"the real run with micro-batch 1,048,576 under a 4 GiB address space: exit 1 'out of host memory' "
           f"before any step ({seconds:.1f} s)", ok and not stepped(p), detail[-600:])

    out = os.path.join(tmp, "export")
    os.makedirs(out)
    open(os.path.join(out, "keep.txt"), "w").close()
    p = bp("export", os.path.join(root, "step-000000004"), "--out", out)
    expect("export into a non-empty directory: exit 1 naming it and a file in it, nothing written",
           p.returncode == 1 and out in p.stderr and "keep.txt" in p.stderr and os.listdir(out) == ["keep.txt"],
           p.stderr)
    for model_type in ("gpt2", "roberta"):
        hf = os.path.join(tmp, model_type)
        os.makedirs(hf)
        with open(os.path.join(hf, "config.json"), "w") as f:
            json.dump({"model_type": model_type, "vocab_size": 50, "n_embd": 16}, f)
        open(os.path.join(hf, "model.safetensors"), "wb").close()
        p = bp("import", hf, "--out", os.path.join(tmp, model_type + "-ckpt"))
        expect(f"import of a {model_type} config: exit 1 saying model_type '{model_type}' is not BERT",
               p.returncode == 1 and f"'{model_type}'" in p.stderr and "not a BERT" in p.stderr, p.stderr)
    hf = os.path.join(tmp, "roberta-as-bert")  # model_type bert, but transformers builds the class it names
    os.makedirs(hf)
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump({"model_type": "bert", "architectures": ["RobertaForMaskedLM"], **MODEL}, f)
    open(os.path.join(hf, "model.safetensors"), "wb").close()
    p = bp("import", hf, "--out", os.path.join(tmp, "roberta-as-bert-ckpt"))
    expect("import of a config whose architectures names RobertaForMaskedLM (model_type bert): exit 1 naming the "
           "field and the class, nothing written", p.returncode == 1 and "'architectures'" in p.stderr and
           "RobertaForMaskedLM" in p.stderr and not os.path.exists(os.path.join(tmp, "roberta-as-bert-ckpt")),
           p.stderr)


def write_shard(path, rows, seed, bad_row=None):
    import h5py
    import numpy as np
    rng = np.random.default_rng(seed)
    S, P, V = TRAIN["seq_length"], TRAIN["max_predictions_per_seq"], MODEL["vocab_size"]
    ids = rng.integers(5, V, size=(rows, S)).astype(np.int32)
    ids[:, 0], ids[:, -1] = 2, 3
    pos = np.sort(np.stack([rng.choice(np.arange(1, S - 1), P, replace=False) for _ in range(rows)]), axis=1)
    lab = np.take_along_axis(ids, pos, axis=1)
    if bad_row is not None:
        ids[bad_row, 5] = V + 3  # out of the vocabulary
    data = {"input_ids": ids, "input_mask": np.ones((rows, S), np.int8),
            "segment_ids": (np.arange(S) >= S // 2).astype(np.int8)[None].repeat(rows, 0),
            "masked_lm_positions": pos.astype(np.int32), "masked_lm_ids": lab.astype(np.int32),
            "next_sentence_labels": rng.integers(0, 2, rows).astype(np.int8)}
    with h5py.File(path, "w") as f:
        for k, v in data.items():
            f.create_dataset(k, data=v, compression="gzip", chunks=(min(256, rows),) + v.shape[1:])
    return path


def case_data(tmp):
    need("hdf5")
    d = os.path.join(tmp, "shards")
    os.makedirs(d)
    write_shard(os.path.join(d, "train-00000.hdf5"), 40, 1)
    write_shard(os.path.join(d, "train-00001.hdf5"), 40, 2)
    write_shard(os.path.join(d, "eval-00000.hdf5"), 24, 3)
    p = bp("train", config(tmp, "dir.json", data=d, steps=1))
    expect("train.data = a directory: 80 samples in 2 shards, the held-out eval-* shard left out",
           p.returncode == 0 and "80 samples in 2 shard(s)" in p.stdout, p.stdout[-600:] + p.stderr)
    one = os.path.join(d, "train-00000.hdf5")
    p = bp("train", config(tmp, "twice.json", data=f"{one},{d}/train-*.hdf5", steps=1))
    expect("the same shard listed twice: exit 1 naming it", p.returncode == 1 and "listed twice" in p.stderr and
           "train-00000.hdf5" in p.stderr, p.stderr)
    p = bp("train", config(tmp, "overlap.json", data=d, eval_data=one, steps=1))
    expect("eval_data that is also train data: exit 1 naming the shard, before the first step",
           p.returncode == 1 and "held out" in p.stderr and one in p.stderr and not stepped(p), p.stderr)
    p = bp("train", config(tmp, "noeval.json", data=d, eval_data=os.path.join(tmp, "no-eval.hdf5"), steps=2))
    expect("a missing eval_data: exit 1 naming it before the first step (not after training)",
           p.returncode == 1 and "no-eval.hdf5" in p.stderr and not stepped(p), p.stdout[-300:] + p.stderr)
    p = bp("train", config(tmp, "dry.json", data=os.path.join(tmp, "missing.hdf5")), "--dry-run")
    expect("--dry-run with a missing train.data: exit 1 naming it", p.returncode == 1 and "missing.hdf5" in p.stderr,
           p.stderr)
    metrics = os.path.join(tmp, "no-such-dir", "m.jsonl")
    dry = bp("train", config(tmp, "m.json", metrics_file=metrics), "--dry-run")
    run_p = bp("train", config(tmp, "m.json", metrics_file=metrics))
    expect("--dry-run with train.metrics_file in a missing directory: exit 1 with the run's message naming it",
           dry.returncode == 1 and metrics in dry.stderr and dry.stderr == run_p.stderr, dry.stderr + run_p.stderr)

    # A FIFO holds no HDF5 file: refused by name at once (HDF5 would wait for a writer forever),
    # named directly or found in a directory.
    fifo_dir = os.path.join(tmp, "fifo")
    os.makedirs(fifo_dir)
    write_shard(os.path.join(fifo_dir, "a.hdf5"), 40, 5)
    fifo = os.path.join(fifo_dir, "b.hdf5")
    os.mkfifo(fifo)
    for what, spec in (("named as train.data", fifo), ("in the train.data directory", fifo_dir)):
        try:
            p = bp("train", config(tmp, "fifo.json", data=spec, steps=1), timeout=30)
            ok, detail = p.returncode == 1 and fifo in p.stderr and "FIFO" in p.stderr and not stepped(p), p.stderr
        except subprocess.TimeoutExpired:
            ok, detail = False, "no answer in 30 s"
        expect(f"a FIFO {what}: exit 1 naming it as a FIFO, before any step", ok, detail)

    # Values are checked per block as it is read: a bad row in the second block of 256 rows.
    bad = write_shard(os.path.join(tmp, "bad.hdf5"), 512, 4, bad_row=300)
    starts = []
    for seed in range(1, 9):
        p = bp("train", config(tmp, "bad.json", data=bad, steps=1, seed=seed))
        starts.append(p.returncode)
    expect("a bad row in a block not yet read does not stop the start: some seeds train their first step on the "
           "clean block (exit 0)", 0 in starts, starts)
    p = bp("train", config(tmp, "bad.json", data=bad, steps=80, seed=1))
    expect("when its block is reached: exit 1 naming the file, dataset 'input_ids' and row 300",
           p.returncode == 1 and "bad.hdf5" in p.stderr and "'input_ids' row 300" in p.stderr, p.stderr)

    root = os.path.join(tmp, "ck")
    cfg = config(tmp, "res.json", data=d, checkpoint_dir=root, steps=4, steps_this_run=2)
    expect("a run on 2 shards pauses at step 2", bp("train", cfg).returncode == 0)
    os.remove(os.path.join(d, "train-00001.hdf5"))
    p = bp("train", cfg, "--resume", "auto", "--dry-run")
    expect("a shard removed before the resume, --dry-run: exit 1 naming the changed shard set, as the run does",
           p.returncode == 1 and "data set changed" in p.stderr and d in p.stderr, p.stderr)
    p = bp("train", cfg, "--resume", "auto")
    expect("a shard removed before the resume: exit 1 naming the changed shard set and train.data",
           p.returncode == 1 and "data set changed" in p.stderr and d in p.stderr and "40 samples" in p.stderr,
           p.stderr)


def text_file(path, sentences, seed):
    rng = random.Random(seed)
    words = ["the", "kernel", "driver", "reads", "a", "buffer", "from", "memory", "and", "writes", "it", "to",
             "disk", "when", "device", "is", "ready", "each", "page", "holds", "data", "for", "one", "task"]
    with open(path, "w") as f:
        for i in range(sentences):
            f.write(" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))).capitalize() + ".\n")
            if i % 6 == 5:
                f.write("\n")
    return path


def case_prep(tmp):
    need("hdf5", "sentencepiece")
    corpus = text_file(os.path.join(tmp, "corpus.txt"), 600, 1)
    p = bp("tokenizer", "train", "--model-prefix", os.path.join(tmp, "spm"), "--vocab-size", 60, corpus)
    expect("a tokenizer trains on the small corpus", p.returncode == 0, p.stderr)
    spm = os.path.join(tmp, "spm.model")
    common = ["--tokenizer", spm, "--seq-length", 24, "--max-predictions", 4, "--no-progress"]

    empty = os.path.join(tmp, "empty.txt")
    open(empty, "w").close()
    garbage = os.path.join(tmp, "garbage.bin")
    with open(garbage, "wb") as f:
        rng = random.Random(5)
        f.write(bytes(rng.getrandbits(8) for _ in range(20000)))
    for what, src in (("empty input", empty), ("binary garbage", garbage)):
        out = os.path.join(tmp, "out-" + what.split()[0])
        p = bp("prep", *common, "--output", out, src)
        expect(f"prep on {what}: exit 1 'no usable text' naming the input, no shard written",
               p.returncode == 1 and "no usable text" in p.stderr and src in p.stderr and not shown(out),
               p.stderr + str(shown(out)))
    # Like the other tools: --output's missing parents are made; a failed prep leaves neither its
    # lock file nor the folders it made; a quoted glob expands as train.data's do.
    deep = os.path.join(tmp, "made", "for", "shards")
    p = bp("prep", *common, "--output", deep, empty)
    expect("a failed prep (empty input) into --output made/for/shards, none of them there: exit 1, and no lock file "
           "and none of the three folders left", p.returncode == 1 and not os.path.exists(os.path.join(tmp, "made")),
           p.stderr + str(os.listdir(tmp)))
    kept = os.path.join(tmp, "kept")
    os.makedirs(kept)
    with open(os.path.join(kept, "notes.txt"), "w") as f:
        f.write("the user's\n")
    p = bp("prep", *common, "--output", kept, empty)
    expect("a failed prep into an existing folder: its lock file gone, the folder and the user's file kept",
           p.returncode == 1 and sorted(os.listdir(kept)) == ["notes.txt"], str(os.listdir(kept)))
    p = bp("prep", *common, "--output", deep, corpus)
    expect("prep into --output made/for/shards: exit 0, the parents made, its shard there, no lock file left",
           p.returncode == 0 and sorted(os.listdir(deep)) == ["train-00000.hdf5"], p.stderr + str(
               os.listdir(deep) if os.path.isdir(deep) else "absent"))
    parts = os.path.join(tmp, "parts")
    os.makedirs(parts)
    shutil.copy(corpus, os.path.join(parts, "a.txt"))
    shutil.copy(corpus, os.path.join(parts, "b.txt"))
    with open(os.path.join(parts, "c.md"), "w") as f:
        f.write("not matched\n")
    by_glob, by_name = os.path.join(tmp, "by-glob"), os.path.join(tmp, "by-name")
    p = bp("prep", *common, "--output", by_glob, os.path.join(parts, "*.txt"))
    q = bp("prep", *common, "--output", by_name, os.path.join(parts, "a.txt"), os.path.join(parts, "b.txt"))
    same = False
    if p.returncode == 0 and q.returncode == 0:
        import h5py  # the datasets compared (an HDF5 file's bytes are not fixed by its contents)
        with h5py.File(os.path.join(by_glob, "train-00000.hdf5")) as f, \
                h5py.File(os.path.join(by_name, "train-00000.hdf5")) as g:
            same = sorted(f.keys()) == sorted(g.keys()) and all((f[k][:] == g[k][:]).all() for k in f.keys())
    expect("a quoted glob 'parts/*.txt' as INPUT: the shard of the two files named (every dataset equal)", same,
           p.stderr + q.stderr)
    p = bp("prep", *common, "--output", os.path.join(tmp, "none"), os.path.join(parts, "*.rst"))
    expect("a glob that matches nothing: exit 1 naming it", p.returncode == 1 and "*.rst: no file or folder matches"
           in p.stderr, p.stderr)

    p = bp("tokenizer", "train", "--model-prefix", os.path.join(tmp, "e"), "--vocab-size", 60, empty)
    expect("tokenizer train on an empty file: exit 1 saying it holds no text, no SentencePiece internals",
           p.returncode == 1 and "holds no text" in p.stderr and "Internal" not in p.stderr and
           ".cc(" not in p.stderr, p.stderr)

    # More distinct characters than pieces: the advice in bertpre's option names, not SentencePiece's.
    chars = os.path.join(tmp, "chars.txt")
    rng = random.Random(2)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    with open(chars, "w") as f:
        f.write("\n".join("".join(rng.choice(alphabet) for _ in range(40)) for _ in range(2000)) + "\n")
    p = bp("tokenizer", "train", "--model-prefix", os.path.join(tmp, "c"), "--vocab-size", 30, chars)
    expect("tokenizer train with fewer pieces than characters: exit 1 naming --vocab-size 30, the pieces required "
           "and --character-coverage, not SentencePiece's --character_coverage or its internals",
           p.returncode == 1 and "--vocab-size 30" in p.stderr and "--character-coverage" in p.stderr and
           "character_coverage" not in p.stderr and "Internal" not in p.stderr, p.stderr)
    p = bp("tokenizer", "train", "--model-prefix", os.path.join(tmp, "c"), "--vocab-size", 30,
           "--character-coverage", 0.9, chars)
    expect("--character-coverage 0.9 (SentencePiece takes 0.98 to 1): exit 1 naming the option and its range",
           p.returncode == 1 and "--character-coverage" in p.stderr and "0.98" in p.stderr and
           "Internal" not in p.stderr, p.stderr)
    # A sentence beyond SentencePiece's 4,192 bytes: its warning said in bertpre's option.
    long_text = os.path.join(tmp, "long.txt")
    rng = random.Random(3)
    words = ["alpha", "beta", "gamma", "delta", "kernel", "driver", "memory", "network"]
    lines = [" ".join(rng.choice(words) for _ in range(12)) + "." for _ in range(3000)]
    lines.insert(100, " ".join(rng.choice(words) for _ in range(1200)))
    with open(long_text, "w") as f:
        f.write("\n".join(lines) + "\n")
    p = bp("tokenizer", "train", "--model-prefix", os.path.join(tmp, "long"), "--vocab-size", 40, "--format", "lines",
           long_text)
    q = bp("tokenizer", "train", "--model-prefix", os.path.join(tmp, "long2"), "--vocab-size", 40, "--format",
           "lines", "--max-sentence-length", 100000, long_text)
    expect("a sentence of about 7,800 bytes: a warning that names bertpre's --max-sentence-length (not SentencePiece's "
           "--max_sentence_length), and none with --max-sentence-length 100000",
           p.returncode == 0 and re.search(r"longer than 4192 bytes \(the first of \d{4}\)", p.stderr) is not None and
           "--max-sentence-length" in p.stderr and "max_sentence_length" not in p.stderr and
           q.returncode == 0 and "longer than" not in q.stderr, p.stderr + q.stderr)

    out = os.path.join(tmp, "shards")
    p = bp("prep", *common, "--output", out, "--shards", 3, corpus)
    expect("prep writes 3 shards", p.returncode == 0 and shown(out) ==
           [f"train-0000{k}.hdf5" for k in range(3)], p.stderr + str(shown(out)))
    p = bp("prep", *common, "--output", out, "--shards", 3, "--seed", 3, corpus)
    expect("prep into the same directory again with the same names: exit 0 (its own files replaced)",
           p.returncode == 0, p.stderr)
    p = bp("prep", *common, "--output", out, "--shards", 2, corpus)
    expect("prep with fewer shards into it: exit 1 naming the old shard that would be mixed in",
           p.returncode == 1 and "train-00002.hdf5" in p.stderr, p.stderr)
    p = bp("prep", *common, "--output", out, "--shards", 1, "--prefix", "other", corpus)
    expect("prep into a directory holding shards it does not write: exit 1 naming them, nothing written",
           p.returncode == 1 and "train-00000.hdf5" in p.stderr and out in p.stderr and
           not any(n.startswith("other") for n in os.listdir(out)), p.stderr)

    # Text that gives poor instances in --format lines: a paragraph per line (sentences cut at
    # the sequence length) and documents of one sentence. The cut tokens are counted here with
    # SentencePiece's Python package on the same model: sum of max(0, pieces - (128 - 3)).
    rng = random.Random(3)
    words = ["the", "kernel", "driver", "reads", "a", "buffer", "from", "memory", "and", "writes", "it", "to"]

    def sentence():
        return " ".join(rng.choice(words) for _ in range(rng.randint(4, 12))).capitalize() + "."
    paragraphs = os.path.join(tmp, "paragraphs.txt")
    with open(paragraphs, "w") as f:
        f.write("".join(" ".join(sentence() for _ in range(8)) + "\n" for _ in range(200)))
    singles = os.path.join(tmp, "singles.txt")
    with open(singles, "w") as f:
        f.write("".join(sentence() + "\n\n" for _ in range(600)))
    seq = ["--tokenizer", spm, "--seq-length", 128, "--max-predictions", 19, "--no-progress"]
    try:
        import sentencepiece
        lengths = [len(sentencepiece.SentencePieceProcessor(model_file=spm).encode(line.strip()))
                   for line in open(paragraphs)]
        cut, total = sum(max(0, n - 125) for n in lengths), sum(lengths)
        reference = f"{cut} of the {total} tokens"
    except ImportError:
        reference = "tokens ("  # the numbers are then not checked
    out = os.path.join(tmp, "para")
    p = bp("prep", *seq, "--output", out, paragraphs)
    expect(f"prep --format lines of a paragraph per line: a warning with the cut tokens ({reference}, counted by "
           "SentencePiece's Python package), naming --format text, and the dropped tokens in the summary",
           p.returncode == 0 and "warning" in p.stderr and reference in p.stderr and "beyond --seq-length 128" in p.stderr
           and "--format text" in p.stderr and "tokens dropped" in p.stdout, p.stdout + p.stderr)
    p = bp("prep", *seq, "--output", os.path.join(tmp, "para-strict"), "--strict", paragraphs)
    expect("the same with --strict: exit 1 with the message, nothing written", p.returncode == 1 and
           "--format text" in p.stderr and not shown(os.path.join(tmp, "para-strict")), p.stderr)
    p = bp("prep", *seq, "--output", os.path.join(tmp, "para-text"), "--format", "text", paragraphs)
    expect("the same file with --format text: no warning", p.returncode == 0 and "warning" not in p.stderr, p.stderr)
    p = bp("prep", *seq, "--output", os.path.join(tmp, "singles"), singles)
    expect("documents of one sentence each: a warning naming 600 of the 600 documents",
           p.returncode == 0 and "600 of the 600 documents" in p.stderr and "single sentence" in p.stderr, p.stderr)
    p = bp("prep", *seq, "--output", os.path.join(tmp, "plain"), corpus)
    expect("documents of six sentences, each shorter than a sequence: no warning", p.returncode == 0 and
           "warning" not in p.stderr, p.stderr)

    p = bp("train", config(tmp, "dry.json", tokenizer=os.path.join(tmp, "missing.model")), "--dry-run")
    expect("--dry-run with a missing tokenizer: exit 1 naming it", p.returncode == 1 and "missing.model" in p.stderr,
           p.stderr)

    big = os.path.join(tmp, "big.txt")
    with open(big, "w") as f:
        for k in range(80):
            f.write(open(text_file(os.path.join(tmp, "part.txt"), 600, 10 + k)).read())
    def start_big(out):
        proc = subprocess.Popen([bertpre, "prep", *map(str, common), "--output", out, "--threads", "1",
                                 "--chunk-mb", "0.01", "--shards", "2", big], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 30
        while time.time() < deadline and not any(n.endswith(".partial") for n in shown(out)):
            time.sleep(0.005)
        return proc

    killed = os.path.join(tmp, "killed")
    proc = start_big(killed)
    time.sleep(0.02)
    running = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    names = shown(killed)
    expect("a SIGKILLed prep leaves only .tmp-*.partial files, no shard under a final name",
           running and names and all(n.startswith(".tmp-") and n.endswith(".partial") for n in names),
           f"running {running}: {names}")

    for sig in (signal.SIGTERM, signal.SIGINT):  # a scheduler's stop, Ctrl-C: as an error, nothing left
        stopped = os.path.join(tmp, f"stopped-{sig.name}")
        proc = start_big(stopped)
        time.sleep(0.02)
        running = proc.poll() is None
        proc.send_signal(sig)
        _, err = proc.communicate()
        names = shown(stopped)
        expect(f"{sig.name} to a prep writing its shards: it ends by the signal ({proc.returncode}), saying so, with "
               f"no .partial file and no shard left ({names})", running and proc.returncode == -sig
               and "unfinished shards removed" in err and not names, err[-500:])

    # Two preps into one --output: the second is refused at once, naming the first, which
    # ends with its shards whole.
    busy = os.path.join(tmp, "busy")
    first = start_big(busy)
    started = time.time()
    second = bp("prep", *common, "--output", busy, "--shards", 2, corpus)
    took = time.time() - started
    running = first.poll() is None
    out, err = first.communicate(timeout=120)
    import socket
    expect(f"a second prep into the --output of a running one: exit 1 in {took:.2f} s naming the directory and the "
           "first's host and pid", running and second.returncode == 1 and busy in second.stderr and
           f"host {socket.gethostname()}, pid {first.pid}, started " in second.stderr and "another prep" in
           second.stderr, second.stderr)
    expect("the first prep went on undisturbed: exit 0, its 2 shards", first.returncode == 0 and
           shown(busy) == ["train-00000.hdf5", "train-00001.hdf5"], err + str(shown(busy)))

def case_metrics(tmp):
    """train.metrics_file: an input named by mistake, a FIFO, a cut last line."""
    cfg = config(tmp, "run.json")
    with open(cfg, "rb") as f:
        cfg_bytes = f.read()
    for dry in ([], ["--dry-run"]):
        p = bp("train", cfg, "--set", f"train.metrics_file={cfg}", *dry)
        with open(cfg, "rb") as f:
            kept = f.read() == cfg_bytes
        expect(f"metrics_file naming the config{' (--dry-run)' if dry else ''}: exit 1 naming it as the config, "
               "before any step; the config untouched, no .1 copy", p.returncode == 1 and "is the config file" in
               p.stderr and cfg in p.stderr and not stepped(p) and kept and not os.path.exists(cfg + ".1"), p.stderr)
    blob = os.path.join(tmp, "spiece.model")  # an input's bytes: binary, not metrics lines
    with open(blob, "wb") as f:
        f.write(bytes(range(256)) * 4)
    for dry in ([], ["--dry-run"]):
        p = bp("train", cfg, "--set", f"train.metrics_file={blob}", *dry)
        expect(f"metrics_file naming a file that holds no metrics lines{' (--dry-run)' if dry else ''}: exit 1 "
               "naming it, the file left in place", p.returncode == 1 and blob in p.stderr and
               "not bertpre metrics" in p.stderr and os.path.getsize(blob) == 1024 and
               not os.path.exists(blob + ".1"), p.stderr)
    if checks.features(bertpre)["hdf5"]:
        shard = write_shard(os.path.join(tmp, "train-00000.hdf5"), 40, 1)
        size = os.path.getsize(shard)
        p = bp("train", config(tmp, "shard.json", data=shard, metrics_file=shard))
        expect("metrics_file naming the run's shard: exit 1 naming it as train.data, the shard in place",
               p.returncode == 1 and "is train.data" in p.stderr and os.path.getsize(shard) == size and
               not os.path.exists(shard + ".1"), p.stderr)
    fifo = os.path.join(tmp, "metrics.fifo")
    os.mkfifo(fifo)
    for dry in ([], ["--dry-run"]):
        try:
            p = bp("train", cfg, "--set", f"train.metrics_file={fifo}", *dry, timeout=30)
            ok, text = p.returncode == 1 and "a FIFO" in p.stderr and fifo in p.stderr and not stepped(p), p.stderr
        except subprocess.TimeoutExpired:
            ok, text = False, "hung for 30 s"
        expect(f"metrics_file naming a FIFO{' (--dry-run)' if dry else ''}: exit 1 at once naming it", ok, text)
    p = bp("train", cfg, "--set", "train.metrics_file=/dev/null")
    expect("metrics_file /dev/null (a character device) is taken", p.returncode == 0, p.stderr)

    # A line cut off by a failed write (a full disk), then --resume auto once there is room.
    root, log = os.path.join(tmp, "ck"), os.path.join(tmp, "m.jsonl")
    cut = config(tmp, "cut.json", checkpoint_dir=root, metrics_file=log)
    p = bp("train", cut, "--set", "train.steps_this_run=2")
    with open(log, "a") as f:
        f.write('{"step":3,"steps":4,"mlm_loss":3.6')
    p = bp("train", cut, "--resume", "auto")
    with open(log) as f:
        text = f.read()
    try:
        steps = [json.loads(line)["step"] for line in text.splitlines()]
    except ValueError as e:
        steps = str(e)
    expect("--resume after a cut metrics line: the cut line removed (said on stdout), every line whole JSON, steps "
           "1-4", p.returncode == 0 and "cut off by a failed write" in p.stdout and steps == [1, 2, 3, 4] and
           text.endswith("\n"), f"{steps}\n{p.stdout[-800:]}{p.stderr}")


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def case_result(tmp):
    """eval --json and train --eval-json: only a new file, an earlier result, standard output, a
    character device or a FIFO is written; inputs and other files are refused untouched."""
    need("hdf5")
    shards = os.path.join(tmp, "shards")
    os.makedirs(shards)
    shard = write_shard(os.path.join(shards, "eval-00000.hdf5"), 24, 3)
    train = write_shard(os.path.join(shards, "train-00000.hdf5"), 40, 1)
    root = os.path.join(tmp, "ck")
    cfg = config(tmp, "run.json", checkpoint_dir=root, data=train, eval_data=shard, steps=2)
    expect("a run to evaluate", bp("train", cfg).returncode == 0)
    ckpt = os.path.join(root, "step-000000002")
    state = os.path.join(ckpt, "state.json")
    notes = os.path.join(tmp, "notes.txt")
    with open(notes, "w") as f:
        f.write("my notes\n")
    kept = {path: sha(path) for path in (shard, state, cfg, notes)}
    for target, named in ((shard, "inside --data"), (state, "inside the checkpoint"), (cfg, "not an earlier"),
                          (notes, "not an earlier"), (shards, "a directory")):
        p = bp("eval", ckpt, "--data", shards, "--json", target)
        expect(f"eval --json {os.path.relpath(target, tmp)}: exit 1 '{named}' before the evaluation, the file "
               "untouched", p.returncode == 1 and named in p.stderr and target in p.stderr and "eval |" not in p.stdout
               and all(sha(f) == h for f, h in kept.items()), p.stdout[-300:] + p.stderr)
    p = bp("eval", ckpt, "--data", shards)
    expect("the checkpoint whose state.json was named still evaluates", p.returncode == 0, p.stderr)
    for target, named in ((cfg, "is the config"), (shard, "train.eval_data")):
        p = bp("train", config(tmp, "again.json", checkpoint_dir=os.path.join(tmp, "ck2"), data=train, eval_data=shard,
                               steps=2), "--eval-json", target)
        p2 = bp("train", cfg, "--eval-json", target, "--dry-run")
        expect(f"train --eval-json {os.path.relpath(target, tmp)}: exit 1 '{named}' before any step (also "
               "--dry-run), the file untouched", p.returncode == 1 and p2.returncode == 1 and not stepped(p)
               and (named in p.stderr or "not an earlier" in p.stderr) and all(sha(f) == h for f, h in kept.items()),
               p.stderr + p2.stderr)
    result = os.path.join(tmp, "result.json")
    link = os.path.join(tmp, "link.json")
    os.symlink("result.json", link)
    p = bp("eval", ckpt, "--data", shards, "--json", link)
    expect("--json a symbolic link to a file not yet written: the link stays a link, its target holds the result",
           p.returncode == 0 and os.path.islink(link) and json.load(open(result))["sequences"] == 24, p.stderr)
    p = bp("eval", ckpt, "--data", shards, "--json", link)
    expect("--json the same link again (an earlier result): replaced, still a link", p.returncode == 0
           and os.path.islink(link) and json.load(open(result))["sequences"] == 24, p.stderr)
    dangling = os.path.join(tmp, "dangling.json")
    os.symlink(os.path.join(tmp, "missing", "x.json"), dangling)
    p = bp("eval", ckpt, "--data", shards, "--json", dangling)
    expect("--json a link into a missing directory: exit 1 naming it before the evaluation", p.returncode == 1
           and dangling in p.stderr and "eval |" not in p.stdout, p.stderr)
    p = bp("eval", ckpt, "--data", shards, "--json", "-")
    doc = p.stdout[p.stdout.find("\n{") + 1:] if "\n{" in p.stdout else ""
    try:
        sequences = json.loads(doc)["sequences"]
    except ValueError:
        sequences = None
    expect("--json -: the result on standard output after the line (JSON, 24 sequences), no file named '-'",
           p.returncode == 0 and sequences == 24 and not os.path.exists("-"), p.stdout[-600:] + p.stderr)
    p = bp("eval", ckpt, "--data", shards, "--json", "/dev/null")
    expect("--json /dev/null: taken, and /dev/null is still a character device",
           p.returncode == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode), p.stderr)
    fifo = os.path.join(tmp, "result.fifo")
    os.mkfifo(fifo)
    got = {}
    import threading

    def reader():
        with open(fifo) as f:
            got["text"] = f.read()
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    p = bp("eval", ckpt, "--data", shards, "--json", fifo, timeout=60)
    t.join(30)
    try:
        through = json.loads(got.get("text", ""))["sequences"]
    except ValueError:
        through = None
    expect("--json a FIFO: the result goes through it (24 sequences read at the other end), the FIFO stays a FIFO",
           p.returncode == 0 and through == 24 and stat.S_ISFIFO(os.stat(fifo).st_mode), p.stderr)
    if os.path.exists("/dev/full"):
        p = bp("eval", ckpt, "--data", shards, "--json", "/dev/full")
        expect("--json /dev/full: exit 1 naming the device and ENOSPC; /dev/full still a character device",
               p.returncode == 1 and "/dev/full" in p.stderr and "No space left" in p.stderr
               and stat.S_ISCHR(os.stat("/dev/full").st_mode), p.stderr)


def case_overlap(tmp):
    """Overlapping inputs (a folder twice, a folder and a file in it, a link to the folder) are
    read once by prep and tokenizer train: the same shards as the folder alone, said in a warning."""
    need("hdf5", "sentencepiece")
    import h5py
    from data_fixtures import python_docstrings
    corpus = os.path.join(tmp, "text")
    python_docstrings(corpus, packages=["email", "json"])
    first = os.path.join(corpus, sorted(os.listdir(corpus))[0])
    os.symlink(corpus, os.path.join(tmp, "link"))
    spm = os.path.join(tmp, "spm")
    p = bp("tokenizer", "train", "--format", "text", "--vocab-size", 300, "--model-prefix", spm, corpus)
    expect("a tokenizer", p.returncode == 0, p.stderr[-500:])
    spm2 = os.path.join(tmp, "spm2")
    p = bp("tokenizer", "train", "--format", "text", "--vocab-size", 300, "--model-prefix", spm2, corpus, corpus,
           first, os.path.join(tmp, "link"))
    expect("tokenizer train of the folder, again, a file in it and a link to it: exit 0, the same model as the "
           "folder alone (each sentence counted once), a warning naming the repeats",
           p.returncode == 0 and sha(spm + ".model") == sha(spm2 + ".model") and "read once" in p.stderr
           and first in p.stderr, p.stderr[-1500:])
    rows = {}
    for name, inputs in (("once", [corpus]), ("overlapping", [corpus, first, corpus, os.path.join(tmp, "link")])):
        out = os.path.join(tmp, name)
        p = bp("prep", "--tokenizer", spm + ".model", "--output", out, "--format", "text", "--seq-length", 64,
               "--max-predictions", 10, "--shards", 2, "--eval-fraction", 0.1, *inputs)
        docs = re.search(r"(\d+) documents", p.stdout)
        got = {}
        for f in sorted(os.listdir(out)) if p.returncode == 0 else []:
            if f.endswith(".hdf5"):
                with h5py.File(os.path.join(out, f)) as h:
                    got[f] = [bytes(r.tobytes()) for r in h["input_ids"][:]]
        rows[name] = (docs and docs.group(1), got, p.stderr)
    once, over = rows["once"], rows["overlapping"]
    train = {r for f, v in over[1].items() if f.startswith("train-") for r in v}
    held = [r for f, v in over[1].items() if f.startswith("eval-") for r in v]
    expect(f"prep of overlapping inputs: the same documents ({over[0]} = {once[0]}) and the same shards, row for "
           "row (h5py), as the folder alone; no held-out row among the train rows; the repeats named",
           once[0] and over[0] == once[0] and over[1] == once[1] and held and not any(r in train for r in held)
           and "read once" in over[2], over[2][-1500:])


def case_masking(tmp):
    """What prep masks is what was asked, or it says why not: a rate --max-predictions caps, and
    whole-word masking of text without spaces (a SentencePiece "word" can be a whole sentence)."""
    need("hdf5", "sentencepiece")
    import h5py
    rng = random.Random(9)
    han = [chr(c) for c in range(0x4E00, 0x4E00 + 400)]
    lines = []
    for d in range(120):  # documents of 3-6 sentences of 12-30 characters, no spaces, as Chinese text is
        for _ in range(rng.randint(3, 6)):
            lines.append("".join(rng.choice(han[:60] if rng.random() < 0.5 else han) for _ in range(rng.randint(12, 30)))
                         + "\u3002")
        lines.append("")
    corpus = os.path.join(tmp, "zh.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    spm = os.path.join(tmp, "zh")
    p = bp("tokenizer", "train", "--format", "lines", "--vocab-size", 600, "--model-prefix", spm, corpus)
    expect("a SentencePiece tokenizer of the text", p.returncode == 0, p.stderr[-600:])

    def shard_rows(out):
        """(real tokens, masked positions per row) of every row prep wrote, read by h5py."""
        rows = []
        for name in sorted(os.listdir(out)):
            if name.endswith(".hdf5"):
                with h5py.File(os.path.join(out, name)) as h:
                    rows += [(int(m.sum()), int((pos > 0).sum())) for m, pos in
                             zip(h["input_mask"][:], h["masked_lm_positions"][:])]
        return rows

    out = os.path.join(tmp, "wwm")
    p = bp("prep", "--tokenizer", spm + ".model", "--output", out, "--format", "lines", "--seq-length", 64,
           "--max-predictions", 10, "--whole-word-mask", "--dupe-factor", 1, corpus)
    rows = shard_rows(out) if p.returncode == 0 else []
    bare = sum(1 for _, k in rows if k == 0)
    share = sum(k for _, k in rows) / max(1, sum(n for n, _ in rows))
    expect(f"--whole-word-mask on text without spaces: every row masked ({bare} of {len(rows)} rows without a masked "
           f"position), the masked share {share:.4f} within 0.02 of 0.15 (h5py)", rows and bare == 0
           and abs(share - 0.15) <= 0.02, p.stdout[-600:] + p.stderr[-600:])
    with h5py.File(os.path.join(out, "train-00000.hdf5")) as h:
        recorded = h.attrs.get("tokenizer_sha256")
    recorded = recorded.decode() if isinstance(recorded, bytes) else recorded
    expect("the shard records the SHA-256 of the tokenizer file (h5py's attribute = hashlib's)",
           recorded == sha(spm + ".model"), recorded)
    other = os.path.join(tmp, "other")
    p2 = bp("tokenizer", "train", "--format", "lines", "--vocab-size", 500, "--model-prefix", other, corpus)
    shape = {"seq_length": 64, "max_predictions_per_seq": 10, "data": out, "whole_word_mask": 1, "dynamic_masking": 1}
    for tok, ok in ((other + ".model", False), (spm + ".model", True)):
        q = bp("train", config(tmp, "wwm.json", model={"vocab_size": 600, "max_position_embeddings": 64}, steps=1,
                               tokenizer=tok, **shape), "--dry-run")
        expect(f"train on those shards with train.tokenizer {os.path.basename(tok)} (whole-word masking): "
               + ("taken (the same file)" if ok else "exit 1 before any step naming the shard and both tokenizers"),
               p2.returncode == 0 and ((q.returncode == 0) if ok else (q.returncode == 1 and tok in q.stderr
                                       and "another tokenizer" in q.stderr and "train-00000.hdf5" in q.stderr)),
               q.stdout[-300:] + q.stderr[-600:])
    q = bp("train", config(tmp, "all.json", dynamic_masking=1, mask_prob=1.0, max_predictions_per_seq=22), "--dry-run")
    expect("train.mask_prob 1 (every token of a 24-token row, more than the 22 besides [CLS] and [SEP]): exit 1 naming "
           "mask_prob and the highest rate a row holds, not advice to raise max_predictions_per_seq",
           q.returncode == 1 and "'mask_prob' = 1" in q.stderr and "below 0.9375" in q.stderr
           and "raise it" not in q.stderr, q.stderr)
    env = dict(os.environ, BERTPRE_PROGRESS_EVERY="abc")
    q = subprocess.run([bertpre, "tokenizer", "train", "--format", "lines", "--vocab-size", "300", "--model-prefix",
                        os.path.join(tmp, "every"), corpus], capture_output=True, text=True, env=env)
    expect("BERTPRE_PROGRESS_EVERY=abc: tokenizer train exits 1 naming it, no model written",
           q.returncode == 1 and "BERTPRE_PROGRESS_EVERY = 'abc'" in q.stderr
           and not os.path.exists(os.path.join(tmp, "every.model")), q.stderr[-500:])
    said = re.search(r"([\d.]+)% of the real tokens masked", p.stdout)
    expect(f"prep says the masked share ({said and said.group(1)}%) that h5py reads ({100 * share:.2f}%, to the "
           "0.1 printed)", said and abs(float(said.group(1)) - 100 * share) <= 0.051, p.stdout[-600:])
    out = os.path.join(tmp, "capped")
    p = bp("prep", "--tokenizer", spm + ".model", "--output", out, "--format", "lines", "--seq-length", 64,
           "--max-predictions", 10, "--masked-lm-prob", 0.5, "--dupe-factor", 1, corpus)
    rows = shard_rows(out) if p.returncode == 0 else []
    share = sum(k for _, k in rows) / max(1, sum(n for n, _ in rows))
    expect(f"--masked-lm-prob 0.5 with --max-predictions 10 at --seq-length 64: a warning before the work naming the "
           f"cap and --max-predictions 32; the share masked {share:.3f} is the cap's, not 0.5 (h5py)",
           p.returncode == 0 and "--max-predictions 10 caps it" in p.stderr and "--max-predictions 32" in p.stderr
           and share < 0.2, p.stderr[-800:])


with tempfile.TemporaryDirectory() as tmp:
    {"run": case_run, "data": case_data, "prep": case_prep, "metrics": case_metrics, "result": case_result,
     "overlap": case_overlap, "masking": case_masking}[case](tmp)
sys.exit(checks.exit_status())

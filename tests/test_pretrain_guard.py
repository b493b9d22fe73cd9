"""tools/pretrain.sh loses nothing and says what it does with its input, at toy size (a few
steps of micro-batches of 8 on docstrings of the Python standard library).

Cases (the first argument):
  lock       a second run on the --out of a run that trains is refused, naming the first
             one's pid and host, and the first run's files are untouched (same names, sizes
             and modification times).
  options    on a finished run: a misspelt --set field, --eval-fraction 0.9 and a --set of a
             field the script makes are refused by name with every file untouched; a run that
             fails before training (an impossible --vocab) puts the finished run back as it
             was; --set train.checkpoint_dir, train.metrics_file and train.seq_length are
             honoured (checkpoints, metrics and shard width where they say), and the run before
             is removed once the new one has finished.
  interrupt  Ctrl-C (SIGINT to the script's process group) while it trains: exit non-zero,
             "training stopped at step", no evaluation, export, plot or "done"; the resume
             command it prints, run as printed, finishes the run (the last step's
             checkpoint, eval.json, export, plot, summary), and each line of the summary's one
             "next:" block runs as printed (LABELLED: a labelled folder made here).
  inputs     binary files (one of them named .gz), a Latin-1 file and, on a second run, the
             run's own outputs (--out inside the input folder) are reported by file with
             their counts before the tokenizer trains; the binary ones and the outputs are left
             out; --strict refuses them with nothing changed.
  sizing     one file of running text: a document per blank-line block is picked (said), the
             vocabulary is capped at what SentencePiece can make (said; the model's
             vocab_size follows), --seq-length sets the shards' width and the config's, a
             disagreeing --set train.seq_length is refused by name, and a run that would read
             each sequence more than 4 times is warned about before training, with the steps
             that avoid it; with --doc-per file the same file fails in prep (no held-out
             document) and the error names --doc-per block.
  from       tools/pretrain.sh TEXT --from HF_DIR (a BertForPreTraining with 64 positions that
             transformers saves here): on a finished run, a misspelt --set field, --eval-fraction
             0.9, an HF_DIR whose tokenizer.json is neither WordPiece nor BPE, --set train.tokenizer,
             --set train.seq_length=128 (past the model's positions) and an empty --set
             train.metrics_file are refused by name with every file untouched; a Latin-1 input
             file is reported by name; --set train.checkpoint_dir trains, evaluates and exports
             from there; Ctrl-C while it trains, then the printed --resume: exit 0, both held-out
             accuracies in the summary, the export, the plot, nothing left in previous/.
  signals    SIGTERM to the script's process alone (not its group) while it trains: forwarded
             to bertpre train, which checkpoints; the script ends after it (exit 143) with no
             bertpre left holding the lock, and the printed --resume finishes the run. Ctrl-C
             during the tokenizer's training of a second run (a BERTPRE wrapper holds that stage
             3 s, deaf to SIGINT, then trains it): exit 130 once the stage has ended, the
             finished run's files back as they were, no previous/; --resume of it then exits 0.
  outputs    an --out that cannot be made (under /proc) is refused naming it, without a
             traceback; the long stages' progress lines shown (BERTPRE_PROGRESS_EVERY=0); on a
             first run with --out inside the input folder, prep reads the same documents and
             writes the same rows as with --out outside it (the run's own config.json and
             tokenizer never read as text); prep's refusal of single-sentence documents under
             --strict comes without advice about held-out documents.
  ownership  --out refused, every folder untouched and no lock file left, when it is a folder holding
             files that is not a run (a user's project with config.json, notes and a tokenizer/
             folder; `--out .` from inside it), when it is --from's directory, or an input; --from
             a config.json whose architectures is RobertaForMaskedLM is refused. --format jsonl with
             a bad line stops naming the line; with --bad-lines skip it is skipped with a warning,
             and the folder given with a file in it reads and counts each file once, naming the repeat;
             BERTPRE_PROGRESS_EVERY=abc is refused by name without a traceback, and a .parquet file
             among text files is reported with the option that reads it;
             and --seq-length 256 from scratch gives the model 256 positions (the preset has 128).
             --resume of a copy and of a moved run are refused naming the folder the run was made
             in, the original untouched. Ctrl-C while the tokenizer trains on a new --out: the stop
             and then --resume both name the command that made the run, and that command, run as
             printed, finishes it.
  orphan     SIGKILL to the script while it trains: bertpre train ends with it (SIGTERM: it writes
             its checkpoint) and the lock is free; a lock whose named process has ended is refused
             naming the process that holds it; SIGQUIT (Ctrl-\) to the script is passed on: exit
             131, the lock free.
  continue   --from a model that transformers saved sharded (model.safetensors.index.json), killed
             (SIGKILL) in the starting evaluation, and another killed in training before its first
             checkpoint: --resume makes the starting evaluation and trains from the imported model
             (the export's word embeddings correlate with the source's above 0.99, not about 0 as
             from random weights).

usage: test_pretrain_guard.py PRETRAIN_SH BERTPRE CASE
"""
import fcntl
import json
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

import checks
from checks import expect
from data_fixtures import python_docstrings, require

script, bertpre, case = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
require(bertpre, "hdf5", "sentencepiece")
TOY = ["--vocab", "300", "--eval-fraction", "0.1", "--eval-batches", "1", "--shards", "1",
       "--set", "train.micro_batch_size=8", "--set", "train.log_every=1"]


def snapshot(folder):
    """name -> (size, modification time) of every file under folder (but the script's lock file)."""
    found = {}
    for base, _, files in os.walk(folder):
        for f in files:
            if f == ".pretrain-lock":
                continue
            st = os.stat(os.path.join(base, f))
            found[os.path.relpath(os.path.join(base, f), folder)] = (st.st_size, st.st_mtime_ns)
    return found


def wait_for(path, pattern, proc, seconds=180):
    """Waits until the file at path holds pattern (or the process ends); returns whether it did."""
    end = time.time() + seconds
    while time.time() < end:
        if os.path.exists(path) and re.search(pattern, open(path, errors="replace").read()):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.2)
    return False


def hf_model(hf, corpus, **save):
    """A transformers BertForPreTraining with 64 positions and a WordPiece vocabulary trained on
    the corpus, saved into hf (save: save_pretrained's options); returns the model."""
    import transformers
    from tokenizers import BertWordPieceTokenizer
    transformers.logging.set_verbosity_error()
    os.makedirs(hf)
    trainer = BertWordPieceTokenizer(lowercase=True)
    trainer.train(sorted(os.path.join(corpus, n) for n in os.listdir(corpus)), vocab_size=800,
                  special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False)
    trainer.save_model(hf)
    vocab = sum(1 for _ in open(os.path.join(hf, "vocab.txt"), encoding="utf-8"))
    model = transformers.BertForPreTraining(transformers.BertConfig(
        vocab_size=vocab, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64))
    model.save_pretrained(hf, safe_serialization=True, **save)
    return model


with tempfile.TemporaryDirectory() as tmp:
    env = dict(os.environ, BERTPRE=bertpre, OPENBLAS_NUM_THREADS="1")

    def pretrain(*args, cwd=tmp, merged=False):
        """pretrain.sh's result; merged: stderr into stdout, in the order written."""
        return subprocess.run(["bash", script, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT if merged else subprocess.PIPE, text=True, env=env, cwd=cwd)

    def start(log, *args):
        """pretrain.sh in its own process group, as a terminal runs it, stdout and stderr to log."""
        return subprocess.Popen(["bash", script, *args], stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env,
                                cwd=tmp, start_new_session=True)

    corpus = os.path.join(tmp, "text")
    python_docstrings(corpus, packages=["email", "json", "http"])
    run = os.path.join(tmp, "run")

    if case == "lock":
        log = os.path.join(tmp, "first.log")
        first = start(log, corpus, "--out", run, *TOY, "--set", "train.steps=100000")
        started = wait_for(log, r"step +\d+/", first)
        expect("the first run trains", started, open(log).read()[-2000:])
        before = snapshot(run)
        p = pretrain(corpus, "--out", run, *TOY, "--set", "train.steps=30")
        expect(f"a second run on the same --out: exit 1 naming the first run (pid {first.pid}, host "
               f"{socket.gethostname()})", p.returncode == 1 and f"pid {first.pid}" in p.stderr
               and socket.gethostname() in p.stderr, p.stdout[-1500:] + p.stderr[-1500:])
        expect("the first run still trains", first.poll() is None)
        after = snapshot(run)
        # what the first run writes as it trains: metrics, TensorBoard events, checkpoints
        kept = {k: v for k, v in after.items() if k in before and not k.startswith(("metrics", "checkpoints",
                                                                                     "tensorboard"))}
        expect(f"the first run's files are untouched ({len(before)} files: shards, tokenizer, config)",
               all(k in after for k in before) and kept == {k: v for k, v in before.items() if k in kept}
               and os.path.isdir(os.path.join(run, "checkpoints")),
               sorted(set(before) ^ set(after)))
        os.killpg(first.pid, signal.SIGTERM)
        first.wait(120)
        # bertpre (same process group) writes its checkpoint on SIGTERM and may outlive the
        # script by that long: wait until the group is gone before the folder is removed
        # (120 s: a hang guard, not a verdict).
        end = time.time() + 120
        while time.time() < end:
            try:
                os.killpg(first.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)

    elif case == "options":
        p = pretrain(corpus, "--out", run, *TOY, "--set", "train.steps=3")
        expect("a finished toy run", p.returncode == 0 and os.path.exists(os.path.join(run, "eval.json")),
               p.stdout[-2000:] + p.stderr[-2000:])
        before = snapshot(run)
        for args, named in ((["--set", "train.stepz=300"], "stepz"), (["--eval-fraction", "0.9"], "--eval-fraction"),
                            (["--set", "train.data=x.hdf5"], "train.data"), (["--vocab", "5"], "vocab")):
            p = pretrain(corpus, "--out", run, *TOY[:-2], "--set", "train.steps=3", *args)
            after = snapshot(run)
            expect(f"{' '.join(args)}: exit 1 naming '{named}', the finished run's {len(before)} files untouched",
                   p.returncode == 1 and named in p.stderr and after == before,
                   p.stderr[-1500:] + str(sorted(set(before) ^ set(after))))
        p = pretrain(corpus, "--out", run, *TOY, "--set", "train.steps=3", "--set", "train.checkpoint_dir=ck",
                     "--set", "train.metrics_file=m.jsonl", "--set", "train.seq_length=32")
        expect("--set train.checkpoint_dir, train.metrics_file and train.seq_length: exit 0", p.returncode == 0,
               p.stdout[-2000:] + p.stderr[-2000:])
        expect("checkpoints in ./ck (the --set), the metrics in ./m.jsonl",
               os.path.exists(os.path.join(tmp, "ck", "step-000000003", "COMPLETE"))
               and os.path.exists(os.path.join(tmp, "m.jsonl")))
        try:
            import h5py
            with h5py.File(os.path.join(run, "shards", "train-00000.hdf5")) as f:
                width = f["input_ids"].shape[1]
            expect(f"shards of the --set sequence length: {width} = 32", width == 32)
        except ImportError:
            print("SKIP: the shard width (no h5py)")
        cfg = json.load(open(os.path.join(run, "config.json")))["train"]
        expect(f"config.json: seq_length {cfg['seq_length']}, checkpoint_dir and metrics_file absolute",
               cfg["seq_length"] == 32 and cfg["checkpoint_dir"] == os.path.join(tmp, "ck")
               and cfg["metrics_file"] == os.path.join(tmp, "m.jsonl"))
        expect("the run before is removed once this one has finished (no previous/)",
               not os.path.exists(os.path.join(run, "previous")) and os.path.exists(os.path.join(run, "eval.json")))

    elif case == "interrupt":
        log = os.path.join(tmp, "run.log")
        job = start(log, corpus, "--out", "run", *TOY, "--set", "train.steps=40")
        started = wait_for(log, r"step +3/", job)
        expect("training runs", started, open(log).read()[-2000:])
        os.killpg(job.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the foreground process group
        status = job.wait(120)
        out = open(log).read()
        expect(f"Ctrl-C: exit {status}, non-zero", status != 0, out[-2000:])
        expect("says training stopped at a step before the last", "training stopped at step" in out, out[-2000:])
        expect("no evaluation, export, plot or 'done' of the partial model",
               not any(os.path.exists(os.path.join(run, f)) for f in ("eval.json", "export", "metrics.png"))
               and "done in" not in out and "evaluating" not in out, out[-1500:])
        m = re.search(r"Continue it with: (.*)", out)
        expect("prints the command that continues it", m, out[-1500:])
        if m:
            p = subprocess.run(m.group(1), shell=True, capture_output=True, text=True, env=env, cwd=tmp)
            expect(f"'{m.group(1)}' as printed: exit 0, step 40's checkpoint, eval.json, export, plot, 'done'",
                   p.returncode == 0 and os.path.exists(os.path.join(run, "checkpoints", "step-000000040", "COMPLETE"))
                   and all(os.path.exists(os.path.join(run, f)) for f in ("eval.json", "export", "metrics.png"))
                   and "done in" in p.stdout, p.stdout[-2500:] + p.stderr[-2500:])
            nexts = p.stdout.count("\nnext:")
            expect(f"one 'next:' block: {nexts}", nexts == 1, p.stdout[-2000:])
            block = p.stdout[p.stdout.find("\nnext:") + 7:].splitlines()
            labelled = os.path.join(tmp, "labelled")
            for k, name in enumerate(sorted(os.listdir(corpus))[:20]):
                os.makedirs(os.path.join(labelled, "ab"[k % 2]), exist_ok=True)
                with open(os.path.join(labelled, "ab"[k % 2], f"{k}.txt"), "w") as f:
                    f.write(open(os.path.join(corpus, name)).read()[:400])
            for line in block:
                if not line.startswith("  "):
                    break
                command = line.split("   #")[0].strip().replace(" LABELLED", " " + shlex.quote(labelled))
                q = subprocess.run(command, shell=True, capture_output=True, text=True, env=env, cwd=tmp)
                expect(f"next: '{command[:110]}' runs as printed", q.returncode == 0,
                       q.stdout[-1500:] + q.stderr[-1500:])

    elif case == "inputs":
        noise = os.path.join(corpus, "noise")
        os.makedirs(noise)
        rng = random.Random(5)
        for name in ("a.bin", "b.dat", "c.txt", "d.gz"):
            with open(os.path.join(noise, name), "wb") as f:
                f.write(bytes(rng.randrange(256) for _ in range(20000)))
        with open(os.path.join(corpus, "latin.txt"), "wb") as f:
            f.write("Le café est très bon. Où est la gare? Ça va très bien, merci.\n".encode("latin-1") * 50)
        inside = os.path.join(corpus, "run")
        for attempt in (1, 2):
            p = pretrain(corpus, "--out", inside, *TOY, "--set", "train.steps=2", merged=True)
            text = p.stdout
            expect(f"run {attempt}: exit 0", p.returncode == 0, text[-2000:])
            report = text[:text.find("training a SentencePiece")]
            expect(f"run {attempt}: 4 binary files reported by name and left out",
                   re.search(r"\b4 left out: binary", report)
                   and all(os.path.join(noise, n) in report for n in ("a.bin", "b.dat", "c.txt", "d.gz")), report[-2500:])
            expect(f"run {attempt}: the Latin-1 file reported (not UTF-8, 1 file)",
                   re.search(r"\b1 taken, but not UTF-8", report) and "latin.txt" in report, report[-2500:])
            if attempt == 2:
                expect("run 2: the run's own outputs (--out inside the input) reported and left out",
                       re.search(r"\b\d+ left out: the run's own outputs", report)
                       and os.path.join(inside, "spm.model") in report, report[-2500:])
            expect(f"run {attempt}: reported before the tokenizer trains",
                   text.find("left out: binary") < text.find("training a SentencePiece tokenizer"))
        before = snapshot(inside)
        p = pretrain(corpus, "--out", inside, *TOY, "--set", "train.steps=2", "--strict")
        expect("--strict: exit 1 naming the files, the run's files untouched",
               p.returncode == 1 and "a.bin" in p.stderr and "--strict" in p.stderr and snapshot(inside) == before,
               p.stderr[-1500:])

    elif case == "sizing":
        one = os.path.join(tmp, "book.txt")
        files = sorted(os.listdir(corpus))
        with open(one, "w") as f:
            f.write("\n\n".join(open(os.path.join(corpus, n)).read() for n in files[:12]))
        size = os.path.getsize(one)
        p = pretrain(one, "--out", run, "--seq-length", "32", "--set", "train.steps=60", "--set", "train.log_every=10",
                     "--eval-fraction", "0.1", "--eval-batches", "1", "--shards", "1", merged=True)
        text = p.stdout
        expect(f"one file of {size} bytes of running text, default --vocab 8000: exit 0", p.returncode == 0, text[-2500:])
        expect("picks a document per blank-line block, and says so", "--doc-per block" in p.stdout, p.stdout[:1500])
        m = re.search(r"at most (\d+) tokenizer pieces", p.stdout)
        expect("the vocabulary capped at what SentencePiece can make, with a notice", m, text[:2500])
        cfg = json.load(open(os.path.join(run, "config.json"))) if os.path.exists(os.path.join(run, "config.json")) else {}
        if m and cfg:
            expect(f"the model's vocab_size {cfg['model']['vocab_size']} = the cap {m.group(1)}",
                   cfg["model"]["vocab_size"] == int(m.group(1)))
            expect(f"--seq-length 32: config seq_length {cfg['train']['seq_length']}, "
                   f"max_predictions_per_seq {cfg['train']['max_predictions_per_seq']} (15%: 5)",
                   cfg["train"]["seq_length"] == 32 and cfg["train"]["max_predictions_per_seq"] == 5)
        w = re.search(r"reads each of its (\d+) training sequences ([\d.]+) times.*--set train.steps=(\d+)", text)
        expect("warns, before training, that each sequence is read more than 4 times, naming the steps that avoid it",
               w and float(w.group(2)) > 4 and text.find("reads each of its") < text.find("pretraining ("), text[-2000:])
        try:
            import h5py
            with h5py.File(os.path.join(run, "shards", "train-00000.hdf5")) as f:
                width = f["input_ids"].shape[1]
            expect(f"--seq-length 32: shards {width} wide", width == 32)
        except (ImportError, OSError) as e:
            print(f"SKIP: the shard width ({e})")
        p = pretrain(one, "--out", os.path.join(tmp, "file"), "--doc-per", "file", "--vocab", "300")
        expect("the same file with --doc-per file: exit 1, the error names --doc-per block",
               p.returncode == 1 and "--doc-per block" in p.stderr, p.stderr[-1500:])
        p = pretrain(one, "--out", os.path.join(tmp, "other"), "--seq-length", "32", "--set", "train.seq_length=128")
        expect("--seq-length 32 with --set train.seq_length=128: exit 1 naming both, nothing written",
               p.returncode == 1 and "train.seq_length" in p.stderr and "--seq-length" in p.stderr
               and not os.path.exists(os.path.join(tmp, "other")), p.stderr[-1000:])
    elif case == "from":
        with checks.needs("transformers and tokenizers"):
            import tokenizers  # noqa: F401  (hf_model's)
            import transformers  # noqa: F401
        hf = os.path.join(tmp, "hf")
        hf_model(hf, corpus)
        with open(os.path.join(corpus, "latin.txt"), "wb") as f:
            f.write("Le café est très bon. Où est la gare? Ça va très bien, merci.\n".encode("latin-1") * 50)
        small = ["--eval-fraction", "0.1", "--eval-batches", "1", "--shards", "1", "--set", "train.micro_batch_size=8",
                 "--set", "train.global_batch_size=8", "--set", "train.log_every=1", "--set", "train.checkpoint_every=0",
                 "--seq-length", "32", "--set", "train.backend=cpu"]
        p = pretrain(corpus, "--from", hf, "--out", run, *small, "--set", "train.steps=3")
        expect("a finished --from run", p.returncode == 0 and os.path.exists(os.path.join(run, "eval.json")),
               p.stdout[-2000:] + p.stderr[-2000:])
        expect("the Latin-1 input file reported by name on the --from path", "latin.txt" in p.stderr
               and "not UTF-8" in p.stderr, p.stderr[-1500:])
        expect("one 'next:' block and one evaluation of the continued checkpoint (bertpre train's; no second "
               "bertpre eval of it), a metrics plot",
               p.stdout.count("\nnext:") == 1 and len(re.findall(r"^eval: .* activations\), micro-batch", p.stdout, re.M)) == 1
               and os.path.exists(os.path.join(run, "metrics.png")), p.stdout[-2500:])
        before = snapshot(run)
        bad_hf = os.path.join(tmp, "hf-unigram")
        os.makedirs(bad_hf)
        for f in ("config.json", "model.safetensors"):
            os.link(os.path.join(hf, f), os.path.join(bad_hf, f))
        with open(os.path.join(bad_hf, "tokenizer.json"), "w") as f:
            json.dump({"model": {"type": "Unigram", "vocab": []}}, f)
        for args, named in ((["--set", "train.stepz=5"], "stepz"), (["--eval-fraction", "0.9"], "--eval-fraction"),
                            (["--set", "train.tokenizer=" + os.path.join(hf, "vocab.txt")], "train.tokenizer"),
                            (["--seq-length", "128"], "max_position_embeddings"),
                            (["--set", "train.metrics_file="], "train.metrics_file"),
                            (["--from", bad_hf], "not WordPiece or BPE")):
            p = pretrain(corpus, "--from", hf, "--out", run, *small[:-2], *args)  # a later --seq-length wins
            after = snapshot(run)
            expect(f"--from ... {' '.join(args)[-60:]}: exit 1 naming '{named}', the finished run's {len(before)} "
                   "files untouched", p.returncode == 1 and named in p.stderr and after == before,
                   p.stderr[-1500:] + str(sorted(set(before) ^ set(after))))
        p = pretrain(corpus, "--from", hf, "--out", run, *small, "--set", "train.steps=3",
                     "--set", "train.checkpoint_dir=ck")
        e = json.load(open(os.path.join(run, "eval.json"))) if os.path.exists(os.path.join(run, "eval.json")) else {}
        expect("--from with --set train.checkpoint_dir=ck: exit 0, its checkpoint in ./ck, evaluated (eval.json with "
               "numbers) and exported from there", p.returncode == 0
               and os.path.exists(os.path.join(tmp, "ck", "step-000000003", "COMPLETE"))
               and e.get("checkpoint", "").startswith(os.path.join(tmp, "ck")) and e.get("sequences", 0) > 0
               and os.path.exists(os.path.join(run, "export", "model.safetensors")),
               p.stdout[-2000:] + p.stderr[-2000:])
        log = os.path.join(tmp, "run.log")
        job = start(log, corpus, "--from", hf, "--out", "run", *small, "--set", "train.steps=2000")
        started = wait_for(log, r"step +3/", job)
        expect("the --from run trains", started, open(log).read()[-2000:])
        os.killpg(job.pid, signal.SIGINT)
        status = job.wait(120)
        out = open(log).read()
        m = re.search(r"Continue it with: (.*)", out)
        expect(f"Ctrl-C: exit {status} (130), 'training stopped at step', one way to continue it (no bertpre "
               "'--resume auto' beside it), no export", status == 130 and "training stopped at step" in out and m
               and "--resume auto" not in out and not os.path.exists(os.path.join(run, "export")), out[-2000:])
        if m:
            p = subprocess.run(m.group(1), shell=True, capture_output=True, text=True, env=env, cwd=tmp)
            summary = p.stdout[p.stdout.find("done in"):]
            s = json.load(open(os.path.join(run, "eval-start.json"))) if os.path.exists(
                os.path.join(run, "eval-start.json")) else {}
            e = json.load(open(os.path.join(run, "eval.json"))) if os.path.exists(
                os.path.join(run, "eval.json")) else {}
            expect(f"'{m.group(1)}' as printed: exit 0, step 2000's checkpoint, the export, the plot, both held-out "
                   "accuracies in the summary, no previous/",
                   p.returncode == 0 and s and e and f"starting model   MLM accuracy {s['mlm_accuracy']:.3f}" in summary
                   and f"continued model  MLM accuracy {e['mlm_accuracy']:.3f}" in summary
                   and os.path.exists(os.path.join(run, "checkpoints", "step-000002000", "COMPLETE"))
                   and os.path.exists(os.path.join(run, "export", "model.safetensors"))
                   and os.path.exists(os.path.join(run, "metrics.png"))
                   and not os.path.exists(os.path.join(run, "previous")), p.stdout[-2500:] + p.stderr[-2500:])

    elif case == "signals":
        log = os.path.join(tmp, "run.log")
        job = start(log, corpus, "--out", "run", *TOY, "--set", "train.steps=30")
        started = wait_for(log, r"step +3/", job)
        expect("training runs", started, open(log).read()[-2000:])
        os.kill(job.pid, signal.SIGTERM)  # the script alone, as `kill PID` or a supervisor sends it
        status = job.wait(120)
        out = open(log).read()
        with open(os.path.join(run, ".pretrain-lock")) as held:
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                free = True
            except BlockingIOError:
                free = False
        ckpt, _ = max(((n, 0) for n in os.listdir(os.path.join(run, "checkpoints")) if n.startswith("step-")),
                      default=(None, 0))
        expect(f"SIGTERM to the script: exit {status} (143) once bertpre train has checkpointed ({ckpt}), "
               "'training stopped at step', the lock free (no bertpre left running)",
               status == 143 and ckpt and "training stopped at step" in out and "(SIGTERM)" in out and free,
               out[-2000:])
        m = re.search(r"Continue it with: (.*)", out)
        if m:
            p = subprocess.run(m.group(1), shell=True, capture_output=True, text=True, env=env, cwd=tmp)
            expect(f"'{m.group(1)}' as printed: exit 0, the export", p.returncode == 0
                   and os.path.exists(os.path.join(run, "export", "model.safetensors")), p.stderr[-2000:])
        before = snapshot(run)
        wrapper = os.path.join(tmp, "slow-bertpre")
        with open(wrapper, "w") as f:  # the tokenizer's training as slow as on a large corpus, deaf to Ctrl-C
            f.write(f'#!/bin/sh\n[ "$1 $2" = "tokenizer train" ] && trap "" INT && sleep 3\n'
                    f'exec {shlex.quote(bertpre)} "$@"\n')
        os.chmod(wrapper, 0o755)
        env["BERTPRE"] = wrapper
        job = start(log, corpus, "--out", "run", *TOY, "--set", "train.steps=3")
        reached = wait_for(log, r"training a SentencePiece tokenizer", job)
        time.sleep(0.5)
        os.killpg(job.pid, signal.SIGINT)
        status = job.wait(60)
        out = open(log).read()
        after = snapshot(run)
        expect(f"Ctrl-C while the tokenizer trains: exit {status} (130), 'before training', the finished run's "
               f"{len(before)} files back as they were, no previous/",
               reached and status == 130 and "before training" in out and after == before
               and not os.path.exists(os.path.join(run, "previous")), out[-1500:] + str(sorted(set(before) ^ set(after))))
        env["BERTPRE"] = bertpre
        p = pretrain("--resume", "run")
        expect("then --resume of the run put back: exit 0, its evaluation and export as before",
               p.returncode == 0 and os.path.exists(os.path.join(run, "eval.json"))
               and os.path.exists(os.path.join(run, "export", "model.safetensors")), p.stdout[-1500:] + p.stderr[-1500:])

    elif case == "outputs":
        p = pretrain(corpus, "--out", "/proc/pretrain-out", *TOY, "--set", "train.steps=2")
        expect("--out /proc/pretrain-out (cannot be made): exit 1 naming it, no traceback",
               p.returncode == 1 and "/proc/pretrain-out" in p.stderr and "Traceback" not in p.stderr, p.stderr[-800:])
        rows = {}
        for name, where in (("outside", os.path.join(tmp, "outside")), ("inside", os.path.join(corpus, "run"))):
            env["BERTPRE_PROGRESS_EVERY"] = "0" if name == "outside" else "10"
            p = pretrain(corpus, "--out", where, *TOY, "--set", "train.steps=1", merged=True)
            if name == "outside":
                look = r"^pretrain: checking the inputs: \d+ of \d+ files, [\d.]+ of [\d.]+ MB, about \d+:\d\d left"
                expect("BERTPRE_PROGRESS_EVERY=0: the long stages' progress shown (the look at the inputs, the "
                       "tokenizer's reading and pruning)", re.search(look, p.stdout, re.M)
                       and re.search(r"^tokenizer: reading: \d+ sentences", p.stdout, re.M)
                       and re.search(r"^tokenizer: training: \d+ pieces", p.stdout, re.M), p.stdout[:3000])
            docs = re.search(r"prep: rank 0/1: (\d+) documents", p.stdout)
            try:
                import h5py
                with h5py.File(os.path.join(where, "shards", "train-00000.hdf5")) as f:
                    rows[name] = (docs and docs.group(1), f["input_ids"][:].tobytes())
            except (ImportError, OSError) as e:
                rows[name] = (docs and docs.group(1), repr(e))
            expect(f"--out {name} the input folder, a first run: exit 0", p.returncode == 0, p.stdout[-2000:])
        expect(f"the same documents ({rows['outside'][0]}, {rows['inside'][0]}) and the same train rows with --out "
               "inside the input folder (its own files never read)", rows["outside"] == rows["inside"]
               and rows["outside"][0])
        single = os.path.join(tmp, "single")
        os.makedirs(single)
        for k in range(40):
            with open(os.path.join(single, f"d{k}.txt"), "w") as f:
                f.write(f"This is document number {k} with one sentence about kernels and memory.\n")
        p = pretrain(single, "--out", os.path.join(tmp, "single-run"), "--vocab", "60", "--strict")
        expect("--strict on single-sentence documents: exit 1 with prep's reason, no advice about held-out "
               "documents added to it", p.returncode == 1 and "single sentence" in p.stderr
               and "--eval-fraction" not in p.stderr and "more documents" not in p.stderr, p.stderr[-1500:])

    elif case == "ownership":
        # A folder that is not a run (a user's project), the repository root's case (--out . beside a
        # tokenizer/ folder), --from HF_DIR --out HF_DIR, --out equal to an input: refused, untouched.
        proj = os.path.join(tmp, "project")
        os.makedirs(os.path.join(proj, "tokenizer"))
        for name, text in (("config.json", '{"model_type": "bert"}\n'), ("notes.txt", "mine\n"),
                           ("tokenizer/source.c", "int main;\n")):
            with open(os.path.join(proj, name), "w") as f:
                f.write(text)
        hf = os.path.join(tmp, "hf")
        os.makedirs(hf)
        with open(os.path.join(hf, "config.json"), "w") as f:
            json.dump({"model_type": "bert", "architectures": ["BertForPreTraining"], "vocab_size": 30}, f)
        open(os.path.join(hf, "model.safetensors"), "wb").close()
        with open(os.path.join(hf, "vocab.txt"), "w") as f:
            f.write("".join(t + "\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a"]))
        every = {d: snapshot(d) for d in (proj, hf, corpus)}
        for args, where, named in (([corpus, "--out", proj], tmp, "notes.txt"),
                                   ([corpus, "--out", "."], proj, "tokenizer"),
                                   ([corpus, "--from", hf, "--out", hf], tmp, "--from directory"),
                                   ([corpus, "--out", corpus], tmp, "is the input")):
            p = pretrain(*args, *(TOY[2:] if "--from" in args else TOY), "--set", "train.steps=2", cwd=where)
            expect(f"pretrain.sh {' '.join(os.path.relpath(a, tmp) if a.startswith('/') else a for a in args)} "
                   f"(from {os.path.basename(where)}): exit 1 naming '{named}', every folder untouched, no lock file "
                   "left", p.returncode == 1 and named in p.stderr and all(snapshot(d) == v for d, v in every.items())
                   and not os.path.exists(os.path.join(proj, ".pretrain-lock"))
                   and not os.path.exists(os.path.join(hf, ".pretrain-lock")), p.stderr[-1200:])
        roberta = os.path.join(tmp, "roberta")
        os.makedirs(roberta)
        for name in ("model.safetensors", "vocab.txt"):
            os.link(os.path.join(hf, name), os.path.join(roberta, name))
        with open(os.path.join(roberta, "config.json"), "w") as f:
            json.dump({"model_type": "bert", "architectures": ["RobertaForMaskedLM"], "vocab_size": 30}, f)
        p = pretrain(corpus, "--from", roberta, "--out", os.path.join(tmp, "r-run"))
        expect("--from a config.json whose architectures is RobertaForMaskedLM: exit 1 naming it, nothing written",
               p.returncode == 1 and "RobertaForMaskedLM" in p.stderr and not os.path.exists(os.path.join(tmp, "r-run")),
               p.stderr[-800:])

        # --bad-lines reaches prep and the tokenizer; --seq-length past the preset's positions sizes a new model.
        jsonl = os.path.join(tmp, "docs.jsonl")
        with open(jsonl, "w") as f:
            for k, name in enumerate(sorted(os.listdir(corpus))):
                f.write(json.dumps({"text": open(os.path.join(corpus, name)).read()}) + "\n")
                if k == 3:
                    f.write("{not json\n")
        p = pretrain(jsonl, "--format", "jsonl", "--out", os.path.join(tmp, "stop"), *TOY, "--set", "train.steps=1")
        expect("--format jsonl with a bad line: exit 1 naming the line (line 5)", p.returncode == 1
               and f"{jsonl}:5" in p.stderr, p.stderr[-800:])
        p = pretrain(jsonl, "--format", "jsonl", "--bad-lines", "skip", "--seq-length", "256", "--out", run, *TOY,
                     "--set", "train.steps=1")
        cfg = json.load(open(os.path.join(run, "config.json"))) if os.path.exists(os.path.join(run, "config.json")) \
            else {"model": {}, "train": {}}
        expect(f"--bad-lines skip --seq-length 256 from scratch (the tiny preset holds 128 positions): exit 0, the "
               f"line skipped with a warning, config seq_length {cfg['train'].get('seq_length')} and "
               f"max_position_embeddings {cfg['model'].get('max_position_embeddings')} (>= 256)",
               p.returncode == 0 and "line skipped" in p.stderr and cfg["train"].get("seq_length") == 256
               and cfg["model"].get("max_position_embeddings", 0) >= 256, p.stdout[-1500:] + p.stderr[-1500:])

        env["BERTPRE_PROGRESS_EVERY"] = "abc"
        p = pretrain(corpus, "--out", os.path.join(tmp, "every"), *TOY)
        del env["BERTPRE_PROGRESS_EVERY"]
        expect("BERTPRE_PROGRESS_EVERY=abc: exit 1 naming it, no traceback, nothing written", p.returncode == 1
               and "BERTPRE_PROGRESS_EVERY = 'abc'" in p.stderr and "Traceback" not in p.stderr
               and not os.path.exists(os.path.join(tmp, "every")), p.stderr[-800:])
        parquet = os.path.join(tmp, "mixed")
        os.makedirs(parquet)
        for name in sorted(os.listdir(corpus))[:12]:
            os.link(os.path.join(corpus, name), os.path.join(parquet, name))
        with open(os.path.join(parquet, "rows.parquet"), "wb") as f:  # the magic and a NUL, as a Parquet file opens
            f.write(b"PAR1\x15\x00" + bytes(range(256)) * 8 + b"PAR1")
        p = pretrain(parquet, "--out", os.path.join(tmp, "pq-run"), *TOY, "--set", "train.steps=1", merged=True)
        expect("a .parquet file among text files without --format parquet: named with the option that reads it",
               "rows.parquet: a Parquet file, not text: --format parquet" in p.stdout, p.stdout[-1500:])

        # Overlapping inputs (the folder and a file in it): each file read once, counted once, the repeat named.
        files = sorted(os.listdir(corpus))
        p = pretrain(corpus, os.path.join(corpus, files[0]), "--out", os.path.join(tmp, "twice"), *TOY,
                     "--set", "train.steps=1")
        said = re.search(r"tokenizer \(\d+ pieces\) on (\d+) file", p.stdout)
        expect(f"the folder and a file in it: exit 0, the tokenizer trained on {said and said.group(1)} files = "
               f"{len(files)}, the repeat named", p.returncode == 0 and said and int(said.group(1)) == len(files)
               and "named more than once" in p.stderr and files[0] in p.stderr, p.stdout[-1500:] + p.stderr[-1500:])

        # A run folder copied or moved: --resume names where it was made, and changes nothing.
        copy = os.path.join(tmp, "run-copy")
        subprocess.run(["cp", "-a", run, copy], check=True)
        original = snapshot(run)
        p = pretrain("--resume", copy)
        expect("--resume of a copy: exit 1 naming the original folder, the original and the copy untouched",
               p.returncode == 1 and f"run in {run}" in p.stderr and "copied or moved" in p.stderr
               and snapshot(run) == original, p.stderr[-1000:])
        moved = os.path.join(tmp, "run-moved")
        os.rename(run, moved)
        p = pretrain("--resume", moved)
        expect("--resume of a moved run: exit 1 naming the folder it was made in", p.returncode == 1
               and f"run in {run}" in p.stderr and "copied or moved" in p.stderr, p.stderr[-1000:])

        # Stopped before training: the stop and --resume both say to run the command again, which works.
        wrapper = os.path.join(tmp, "slow-bertpre")
        with open(wrapper, "w") as f:  # the tokenizer's training as slow as on a large corpus
            f.write(f'#!/bin/sh\n[ "$1 $2" = "tokenizer train" ] && sleep 3\nexec {shlex.quote(bertpre)} "$@"\n')
        os.chmod(wrapper, 0o755)
        env["BERTPRE"] = wrapper
        log = os.path.join(tmp, "early.log")
        job = start(log, corpus, "--out", "early", *TOY, "--set", "train.steps=2")
        reached = wait_for(log, r"training a SentencePiece tokenizer", job)
        time.sleep(0.5)
        os.killpg(job.pid, signal.SIGINT)
        status = job.wait(60)
        env["BERTPRE"] = bertpre
        out = open(log).read()
        expect(f"Ctrl-C while the tokenizer trains on a new --out: exit {status} (130), 'start it again with the same "
               "command'", reached and status == 130 and "start it again with the same command: " in out, out[-1200:])
        p = pretrain("--resume", "early")
        m = re.search(r"start it again with the command that made it: (.*)", p.stderr)
        expect("--resume of it: exit 1, 'stopped before training', the command that made it",
               p.returncode == 1 and "stopped before training" in p.stderr and m, p.stderr[-1200:])
        if m:
            q = subprocess.run(m.group(1), shell=True, capture_output=True, text=True, env=env, cwd=tmp)
            expect(f"'{m.group(1)[-90:]}' as printed: exit 0, eval.json and the export",
                   q.returncode == 0 and os.path.exists(os.path.join(tmp, "early", "eval.json"))
                   and os.path.exists(os.path.join(tmp, "early", "export", "model.safetensors")),
                   q.stdout[-1500:] + q.stderr[-1500:])

    elif case == "orphan":
        def lock_free(path, seconds):
            """Whether the lock at path can be taken within seconds (a hang guard, not a verdict)."""
            end = time.time() + seconds
            while True:
                with open(path) as held:
                    try:
                        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        return True
                    except BlockingIOError:
                        if time.time() > end:
                            return False
                time.sleep(0.2)

        def end_processes(folder):
            """Kills what still runs on folder (a failed check's orphans), so that the test ends."""
            for pid in (p for p in os.listdir("/proc") if p.isdigit()):
                try:
                    if folder.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                        os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
            lock_free(os.path.join(folder, ".pretrain-lock"), 30)

        log = os.path.join(tmp, "run.log")
        job = start(log, corpus, "--out", run, *TOY, "--set", "train.steps=100000", "--set", "train.checkpoint_every=0")
        expect("training runs", wait_for(log, r"step +3/", job), open(log).read()[-2000:])
        os.kill(job.pid, signal.SIGKILL)  # the script alone, as the OOM killer or `kill -9 PID` ends it
        job.wait(30)
        free = lock_free(os.path.join(run, ".pretrain-lock"), 120)
        ckpt, _ = max(((n, 0) for n in os.listdir(os.path.join(run, "checkpoints")) if n.startswith("step-")),
                      default=(None, 0))
        expect(f"SIGKILL to the script: bertpre train ends with it (SIGTERM: its checkpoint {ckpt} written), the "
               "lock free", free and ckpt, open(log).read()[-1500:])
        if not free:  # the orphan, ended here so that the rest can run
            end_processes(run)
        ended = subprocess.Popen(["true"])
        ended.wait()
        holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time\n"
                                   "f = open(sys.argv[1], 'r+'); fcntl.flock(f, fcntl.LOCK_EX); f.truncate(0)\n"
                                   "f.write(sys.argv[2]); f.flush(); print('held', flush=True); time.sleep(300)",
                                   os.path.join(run, ".pretrain-lock"),
                                   f"host {socket.gethostname()}, pid {ended.pid}, started then\n"],
                                  stdout=subprocess.PIPE, text=True)
        holder.stdout.readline()
        p = pretrain(corpus, "--out", run, *TOY, "--set", "train.steps=2")
        expect(f"a lock whose named process has ended: the refusal names the process that holds it (pid {holder.pid})",
               p.returncode == 1 and f"pid {holder.pid}" in p.stderr and "has ended" in p.stderr, p.stderr[-800:])
        holder.kill()
        holder.wait()
        second = os.path.join(tmp, "quit")
        job = start(log, corpus, "--out", second, *TOY, "--set", "train.steps=100000")
        expect("a second run trains", wait_for(log, r"step +3/", job), open(log).read()[-2000:])
        os.kill(job.pid, signal.SIGQUIT)  # Ctrl-\ reaches the script alone: bertpre runs in its own session
        status = job.wait(120)
        out = open(log).read()
        free = lock_free(os.path.join(second, ".pretrain-lock"), 30)
        expect(f"SIGQUIT (Ctrl-\\) to the script: passed on, exit {status} (131), the stop named, the lock free",
               status == 131 and "Ctrl-\\" in out and free, out[-1500:])
        if not free:
            end_processes(second)

    elif case == "continue":
        with checks.needs("transformers, tokenizers and safetensors"):
            import numpy as np
            import tokenizers  # noqa: F401  (hf_model's)
            import transformers  # noqa: F401
            from safetensors.numpy import load_file
        hf = os.path.join(tmp, "hf")
        source = hf_model(hf, corpus, max_shard_size="20KB")
        sharded = os.path.exists(os.path.join(hf, "model.safetensors.index.json")) and \
            not os.path.exists(os.path.join(hf, "model.safetensors"))
        expect("the model to continue is saved sharded (model.safetensors.index.json)", sharded, os.listdir(hf))
        words = source.bert.embeddings.word_embeddings.weight.detach().numpy().ravel()
        small = ["--eval-fraction", "0.1", "--eval-batches", "1", "--shards", "1", "--set", "train.micro_batch_size=8",
                 "--set", "train.global_batch_size=8", "--set", "train.log_every=1", "--seq-length", "32",
                 "--set", "train.backend=cpu", "--set", "train.steps=3"]
        wrapper = os.path.join(tmp, "dying-bertpre")
        with open(wrapper, "w") as f:  # killed at a stage, as a preemption before the first checkpoint
            f.write('#!/bin/sh\ncase " $* " in *" --dry-run "*) ;; *) [ "$1" = "$DIE_AT" ] && kill -9 $$ ;; esac\n'
                    f'exec {shlex.quote(bertpre)} "$@"\n')
        os.chmod(wrapper, 0o755)
        for stage in ("eval", "train"):
            out = os.path.join(tmp, f"run-{stage}")
            env.update(BERTPRE=wrapper, DIE_AT=stage)
            p = pretrain(corpus, "--from", hf, "--out", out, *small)
            env["BERTPRE"] = bertpre
            what = "the starting evaluation" if stage == "eval" else "training, before its first checkpoint"
            expect(f"--from a sharded model, killed in {what}: imported (DIR/start), exit 1, no checkpoint",
                   p.returncode == 1 and os.path.isfile(os.path.join(out, "start", "COMPLETE"))
                   and not os.path.exists(os.path.join(out, "checkpoints", "step-000000003")),
                   p.stdout[-1000:] + p.stderr[-1000:])
            p = pretrain("--resume", out)
            export = os.path.join(out, "export", "model.safetensors")
            r = 0.0
            if os.path.exists(export):
                got = load_file(export)["bert.embeddings.word_embeddings.weight"].ravel()
                r = float(np.corrcoef(words, got)[0, 1])
            expect(f"then --resume: exit 0, the starting evaluation made (eval-start.json), the export continues "
                   f"the imported model (word embeddings' correlation with the source's {r:.4f} > 0.99; a model "
                   "trained from random weights gives about 0)",
                   p.returncode == 0 and os.path.exists(os.path.join(out, "eval-start.json")) and r > 0.99
                   and "starting model" in p.stdout, p.stdout[-1500:] + p.stderr[-1500:])
    else:
        sys.exit(f"unknown case {case}")

sys.exit(checks.exit_status())

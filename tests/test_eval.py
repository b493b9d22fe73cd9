"""`bertpre eval CHECKPOINT --data SHARDS`: the evaluation `bertpre train` runs on
train.eval_data, as a command of its own.

A small model is trained on shards that `bertpre prep` writes from linux-doc text (with a
held-out eval shard and train.eval_data set), then evaluated again from its checkpoint:
  - the numbers equal the train-time evaluation bitwise (same backend, same batches): the
    metrics file's "eval" line (17 digits) against `eval --json`, and the printed line;
  - against an independent reference: transformers' BertForPreTraining on the exported
    checkpoint, over the rows h5py reads from the eval shard, MLM loss per masked position,
    NSP loss per sequence and the masked-LM accuracy as MLPerf defines it (correct argmax
    predictions over the masked positions present): losses within 1e-5 relative (FP32 on
    both sides, sums over a few thousand terms; seen <= 2e-8), correct counts within 1 (an
    argmax between two logits closer than FP32 rounding may go either way; seen equal);
  - --batches N evaluates the first N micro-batches; the checkpoint root takes the newest;
  - train.eval_every N: eval lines at every N steps (the step-10 one equal to `bertpre eval`
    of the step-10 checkpoint bitwise) and training unchanged by them; refused without
    eval_data and on more than one rank;
  - a weights-only checkpoint (`bertpre import` of the export) gives the same numbers, its
    shape taken from the shards;
  - on the emulated CUDA backend (FP32) the same numbers within 1e-5 (skipped without it);
  - errors: --json into a missing directory and missing shards are named, before any work.
usage: test_eval.py BERTPRE hdf5=0|1 sentencepiece=0|1 emu=0|1"""
import json
import os
import sys
import tempfile

from data_fixtures import real_lines, require, run, skip, train_tokenizer
import checks
from checks import expect

bertpre = os.path.abspath(sys.argv[1])
require(sys.argv[2:], "hdf5", "sentencepiece")
try:
    import h5py
    import numpy as np
    import torch
    import transformers
except ImportError as e:
    skip(f"needs h5py, numpy, torch and transformers ({e}); tools/setup.sh installs them")

TOL = 1e-5
S, P, B = 64, 10, 8
MODEL = {"vocab_size": 512, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 64, "max_position_embeddings": 64}


def eval_json(*args):
    path = os.path.join(tmp, "eval.json")
    p = run([bertpre, "eval", *args, "--json", path])
    with open(path) as f:
        return json.load(f), p.stdout


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def reference(hf_dir, shard, batches):
    """MLM/NSP losses and correct counts of transformers' model over the shard's first rows."""
    model = transformers.AutoModelForPreTraining.from_pretrained(hf_dir).eval()
    with h5py.File(shard, "r") as f:
        rows = len(f["input_ids"]) // B * B if batches == 0 else batches * B
        d = {k: torch.from_numpy(np.asarray(f[k][:rows]).astype(np.int64)) for k in f.keys()}
    with torch.no_grad():
        out = model(input_ids=d["input_ids"], attention_mask=d["input_mask"], token_type_ids=d["segment_ids"])
    pos = d["masked_lm_positions"]
    present = pos > 0  # position 0 is [CLS], never masked: a zero is a padding slot
    logits = out.prediction_logits.double().gather(1, pos[:, :, None].expand(-1, -1, MODEL["vocab_size"]))
    logits, labels = logits[present], d["masked_lm_ids"][present]
    nsp = out.seq_relationship_logits.double()
    ce = torch.nn.functional.cross_entropy
    return {"sequences": rows, "masked_positions": int(present.sum()),
            "mlm_loss": ce(logits, labels).item(), "nsp_loss": ce(nsp, d["next_sentence_labels"]).item(),
            "mlm_correct": int((logits.argmax(1) == labels).sum()),
            "nsp_correct": int((nsp.argmax(1) == d["next_sentence_labels"]).sum())}


def against_reference(what, ours, ref):
    expect(f"{what}: {ref['sequences']} sequences, {ref['masked_positions']} masked positions",
           ours["sequences"] == ref["sequences"] and ours["masked_positions"] == ref["masked_positions"], ours)
    for k in ("mlm_loss", "nsp_loss"):
        expect(f"{what}: {k} {ours[k]:.6f} vs transformers {ref[k]:.6f}: rel {rel(ours[k], ref[k]):.1e} <= {TOL:g}",
               rel(ours[k], ref[k]) <= TOL)
    for k in ("mlm_correct", "nsp_correct"):
        expect(f"{what}: {k} {ours[k]} vs transformers {ref[k]} (within 1)", abs(ours[k] - ref[k]) <= 1)
    expect(f"{what}: mlm_accuracy = mlm_correct / masked positions (MLPerf's masked-LM accuracy)",
           ours["mlm_accuracy"] == ours["mlm_correct"] / ours["masked_positions"], ours)


with tempfile.TemporaryDirectory() as tmp:
    corpus = os.path.join(tmp, "corpus.txt")
    lines = real_lines(400_000)
    with open(corpus, "w") as f:
        for i, line in enumerate(lines):
            f.write(line + ("\n\n" if i % 20 == 19 else "\n"))
    spm = train_tokenizer(bertpre, os.path.join(tmp, "spm"), [corpus], 500, fmt="lines", pattern=None)
    shards = os.path.join(tmp, "shards")
    run([bertpre, "prep", "--tokenizer", spm, "--output", shards, "--format", "lines", "--seq-length", S,
         "--max-predictions", P, "--eval-fraction", 0.1, "--dupe-factor", 1, "--shards", 2, "--no-progress", corpus])
    eval_shard = os.path.join(shards, "eval-00000.hdf5")
    root, metrics = os.path.join(tmp, "ckpt"), os.path.join(tmp, "metrics.jsonl")
    cfg = os.path.join(tmp, "run.json")
    with open(cfg, "w") as f:
        json.dump({"model": MODEL, "train": {
            "micro_batch_size": B, "seq_length": S, "max_predictions_per_seq": P, "steps": 30, "log_every": 10,
            "learning_rate": 0.02, "warmup_proportion": 0.1, "data": os.path.join(shards, "train-*.hdf5"),
            "eval_data": eval_shard, "tokenizer": spm, "checkpoint_dir": root, "checkpoint_every": 10,
            "metrics_file": metrics}}, f)
    trained = run([bertpre, "train", cfg]).stdout
    train_line = next((line for line in trained.splitlines() if line.startswith("eval | ")), "")
    with open(metrics) as f:
        at_train = next((json.loads(line) for line in f if '"eval"' in line), {})
    expect("train-time eval: printed and in the metrics file", train_line and at_train, trained[-1500:])

    ours, out = eval_json(root, "--data", eval_shard)
    expect("eval of the checkpoint root takes the newest checkpoint",
           "newest checkpoint" in out and "step-000000030" in out, out)
    same = {k: (ours.get(k), at_train.get(k)) for k in ("sequences", "mlm_loss", "nsp_loss", "mlm_accuracy",
                                                       "nsp_accuracy", "mlm_baseline_accuracy")}
    expect("eval --json equals the train-time eval bitwise (losses, accuracies, baseline, sequences)",
           all(a == b and a is not None for a, b in same.values()), same)
    expect("eval prints the train-time eval line, character for character", train_line in out.splitlines(),
           f"{train_line}\n{out}")

    # train.eval_every 10: the same run evaluated at steps 10 and 20 as well, off the clock.
    metrics_every = os.path.join(tmp, "metrics-every.jsonl")
    run([bertpre, "train", cfg, "--set", "train.eval_every=10", "--set", "train.checkpoint_dir=",
         "--set", f"train.metrics_file={metrics_every}"])
    with open(metrics) as f:
        plain = [json.loads(line) for line in f]
    with open(metrics_every) as f:
        every = [json.loads(line) for line in f]
    evals = {e["step"]: e for e in every if e.get("eval")}
    expect("eval_every 10 over 30 steps: eval lines at steps 10, 20 and 30, in step order with the log lines",
           list(evals) == [10, 20, 30] and [e["step"] for e in every] == [10, 10, 20, 20, 30, 30], every)
    expect("eval_every leaves training alone: the log lines' losses and the final evaluation equal the run "
           "without it bitwise",
           [(e["mlm_loss"], e["nsp_loss"]) for e in every if not e.get("eval")] ==
           [(e["mlm_loss"], e["nsp_loss"]) for e in plain if not e.get("eval")]
           and all(evals.get(30, {}).get(k) == at_train.get(k) for k in ("mlm_loss", "nsp_loss", "n_pred")), every)
    at10, _ = eval_json(os.path.join(root, "step-000000010"), "--data", eval_shard)
    expect("the step-10 eval line equals `bertpre eval` of the step-10 checkpoint bitwise (n_pred = its masked "
           "positions)", 10 in evals and all(evals[10][k] == at10[k] for k in ("mlm_loss", "nsp_loss",
                                                                             "mlm_accuracy"))
           and evals[10]["n_pred"] == at10["masked_positions"], (evals.get(10), at10))
    clocks = [e["elapsed_s"] for e in every]
    expect("every line carries the training clock (elapsed_s), which never goes back",
           len(clocks) == 6 and clocks == sorted(clocks), clocks)
    p = run([bertpre, "train", cfg, "--set", "train.eval_every=10", "--set", "train.eval_data=",
             "--set", "train.checkpoint_dir=", "--dry-run"], check=False)
    expect("eval_every without eval_data: exit 1 naming the field",
           p.returncode == 1 and "eval_every" in p.stderr and cfg in p.stderr, p.stderr)
    p = run([bertpre, "train", cfg, "--set", "train.eval_every=10", "--set", "train.checkpoint_dir=", "--dry-run",
             "--ranks", 2], check=False)
    expect("eval_every on 2 ranks: exit 1 naming the field and the ranks",
           p.returncode == 1 and "eval_every" in p.stderr and "has 2" in p.stderr, p.stderr)

    hf = os.path.join(tmp, "hf")
    run([bertpre, "export", root, "--out", hf])
    against_reference("one pass", ours, reference(hf, eval_shard, 0))
    first3, _ = eval_json(root, "--data", eval_shard, "--batches", 3)
    against_reference("--batches 3", first3, reference(hf, eval_shard, 3))

    weights = os.path.join(tmp, "imported")
    run([bertpre, "import", hf, "--out", weights])
    imported, _ = eval_json(weights, "--data", eval_shard, "--micro-batch", B)
    expect("a weights-only checkpoint (import of the export), shape from the shards: the same numbers",
           all(imported[k] == ours[k] for k in ("mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy")),
           (imported, ours))

    if "emu=1" in sys.argv[2:]:
        emu, _ = eval_json(root, "--data", eval_shard, "--batches", 2, "--backend", "cuda-emu", "--precision", "fp32")
        cpu, _ = eval_json(root, "--data", eval_shard, "--batches", 2)
        expect(f"cuda-emu fp32 vs cpu, 2 batches: losses within {TOL:g}, correct counts within 1",
               emu["backend"] == "cuda-emu" and all(rel(emu[k], cpu[k]) <= TOL for k in ("mlm_loss", "nsp_loss"))
               and all(abs(emu[k] - cpu[k]) <= 1 for k in ("mlm_correct", "nsp_correct")), (emu, cpu))
    else:
        print("skip: cuda-emu case (this build has no CUDA emulation)")

    bad = os.path.join(tmp, "no-such-dir", "out.json")
    p = run([bertpre, "eval", root, "--data", eval_shard, "--json", bad], check=False)
    expect("--json into a missing directory: exit 1 naming the file, nothing evaluated",
           p.returncode == 1 and bad in p.stderr and "eval |" not in p.stdout, p.stdout + p.stderr)
    missing = os.path.join(tmp, "no-such-shards")
    p = run([bertpre, "eval", root, "--data", missing], check=False)
    expect("missing shards: exit 1 naming them", p.returncode == 1 and missing in p.stderr, p.stderr)

sys.exit(checks.exit_status())

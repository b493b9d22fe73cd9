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
  - every row exactly once: shards of 13, 231 and 438 rows at micro-batches 5, 8, 16 and 26
    (a last, smaller micro-batch; a shard smaller than one micro-batch counted once), the
    row count and the numbers against transformers over all the rows, on 1 rank and under
    `mpirun -np 2` (rows shared out over the ranks, the sums added); and the evaluations during
    (eval_every 2) and after a 2-rank training run against the 1-rank `eval` of its checkpoints;
  - a prep output directory given to --data means its eval-* shards, and eval names them; the
    same directory as train.data and train.eval_data trains on train-* and evaluates eval-*;
  - --batches N evaluates the first N micro-batches; the checkpoint root takes the newest; a
    long evaluation's progress lines (BERTPRE_PROGRESS_EVERY=0) count its rows and change
    nothing it computes, and follow the header (with the batch count evaluated) in a piped log;
  - train.eval_every N: eval lines at every N steps (the step-10 one equal to `bertpre eval`
    of the step-10 checkpoint bitwise) and training unchanged by them; refused without
    eval_data;
  - a weights-only checkpoint (`bertpre import` of the export) gives the same numbers, its
    shape taken from the shards; shards of rows longer than the model's positions are refused
    (exit 1, both lengths named), weights-only or trained;
  - on the emulated CUDA backend (FP32) the same numbers within 1e-5, and the 13-row shard at
    micro-batch 5 (a last micro-batch of 3) against transformers (skipped without it);
  - rows without a masked position: "no masked positions" printed, the JSON's MLM numbers null;
    --micro-batch 2^20 on 13 rows evaluates at micro-batch 13 (said), as micro-batch 5 does;
  - MLM only (train.objective mlm): the train-time eval line, the metrics file's lines and
    `eval --json` hold no NSP number (objective "mlm"); the export loads with
    AutoModelForMaskedLM (BertForMaskedLM, no missing or unexpected keys) and gives the same
    MLM loss and correct count over the eval shard's rows (tolerances as above);
  - errors: --json into a missing directory and missing shards are named, before any work; a
    failed evaluation leaves an earlier --json result as it was (written beside, renamed).
usage: test_eval.py BERTPRE"""
import glob
import json
import os
import re
import shutil
import sys
import tempfile

from data_fixtures import real_lines, require, run, train_tokenizer
import checks
from checks import expect

bertpre = os.path.abspath(sys.argv[1])
require(bertpre, "hdf5", "sentencepiece")
with checks.needs("h5py, numpy, torch and transformers"):
    import h5py
    import numpy as np
    import torch
    import transformers

# One thread per process: every run (and rank) of the test computes with the same settings,
# which the bitwise comparisons need, and a loaded machine does not stall on spinning threads.
os.environ.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
TOL = 1e-5
S, P, B = 64, 10, 8
MODEL = {"vocab_size": 512, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 64, "max_position_embeddings": 64}


def eval_json(*args, launch=()):
    path = os.path.join(tmp, "eval.json")
    p = run([*launch, bertpre, "eval", *args, "--json", path])
    with open(path) as f:
        return json.load(f), p.stdout


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


models = {}


def reference(hf_dir, shard, rows=0, mlm_only=False):
    """MLM/NSP losses and correct counts of transformers' model over the shard's first rows (0: all);
    mlm_only: a BertForMaskedLM export, MLM numbers alone."""
    auto = transformers.AutoModelForMaskedLM if mlm_only else transformers.AutoModelForPreTraining
    model = models.get(hf_dir) or models.setdefault(hf_dir, auto.from_pretrained(hf_dir).eval())
    with h5py.File(shard, "r") as f:
        rows = rows or len(f["input_ids"])
        d = {k: torch.from_numpy(np.asarray(f[k][:rows]).astype(np.int64)) for k in f.keys()}
    with torch.no_grad():
        out = model(input_ids=d["input_ids"], attention_mask=d["input_mask"], token_type_ids=d["segment_ids"])
    pos = d["masked_lm_positions"]
    present = pos > 0  # position 0 is [CLS], never masked: a zero is a padding slot
    scores = out.logits if mlm_only else out.prediction_logits
    logits = scores.gather(1, pos[:, :, None].expand(-1, -1, MODEL["vocab_size"])).double()
    logits, labels = logits[present], d["masked_lm_ids"][present]
    ce = torch.nn.functional.cross_entropy
    result = {"sequences": rows, "masked_positions": int(present.sum()), "mlm_loss": ce(logits, labels).item(),
              "mlm_correct": int((logits.argmax(1) == labels).sum())}
    if not mlm_only:
        nsp = out.seq_relationship_logits.double()
        result.update(nsp_loss=ce(nsp, d["next_sentence_labels"]).item(),
                      nsp_correct=int((nsp.argmax(1) == d["next_sentence_labels"]).sum()))
    return result


def against_reference(what, ours, ref):
    expect(f"{what}: {ref['sequences']} sequences, {ref['masked_positions']} masked positions",
           ours["sequences"] == ref["sequences"] and ours["masked_positions"] == ref["masked_positions"], ours)
    for k in ("mlm_loss", "nsp_loss")[:1 if "nsp_loss" not in ref else 2]:
        expect(f"{what}: {k} {ours[k]:.6f} vs transformers {ref[k]:.6f}: rel {rel(ours[k], ref[k]):.1e} <= {TOL:g}",
               rel(ours[k], ref[k]) <= TOL)
    for k in ("mlm_correct", "nsp_correct")[:1 if "nsp_loss" not in ref else 2]:
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
    expect("every line holds the training clock (elapsed_s), which never goes back",
           len(clocks) == 6 and clocks == sorted(clocks), clocks)
    p = run([bertpre, "train", cfg, "--set", "train.eval_every=10", "--set", "train.eval_data=",
             "--set", "train.checkpoint_dir=", "--dry-run"], check=False)
    expect("eval_every without eval_data: exit 1 naming the field",
           p.returncode == 1 and "eval_every" in p.stderr and cfg in p.stderr, p.stderr)

    hf = os.path.join(tmp, "hf")
    run([bertpre, "export", root, "--out", hf])
    ref_all = reference(hf, eval_shard)["sequences"]
    against_reference("one pass", ours, reference(hf, eval_shard))
    first3, _ = eval_json(root, "--data", eval_shard, "--batches", 3)
    against_reference("--batches 3", first3, reference(hf, eval_shard, 3 * B))
    # Progress lines (BERTPRE_PROGRESS_EVERY=0: after every micro-batch but the first): the rows
    # done rising to the last micro-batch's start, and the numbers those of the run without them.
    os.environ["BERTPRE_PROGRESS_EVERY"] = "0"
    again, out = eval_json(root, "--data", eval_shard, "--batches", 3)
    del os.environ["BERTPRE_PROGRESS_EVERY"]
    done = [int(m) for m in re.findall(r"^eval: (\d+) of 24 rows, about \d+:\d\d left$", out, re.M)]
    expect(f"BERTPRE_PROGRESS_EVERY=0: progress lines at rows {done} of 24 (8, 16), the same numbers",
           done == [8, 16] and again == first3, out[-800:])
    lines = out.splitlines()
    head = [i for i, line in enumerate(lines) if re.match(r"^eval: .* on cpu \(fp32 activations\), micro-batch", line)]
    first = next((i for i, line in enumerate(lines) if re.match(r"^eval: \d+ of 24 rows", line)), -1)
    expect("in the piped output the header ('eval: CHECKPOINT on cpu ..., 3 batches') comes before the progress lines, "
           "its batch count the one evaluated", head and 0 <= head[0] < first and
           lines[head[0]].endswith(f", {again['batches']} batches") and again["batches"] == 3, out[-800:])

    # Every row exactly once: shards of the first n rows of prep's output (eval, then train).
    sources = [eval_shard] + sorted(glob.glob(os.path.join(shards, "train-*.hdf5")))
    rows = {}
    for src in sources:
        with h5py.File(src, "r") as f:
            for k in f.keys():
                rows.setdefault(k, []).append(np.asarray(f[k]))
    rows = {k: np.concatenate(v) for k, v in rows.items()}
    mpirun = shutil.which("mpirun") if checks.features(bertpre)["mpi"] else None
    if mpirun and os.geteuid() == 0:  # Open MPI refuses root unless told twice
        os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    two_ranks = (mpirun, "-np", "2", "--oversubscribe")
    for n, micro_batches in ((13, (5, 16, 26)), (231, (8, 26)), (438, (16, 5))):
        shard = os.path.join(tmp, f"rows-{n}.hdf5")
        with h5py.File(shard, "w") as f:
            for k, v in rows.items():
                f.create_dataset(k, data=v[:n])
        ref = reference(hf, shard)
        for mb in micro_batches:
            for launch in ((), two_ranks) if mpirun else ((),):
                got, out = eval_json(root, "--data", shard, "--micro-batch", mb, launch=launch)
                where = f"{n} rows, micro-batch {mb}, {'2 ranks' if launch else '1 rank'}"
                against_reference(where, got, ref)
                shares = (n // 2, n - n // 2) if launch else (n,)  # rank r takes rows [r*n/2, (r+1)*n/2)
                batches = sum(-(-share // mb) for share in shares)
                expect(f"{where}: '{n} sequences' printed, {batches} micro-batches",
                       f"eval | {n} sequences of {shard}" in out and got["batches"] == batches, out)
    if mpirun:
        # The evaluation after training under mpirun: each rank its share, the sums added.
        root2, metrics2 = os.path.join(tmp, "ckpt2"), os.path.join(tmp, "metrics2.jsonl")
        # With eval_every 2 the ranks evaluate together during training as well.
        run([*two_ranks, bertpre, "train", cfg, "--set", "train.steps=4", "--set", f"train.checkpoint_dir={root2}",
             "--set", "train.checkpoint_every=2", "--set", "train.eval_every=2",
             "--set", f"train.metrics_file={metrics2}", "--set", f"train.global_batch_size={2 * B}"])
        with open(metrics2) as f:
            evals2 = {e["step"]: e for e in map(json.loads, f) if e.get("eval")}
        at_train2 = evals2.get(4, {})
        alone, _ = eval_json(root2, "--data", eval_shard)
        expect(f"train-time eval on 2 ranks: every row ({alone['sequences']}) once, losses within {TOL:g} of the "
               f"1-rank eval of its checkpoint", at_train2.get("sequences") == alone["sequences"] == ref_all and
               all(rel(at_train2[k], alone[k]) <= TOL for k in ("mlm_loss", "nsp_loss")), (at_train2, alone))
        at2, _ = eval_json(os.path.join(root2, "step-000000002"), "--data", eval_shard)
        expect(f"eval_every 2 on 2 ranks: eval lines at steps 2 and 4; step 2's covers every row and is within "
               f"{TOL:g} of the 1-rank eval of the step-2 checkpoint", sorted(evals2) == [2, 4] and
               evals2[2]["sequences"] == ref_all and all(rel(evals2[2][k], at2[k]) <= TOL for k in
                                                         ("mlm_loss", "nsp_loss")), (evals2, at2))
    else:
        print("skip: 2-rank cases (needs a build with MPI and mpirun on PATH)")

    # A prep output directory means its held-out eval-* shards, and eval says which it reads.
    in_dir, out = eval_json(root, "--data", shards)
    expect("--data DIR of prep: its eval-* shard alone, named, the numbers of that shard",
           f"eval: 1 shard of {shards}" in out and eval_shard in out and "train-0" not in out and
           all(in_dir[k] == ours[k] for k in ("sequences", "mlm_loss", "nsp_loss")), out)
    out = run([bertpre, "train", cfg, "--set", f"train.data={shards}", "--set", f"train.eval_data={shards}",
               "--set", "train.steps=2", "--set", "train.checkpoint_dir=", "--set", "train.metrics_file="]).stdout
    expect("train.data and train.eval_data both the prep directory: trains on train-*, evaluates eval-* (all rows)",
           f"eval: 1 shard of {shards}" in out and f"eval | {ours['sequences']} sequences of {shards}" in out, out)

    weights = os.path.join(tmp, "imported")
    run([bertpre, "import", hf, "--out", weights])
    imported, _ = eval_json(weights, "--data", eval_shard, "--micro-batch", B)
    expect("a weights-only checkpoint (import of the export), shape from the shards: the same numbers",
           all(imported[k] == ours[k] for k in ("mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy")),
           (imported, ours))

    # Rows longer than the model's position table: refused before any row is read (they would
    # read the parameters stored after the table as positions), naming both lengths, whether
    # the length comes from the shards (weights-only) or from the checkpoint's training run.
    long_shards = os.path.join(tmp, "shards-long")
    run([bertpre, "prep", "--tokenizer", spm, "--output", long_shards, "--format", "lines", "--seq-length",
         2 * S, "--max-predictions", P, "--eval-fraction", 0.1, "--dupe-factor", 1, "--no-progress", corpus])
    long_eval = os.path.join(long_shards, "eval-00000.hdf5")
    # The --json file of an earlier evaluation stays as it was when this one fails.
    for what, ckpt, why in (("weights-only", weights, f"max_position_embeddings = {S}"),
                            ("trained", root, f"sequence length {2 * S}, expected {S}")):
        json_out = os.path.join(tmp, f"long-{what}.json")
        earlier = json.dumps({"checkpoint": "earlier", "data": "earlier", "sequences": 1, "masked_positions": 1}) + "\n"
        with open(json_out, "w") as f:  # an earlier result: the only file besides a new one that --json replaces
            f.write(earlier)
        p = run([bertpre, "eval", ckpt, "--data", long_eval, "--json", json_out], check=False)
        with open(json_out) as f:
            kept = f.read() == earlier
        leftovers = [n for n in os.listdir(tmp) if n.startswith(".tmp-")]
        expect(f"{what} checkpoint of {S} positions on rows of {2 * S} tokens: exit 1 naming both lengths, "
               "the earlier --json result unchanged, no temporary file left",
               p.returncode == 1 and str(2 * S) in p.stderr and why in p.stderr and kept and not leftovers,
               f"exit {p.returncode}, kept {kept}, left {leftovers}\n{p.stdout}{p.stderr}")

    if checks.features(bertpre)["emu"]:
        emu, _ = eval_json(root, "--data", eval_shard, "--batches", 2, "--backend", "cuda-emu", "--precision", "fp32")
        cpu, _ = eval_json(root, "--data", eval_shard, "--batches", 2)
        expect(f"cuda-emu fp32 vs cpu, 2 batches: losses within {TOL:g}, correct counts within 1",
               emu["backend"] == "cuda-emu" and all(rel(emu[k], cpu[k]) <= TOL for k in ("mlm_loss", "nsp_loss"))
               and all(abs(emu[k] - cpu[k]) <= 1 for k in ("mlm_correct", "nsp_correct")), (emu, cpu))
        small = os.path.join(tmp, "rows-13.hdf5")
        emu, _ = eval_json(root, "--data", small, "--micro-batch", 5, "--backend", "cuda-emu", "--precision", "fp32")
        against_reference("cuda-emu fp32, 13 rows at micro-batch 5 (5 + 5 + 3)", emu, reference(hf, small))
    else:
        print("skip: cuda-emu case (this build has no CUDA emulation)")

    # Rows without a masked position: the MLM numbers are undefined, and said to be.
    small, unmasked = os.path.join(tmp, "rows-13.hdf5"), os.path.join(tmp, "unmasked.hdf5")
    with h5py.File(small, "r") as f, h5py.File(unmasked, "w") as g:
        for k in f.keys():
            v = np.asarray(f[k])
            g.create_dataset(k, data=np.zeros_like(v) if k in ("masked_lm_positions", "masked_lm_ids") else v)
    got, out = eval_json(root, "--data", unmasked)
    expect("rows without a masked position: 'no masked positions' printed (no MLM loss or accuracy), JSON "
           "mlm_loss, mlm_accuracy and mlm_baseline_accuracy null, the NSP numbers there",
           "no masked positions" in out and "mlm loss 0.0000" not in out and got["masked_positions"] == 0 and
           got["mlm_loss"] is None and got["mlm_accuracy"] is None and got["mlm_baseline_accuracy"] is None and
           got["nsp_loss"] > 0 and got["sequences"] == 13, out + json.dumps(got))
    # A micro-batch larger than the rows: memory for the 13 rows, not for 2^20 sequences.
    big, out = eval_json(root, "--data", small, "--micro-batch", 1 << 20)
    five, _ = eval_json(root, "--data", small, "--micro-batch", 5)
    expect(f"--micro-batch 2^20 on 13 rows: micro-batch 13 used and said, one batch, losses within {TOL:g} of "
           "micro-batch 5's", "micro-batch 13 (the rows a rank evaluates; 1048576 asked)" in out and
           big["micro_batch_size"] == 13 and big["batches"] == 1 and
           all(rel(big[k], five[k]) <= TOL for k in ("mlm_loss", "nsp_loss")), out + json.dumps(big))

    # MLM only: no NSP number anywhere, and the export is a BertForMaskedLM that agrees.
    root_mlm, metrics_mlm = os.path.join(tmp, "ckpt-mlm"), os.path.join(tmp, "metrics-mlm.jsonl")
    trained = run([bertpre, "train", cfg, "--set", "train.objective=mlm", "--set", "train.steps=10",
                   "--set", f"train.checkpoint_dir={root_mlm}", "--set", f"train.metrics_file={metrics_mlm}"]).stdout
    with open(metrics_mlm) as f:
        lines_mlm = [json.loads(line) for line in f]
    mlm_json, out = eval_json(root_mlm, "--data", eval_shard)
    step_lines = [line for line in trained.splitlines() if line.startswith(("step ", "eval | ", "  held out"))]
    expect("MLM only: the plan says BertForMaskedLM; no step, eval or held-out line, metrics line or eval --json "
           "field mentions NSP; eval --json says objective mlm",
           "objective mlm (BertForMaskedLM: no pooler, no NSP head)" in trained and len(step_lines) >= 3 and
           not any("nsp" in line.lower() for line in step_lines + out.splitlines()) and
           not any(k.startswith("nsp") for line in lines_mlm for k in line) and
           not any(k.startswith("nsp") for k in mlm_json) and mlm_json.get("objective") == "mlm",
           "\n".join(step_lines) + out + json.dumps(mlm_json))
    hf_mlm = os.path.join(tmp, "hf-mlm")
    run([bertpre, "export", root_mlm, "--out", hf_mlm])
    model, info = transformers.AutoModelForMaskedLM.from_pretrained(hf_mlm, output_loading_info=True)
    expect("MLM only: the export loads with AutoModelForMaskedLM as BertForMaskedLM, no missing or unexpected "
           "keys", type(model).__name__ == "BertForMaskedLM" and model.config.architectures == ["BertForMaskedLM"]
           and not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info)
    against_reference("MLM only, one pass", mlm_json, reference(hf_mlm, eval_shard, mlm_only=True))

    bad = os.path.join(tmp, "no-such-dir", "out.json")
    p = run([bertpre, "eval", root, "--data", eval_shard, "--json", bad], check=False)
    expect("--json into a missing directory: exit 1 naming the file, nothing evaluated",
           p.returncode == 1 and bad in p.stderr and "eval |" not in p.stdout, p.stdout + p.stderr)
    missing = os.path.join(tmp, "no-such-shards")
    p = run([bertpre, "eval", root, "--data", missing], check=False)
    expect("missing shards: exit 1 naming them", p.returncode == 1 and missing in p.stderr, p.stderr)

sys.exit(checks.exit_status())

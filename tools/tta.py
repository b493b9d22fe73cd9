#!/usr/bin/env python3
"""Time to accuracy: bertpre against PyTorch + transformers on the same shards, same recipe.

    tools/tta.py corpus DIR                 stages the corpus (see below) into DIR
    tools/tta.py run --corpus DIR --out OUT [--backend cuda|cpu] [--size small|base|toy]
                 [--steps N] [--eval-every N] [--compile] [--second-seed] [--bertpre PATH]
                 [--objective mlm+nsp|mlm] [--packing pairs|full-sentences|doc-sentences|contiguous]

`run` does, in OUT:
  1. trains a SentencePiece tokenizer on the corpus (`bertpre tokenizer train`) and writes
     shards with `bertpre prep` (sequences of --seq tokens, a share of whole documents held
     out in an eval shard); the corpus size in tokens is the count prep prints;
  2. trains with `bertpre train` (FP16 with dynamic loss scaling on cuda, FP32 on cpu), with
     train.eval_every: held-out masked-LM accuracy and loss every --eval-every steps, the
     evaluation left off the clock;
  3. trains transformers.BertForPreTraining on the same shards, read with h5py as NVIDIA's
     `pretraining_dataset` reads them (labels at the masked positions, -1 elsewhere), under
     torch.autocast FP16 with torch.amp.GradScaler on cuda (FP32 on cpu): the same model
     config, dropout, initialisation scheme (normal(0, initializer_range) weights, zero
     biases, LayerNorm 1/0, zero padding row: transformers' own init is this scheme), batch,
     sequence length, AdamW (PyTorch's fused implementation on cuda; decay 0.01 except biases
     and LayerNorm, betas 0.9/0.999, eps 1e-8, gradients clipped to global norm 1), warmup
     then linear decay counted in applied steps (a step the scaler skips is retried at the
     same rate, as bertpre does), the objective MLM mean over masked positions + NSP mean;
     with --objective mlm both sides train the masked LM alone (bertpre's train.objective mlm,
     transformers.BertForMaskedLM) on MLM-only shards (prep --packing, full-sentences unless
     --packing says otherwise);
     evaluated over the same eval rows at the same steps, off the clock (synchronised);
     --second-seed repeats it with another seed (the noise floor), --compile adds a
     torch.compile run (its compilation counted in its wall time, and reported apart);
  4. writes one JSON line per evaluation for each run (OUT/RUN.jsonl: step, wall_s,
     train_loss, eval_accuracy, eval_loss, eval_nsp_loss, n_pred), a plot (OUT/tta.png:
     held-out accuracy against wall time and against step, every run) and OUT/summary.json.

The MLM head of the PyTorch runs is applied at the masked positions only (model.bert, a gather
of the masked rows, model.cls), the work bertpre does and NVIDIA's BERT does; a padded slot
of masked_lm_positions points at [CLS], whose label is -1, so the shapes stay fixed.

Accuracy is MLPerf's: correct argmax predictions over the masked positions present.
target_accuracy is PyTorch eager's final held-out accuracy; X_seconds_to_target is the first
wall time at which run X's held-out accuracy is >= the target (null if never).

`corpus` stages the corpus for a machine without it (tools/gpu_suite.sh bundle): the English
reStructuredText sources of linux-doc-6.1 (.rst.gz, as installed) and the .rst.txt sources of
Python 3.11's documentation (python3.11-doc, gzipped), both installed by tools/setup.sh.
"""
import argparse
import contextlib
import glob
import gzip
import json
import math
import os
import shutil
import time

import common

PYTHON_DOC = "/usr/share/doc/python3.11/html/_sources"
# Model sizes (vocabulary, layers, ...) and their recipe. small: sized for a plateau within
# a few minutes per run on one H100; base: BERT-base; toy: the CPU run of the tests.
SIZES = {
    "base": dict(model=common.MODELS["base"], seq=128, predictions=20, batch=256, steps=3000, eval_every=250,
                 eval_batches=12, lr=1e-3),
    "small": dict(model=common.MODELS["small"], seq=128, predictions=20, batch=256, steps=3000, eval_every=250,
                  eval_batches=12, lr=2e-3),
    "toy": dict(model=common.MODELS["toy"], seq=64, predictions=10, batch=16, steps=24, eval_every=8, eval_batches=4,
                lr=5e-3),
}
WARMUP, WEIGHT_DECAY, BETAS, EPS, CLIP = 0.1, 0.01, (0.9, 0.999), 1e-8, 1.0
M = common.Messages("tta")
say, fail = M.say, M.fail


# ---------------------------------------------------------------------------------------------
# corpus


def stage_corpus(out):
    root = common.linux_doc(M)
    if not os.path.isdir(PYTHON_DOC):
        fail(f"{PYTHON_DOC} is missing: tools/setup.sh installs python3.11-doc")
    n = 0
    for path in (p for i in common.linux_doc_inputs() for p in common.walk_inputs(i, "*.rst.gz")):
        dst = os.path.join(out, "linux-doc", os.path.relpath(path, root))
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(path, dst)
        n += 1
    for path in sorted(glob.glob(os.path.join(PYTHON_DOC, "**", "*.rst.txt"), recursive=True)):
        dst = os.path.join(out, "python-doc", os.path.relpath(path, PYTHON_DOC) + ".gz")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(path, "rb") as src, gzip.open(dst, "wb", compresslevel=9) as f:
            shutil.copyfileobj(src, f)
        n += 1
    size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(out, "**", "*"), recursive=True)
               if os.path.isfile(p))
    say(f"staged {n} documents in {out} ({size / 1e6:.1f} MB gzipped)")


# ---------------------------------------------------------------------------------------------
# data: tokenizer, shards, and the shards read as NVIDIA's pretraining_dataset reads them


def packing(args):
    """The shards' rows: --packing, else NSP pairs for mlm+nsp and RoBERTa's full sentences for mlm."""
    return args.packing or ("full-sentences" if args.objective == "mlm" else "pairs")


def read_shards(pattern):
    """The shards' rows as NVIDIA's pretraining_dataset holds them (numpy arrays, file order)."""
    import h5py
    import numpy as np
    files = sorted(glob.glob(pattern))
    if not files:
        fail(f"no shards match {pattern}")
    keys = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
            "next_sentence_labels")
    parts = {k: [] for k in keys}
    for path in files:
        with h5py.File(path, "r") as f:
            for k in keys:
                parts[k].append(np.asarray(f[k][:]))
    return {k: np.concatenate(v) for k, v in parts.items()}


def batch_tensors(rows, idx, device):
    """One batch as NVIDIA's pretraining_dataset.__getitem__ builds it: masked_lm_labels is -1
    everywhere but at the masked positions (up to the first zero of masked_lm_positions)."""
    import torch
    t = {k: torch.from_numpy(v[idx].astype("int64")) for k, v in rows.items()}
    pos, ids = t["masked_lm_positions"], t["masked_lm_ids"]
    present = torch.cumprod((pos != 0).long(), dim=1).bool()
    labels = torch.full_like(t["input_ids"], -1)
    b, p = present.nonzero(as_tuple=True)
    labels[b, pos[b, p]] = ids[b, p]
    out = {"input_ids": t["input_ids"], "attention_mask": t["input_mask"], "token_type_ids": t["segment_ids"],
           "masked_lm_labels": labels, "masked_lm_positions": pos, "next_sentence_labels": t["next_sentence_labels"]}
    return {k: v.to(device, non_blocking=True) for k, v in out.items()}


# ---------------------------------------------------------------------------------------------
# the runs


def model_config(size):
    return common.model_config(size["model"], size["seq"])


def schedule_lr(peak, applied_before, steps):
    """bertpre's linear schedule (engine/schedule.h, NVIDIA's counting): warmup, linear decay."""
    progress = (applied_before + 1) / steps
    if progress < WARMUP:
        return peak * progress / WARMUP
    return peak * (1.0 - (progress - WARMUP) / (1.0 - WARMUP))


def bertpre_config(args, size, data, metrics):
    arch = "BertForMaskedLM" if args.objective == "mlm" else "BertForPreTraining"
    return {"model": dict(model_config(size), architectures=[arch], model_type="bert"),
            "train": {"objective": args.objective, "backend": args.backend, "precision": "fp16" if args.backend == "cuda" else "fp32",
                      "seed": args.seed, "micro_batch_size": args.batch, "seq_length": size["seq"],
                      "max_predictions_per_seq": size["predictions"], "steps": args.steps,
                      "optimizer": "adamw", "learning_rate": args.lr, "lr_schedule": "linear",
                      "warmup_proportion": WARMUP, "weight_decay": WEIGHT_DECAY, "beta1": BETAS[0],
                      "beta2": BETAS[1], "eps": EPS, "max_grad_norm": CLIP, "log_every": args.eval_every,
                      "eval_every": args.eval_every, "eval_batches": args.eval_batches,
                      **common.data_paths(data, metrics)}}


def run_bertpre(args, size, data, work, log):
    metrics = os.path.join(work, "bertpre-metrics.jsonl")
    cfg = bertpre_config(args, size, data, metrics)
    path = os.path.join(work, "bertpre.json")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
    if os.path.exists(metrics):
        os.remove(metrics)
    say(f"bertpre train {path}")
    common.run_logged([args.bertpre, "train", path], log, M)
    lines = [json.loads(l) for l in open(metrics) if l.strip()]
    train = {l["step"]: l for l in lines if not l.get("eval")}
    records = []
    for e in (l for l in lines if l.get("eval")):
        t = train.get(e["step"])
        if t is None:
            fail(f"{metrics}: eval line at step {e['step']} has no log line at that step")
        record = {"step": e["step"], "wall_s": e["elapsed_s"], "train_loss": t["mlm_loss"] + t.get("nsp_loss", 0.0),
                  "eval_accuracy": e["mlm_accuracy"], "eval_loss": e["mlm_loss"], "n_pred": e["n_pred"]}
        if "nsp_loss" in e:  # none without the NSP head
            record["eval_nsp_loss"] = e["nsp_loss"]
        records.append(record)
    return records, {}


def run_torch(args, size, data, seed, compile_model):
    import numpy as np
    import torch
    import transformers
    dev = torch.device("cuda" if args.backend == "cuda" else "cpu")
    amp = args.backend == "cuda"
    torch.manual_seed(seed)
    config = transformers.BertConfig(**model_config(size))
    nsp_head = args.objective != "mlm"
    kind = transformers.BertForPreTraining if nsp_head else transformers.BertForMaskedLM
    model = kind(config).to(dev)
    model.train()
    params = dict(model.named_parameters())
    no_decay = [p for n, p in params.items() if "LayerNorm" in n or n.endswith("bias")]
    decay = [p for n, p in params.items() if not ("LayerNorm" in n or n.endswith("bias"))]
    fused = {"fused": True} if dev.type == "cuda" else {}  # PyTorch's fused AdamW is CUDA's
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=BETAS, eps=EPS, **fused)
    scaler = torch.amp.GradScaler("cuda") if amp else None  # FP32 on the CPU: no loss scaling
    ce = torch.nn.CrossEntropyLoss(ignore_index=-1)

    def autocast():
        return torch.autocast("cuda", dtype=torch.float16) if amp else contextlib.nullcontext()

    def losses(m, b):
        seq = m.bert(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                     token_type_ids=b["token_type_ids"])
        hidden = seq[0]
        pos = b["masked_lm_positions"]
        rows = hidden.gather(1, pos[:, :, None].expand(-1, -1, hidden.shape[-1]))
        labels = b["masked_lm_labels"].gather(1, pos)
        if nsp_head:
            scores, nsp = m.cls(rows, seq[1])
            nsp_loss = ce(nsp.float(), b["next_sentence_labels"])
        else:  # BertForMaskedLM: no pooler, no NSP head
            scores, nsp_loss = m.cls(rows), torch.zeros((), device=hidden.device)
        mlm = ce(scores.float().flatten(0, 1), labels.flatten())
        correct = ((scores.argmax(-1) == labels) & (labels >= 0)).sum()
        return mlm, nsp_loss, correct, (labels >= 0).sum()

    fwd = torch.compile(losses) if compile_model else losses
    train_rows, eval_rows = data["train_rows"], data["eval_rows"]
    n_train = len(train_rows["input_ids"])
    gen = np.random.default_rng(seed)
    order = gen.permutation(n_train)
    cursor = 0

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def evaluate():
        model.eval()
        mlm_sum = nsp_sum = 0.0
        correct = n_pred = 0
        with torch.no_grad(), autocast():
            for k in range(args.eval_batches):
                b = batch_tensors(eval_rows, np.arange(k * args.batch, (k + 1) * args.batch), dev)
                mlm, nsp, c, n = losses(model, b)
                mlm_sum += mlm.item() * n.item()
                nsp_sum += nsp.item() * args.batch
                correct += c.item()
                n_pred += n.item()
        model.train()
        result = {"eval_accuracy": correct / n_pred, "eval_loss": mlm_sum / n_pred, "n_pred": n_pred}
        if nsp_head:
            result["eval_nsp_loss"] = nsp_sum / (args.eval_batches * args.batch)
        return result

    records, applied, clock, window, first_step_s, step_times = [], 0, 0.0, [], None, []
    sync()
    t0 = time.perf_counter()
    while applied < args.steps:
        if cursor + args.batch > n_train:
            order, cursor = gen.permutation(n_train), 0
        b = batch_tensors(train_rows, order[cursor:cursor + args.batch], dev)
        cursor += args.batch
        for g in opt.param_groups:
            g["lr"] = schedule_lr(args.lr, applied, args.steps)
        opt.zero_grad(set_to_none=True)
        ts = time.perf_counter()
        with autocast():
            mlm, nsp, _, _ = fwd(model, b)
            loss = mlm + nsp
        skipped = False
        if scaler:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            before = scaler.get_scale()
            scaler.step(opt)
            scaler.update()
            skipped = scaler.get_scale() < before  # an overflow: the scaler skipped the update
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
        if not skipped:
            applied += 1
            window.append(loss.detach())
        if first_step_s is None:
            sync()
            first_step_s = time.perf_counter() - ts
        elif len(step_times) < 20:
            sync()
            step_times.append(time.perf_counter() - ts)
        if not skipped and (applied % args.eval_every == 0 or applied == args.steps):
            sync()
            clock += time.perf_counter() - t0
            record = {"step": applied, "wall_s": clock,
                      "train_loss": float(torch.stack(window).float().mean().item())}
            window = []
            record.update(evaluate())
            records.append(record)
            sync()
            t0 = time.perf_counter()
    step_times.sort()
    typical = step_times[len(step_times) // 2] if step_times else 0.0
    extra = {"first_step_s": first_step_s, "typical_step_s": typical}
    if compile_model:
        extra["compile_s"] = max(first_step_s - typical, 0.0)
    return records, extra


# ---------------------------------------------------------------------------------------------
# summary and plot


def seconds_to_target(records, target):
    return next((r["wall_s"] for r in records if r["eval_accuracy"] >= target), None)


def plot(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for name, records in runs.items():
        wall = [r["wall_s"] for r in records]
        step = [r["step"] for r in records]
        axes[0].plot(wall, [r["eval_accuracy"] for r in records], marker="o", label=name)
        axes[1].plot(step, [r["eval_accuracy"] for r in records], marker="o", label=name)
        axes[2].plot(step, [r["eval_loss"] for r in records], marker="o", label=name)
    for ax, (x, y) in zip(axes, [("wall seconds (evaluation off the clock)", "held-out MLM accuracy"),
                                 ("step", "held-out MLM accuracy"), ("step", "held-out MLM loss")]):
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def gpu_name(backend):
    if backend != "cuda":
        return "none (cpu backend)"
    import torch
    return torch.cuda.get_device_name(0)


def main_run(args):
    size = SIZES[args.size]
    for k, v in (("steps", "steps"), ("eval_every", "eval_every"), ("eval_batches", "eval_batches"),
                 ("batch", "batch"), ("lr", "lr")):
        if getattr(args, k) is None:
            setattr(args, k, size[v])
    if args.eval_every > args.steps:
        fail(f"--eval-every {args.eval_every} exceeds --steps {args.steps}")
    for c in args.corpus:
        if not os.path.exists(c):
            fail(f"corpus input {c} does not exist (tools/tta.py corpus DIR stages one)")
    if not os.access(args.bertpre, os.X_OK):
        fail(f"bertpre binary {args.bertpre} not found (build it: tools/build.sh)")
    # Every value before any work: OUT, the ranges, the documents the held-out share takes, and
    # what only bertpre checks (its dry run of the config, data left out).
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        fail(f"--out {args.out} is a file, not a folder")
    if args.seed < 0:
        fail(f"--seed {args.seed}: expected a whole number >= 0")
    if not (math.isfinite(args.lr) and args.lr > 0):
        fail(f"--lr {args.lr}: expected a rate above 0")
    if args.dupe_factor < 1:
        fail(f"--dupe-factor {args.dupe_factor} must be at least 1")
    common.check_eval_fraction(args.eval_fraction, sum(1 for c in args.corpus for _ in common.walk_inputs(c)), M)
    os.makedirs(args.out, exist_ok=True)
    common.check_config(args.bertpre, bertpre_config(args, size, {"shards": "", "tokenizer": ""}, ""),
                        os.path.join(args.out, ".check.json"), M, "the bertpre run's config")
    try:
        import h5py  # noqa: F401
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        fail(f"needs torch, transformers and h5py ({e}); tools/setup.sh installs them")
    if args.backend == "cuda" and not torch.cuda.is_available():
        fail("--backend cuda: no CUDA device is visible to PyTorch")
    if args.compile and not hasattr(torch, "compile"):
        fail(f"--compile: torch.compile is not in PyTorch {torch.__version__}")
    log = os.path.join(args.out, "tta.log")
    open(log, "w").close()
    t_prep = time.time()
    tokenizer, shards, corpus = common.prepare_corpus(
        args.bertpre, args.corpus, args.out, log, M, pattern=None, vocab=size["model"]["vocab_size"], seq=size["seq"],
        predictions=size["predictions"], eval_fraction=args.eval_fraction, dupe_factor=args.dupe_factor,
        packing=packing(args))
    say(f"corpus: {corpus['documents']} documents ({corpus['held_out_documents']} held out), "
        f"{corpus['tokens']} tokens; prep took {time.time() - t_prep:.0f} s")
    data = {"tokenizer": tokenizer, "shards": shards,
            "train_rows": read_shards(os.path.join(shards, "train-*.hdf5")),
            "eval_rows": read_shards(os.path.join(shards, "eval-*.hdf5"))}
    eval_rows = len(data["eval_rows"]["input_ids"])
    if args.eval_batches * args.batch > eval_rows:
        fail(f"--eval-batches {args.eval_batches} x batch {args.batch} exceeds the {eval_rows} held-out sequences "
             f"(raise --eval-fraction or lower --eval-batches)")

    runs, extras = {}, {}
    runs["bertpre"], extras["bertpre"] = run_bertpre(args, size, data, args.out, log)
    plan = [("pytorch", args.seed, False)]
    if args.second_seed:
        plan.append(("pytorch_seed2", args.seed + 1, False))
    if args.compile:
        plan.append(("pytorch_compile", args.seed, True))
    for name, seed, compiled in plan:
        kind = "BertForMaskedLM" if args.objective == "mlm" else "BertForPreTraining"
        say(f"{name}: transformers.{kind}, seed {seed}{', torch.compile' if compiled else ''}")
        runs[name], extras[name] = run_torch(args, size, data, seed, compiled)
    for name, records in runs.items():
        with open(os.path.join(args.out, f"{name}.jsonl"), "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        last = records[-1]
        say(f"{name}: step {last['step']}, {last['wall_s']:.1f} s, held-out accuracy {last['eval_accuracy']:.4f}, "
            f"loss {last['eval_loss']:.4f}")

    target = runs["pytorch"][-1]["eval_accuracy"]
    summary = {"gpu": gpu_name(args.backend), "backend": args.backend, "commit": common.commit(),
               "model": dict(model_config(size), size=args.size), "objective": args.objective,
               "packing": packing(args), "seq_length": size["seq"],
               "max_predictions_per_seq": size["predictions"], "batch": args.batch, "learning_rate": args.lr,
               "corpus": [os.path.abspath(c) for c in args.corpus], "corpus_tokens": corpus["tokens"],
               "corpus_documents": corpus["documents"], "held_out_documents": corpus["held_out_documents"],
               "eval_sequences": args.eval_batches * args.batch, "steps": args.steps, "eval_every": args.eval_every,
               "target_accuracy": target}
    for name, records in runs.items():
        summary[f"{name}_final_accuracy"] = records[-1]["eval_accuracy"]
        summary[f"{name}_final_loss"] = records[-1]["eval_loss"]
        summary[f"{name}_seconds"] = records[-1]["wall_s"]
        summary[f"{name}_seconds_to_target"] = seconds_to_target(records, target)
        for k, v in extras[name].items():
            summary[f"{name}_{k}"] = v
    for name in runs:
        if name != "pytorch" and summary[f"{name}_seconds_to_target"] is not None:
            summary[f"{name}_time_to_target_vs_pytorch"] = (summary[f"{name}_seconds_to_target"] /
                                                            summary["pytorch_seconds_to_target"])
    # Fidelity: bertpre's final accuracy less PyTorch eager's, beside two PyTorch seeds' difference.
    summary["bertpre_minus_pytorch_final_accuracy"] = summary["bertpre_final_accuracy"] - target
    if "pytorch_seed2" in runs:
        summary["pytorch_seed2_minus_pytorch_final_accuracy"] = summary["pytorch_seed2_final_accuracy"] - target
    if "pytorch_compile" in runs and summary["bertpre_seconds_to_target"] is not None \
            and summary["pytorch_compile_seconds_to_target"] is not None:
        summary["bertpre_time_to_target_vs_compile"] = (summary["bertpre_seconds_to_target"] /
                                                        summary["pytorch_compile_seconds_to_target"])
    common.write_json(os.path.join(args.out, "summary.json"), summary)
    plot(runs, os.path.join(args.out, "tta.png"))
    say(f"wrote {args.out}/summary.json, {args.out}/tta.png and one .jsonl per run")
    print(json.dumps({k: v for k, v in summary.items() if k not in ("model", "corpus")}, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("corpus", help="stage linux-doc and Python's documentation sources into DIR")
    c.add_argument("dir")
    r = sub.add_parser("run", help="prepare the shards, train both sides, write the summary and plot")
    r.add_argument("--corpus", nargs="+", required=True, help="text files or folders (gzip or plain)")
    r.add_argument("--out", required=True)
    r.add_argument("--backend", choices=["cuda", "cpu"], default="cuda")
    r.add_argument("--size", choices=sorted(SIZES), default="small")
    r.add_argument("--bertpre", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                     "bertpre"))
    r.add_argument("--steps", type=int)
    r.add_argument("--eval-every", type=int)
    r.add_argument("--eval-batches", type=int)
    r.add_argument("--batch", type=int)
    r.add_argument("--lr", type=float)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--eval-fraction", type=float, default=0.02, help="share of whole documents (files) held out")
    r.add_argument("--dupe-factor", type=int, default=3)
    r.add_argument("--compile", action="store_true", help="adds a torch.compile run")
    r.add_argument("--second-seed", action="store_true", help="adds PyTorch eager with seed + 1 (noise floor)")
    r.add_argument("--objective", choices=["mlm+nsp", "mlm"], default="mlm+nsp",
                   help="mlm: the masked LM alone on both sides (BertForMaskedLM)")
    r.add_argument("--packing", choices=["pairs", "full-sentences", "doc-sentences", "contiguous"],
                   help="the shards' rows (bertpre prep --packing); default pairs, full-sentences with --objective mlm")
    args = ap.parse_args()
    if args.command == "corpus":
        stage_corpus(args.dir)
    else:
        common.check_at_least_one(args, ("steps", "eval_every", "eval_batches", "batch"), M)
        if args.objective == "mlm+nsp" and packing(args) != "pairs":
            fail(f"--packing {packing(args)} makes MLM-only rows (no next-sentence pairs): give --objective mlm")
        common.need("tta", "h5py", "numpy", "torch", "transformers", "matplotlib")
        main_run(args)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The large-batch study: held-out MLM accuracy against the global batch, LAMB against AdamW and
LARS, at a fixed budget of training sequences (docs/LARGE-BATCH.md).

    tools/batch_study.py run --corpus PATH... --out OUT [--size toy|tiny|mini|small]
                         [--batches 32,64,128] [--optimizers lamb,adamw,lars] [--budget N]
                         [--sweep 0.5,2] [--time-limit S] [--backend cpu|cuda] [--bertpre PATH]
    tools/batch_study.py plot OUT           redraws the plots and the table from OUT/results.jsonl

`run` does, in OUT:
  1. the corpus machinery of tools/common.py (prepare_corpus, as tools/tta.py prepares its
     own): a SentencePiece tokenizer trained on the corpus and shards written by `bertpre
     prep`, a share of whole documents held out in an eval shard (done once; OUT/data.json
     records it with the corpus's fingerprint: its files' names and sizes);
  2. for every global batch G of the ladder and every optimizer, one `bertpre train` of
     steps = budget / G updates of G sequences (micro-batches of --micro-batch, accumulation
     G / micro-batch), so every run sees the same number of sequences:
       - learning rate: the optimizer's base rate at the base batch b (the ladder's smallest
         unless --base-batch), scaled by its rule, which bertpre applies itself
         (train.base_learning_rate, base_batch_size, lr_scaling):
           lamb   sqrt:   lr = base * sqrt(G / b)   (You et al. 2020, their BERT runs)
           adamw  sqrt:   lr = base * sqrt(G / b)   (the square-root rule for Adam, Malladi
                                                     et al. 2022; Hoffer et al. 2017)
           lars   linear: lr = base * G / b         (Goyal et al. 2017; You et al. 2017)
       - warmup: as the LAMB paper's BERT table, the warmup share of the steps doubles when the
         batch doubles (the same number of warmup steps at every batch):
         warmup_proportion = min(--warmup * G / b, --max-warmup);
       - the same linear decay to 0 after warmup (BERT's and the LAMB paper's schedule),
         weight decay, gradient clipping and data order for every run;
       - held-out MLM accuracy every eval_every = steps / --eval-points steps and after the
         last step (train.eval_every, over every row of the eval shard);
     --sweep M1,M2 adds, at the largest batch only, each optimizer at M x its base rate;
  3. after each run, one JSON line in OUT/results.jsonl (the setup of the run, the rate the
     rule gives and the peak rate bertpre logged, the held-out accuracy curve against the
     sequences seen, the final held-out numbers, the training seconds);
  4. the plots OUT/acc_vs_batch.png (final held-out accuracy against the global batch, one
     line per optimizer) and OUT/acc_vs_sequences.png (held-out accuracy against sequences
     seen, one curve per run), and OUT/table.md.

A ladder that was cut off (the study killed, the machine gone) resumes when `run` is given
the same OUT and the same setup: finished runs (a line in results.jsonl) are kept, the run
that was cut resumes from its newest complete checkpoint (`bertpre train --resume auto`;
checkpoints every eval_every steps), or starts again if it had written none. Another setup in
the same OUT, or another corpus than its shards were made from, is an error naming the field.
Every value is checked before any work (each run's config by `bertpre train --dry-run`), and
the setup is recorded (OUT/study.json) only once the shards are made: a refused or failed
first attempt does not hold OUT for the corrected command. --time-limit S stops the study after S seconds the
clean way: a run is not started when the last run's time would take it past the limit (every run
trains the same sequences), and a run still going at the limit gets SIGTERM (bertpre writes a
checkpoint and exits); the study exits 3 ("cut, rerun to resume"), so a long ladder runs as
several commands of bounded length.
"""
import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

RULES = {"lamb": "sqrt", "adamw": "sqrt", "lars": "linear"}
WEIGHT_DECAY, CLIP, SCHEDULE = 0.01, 1.0, "linear"
CUT_EXIT = 3


def tiny_model():
    """The demo's tiny model (configs/pretrain-tiny.json)."""
    with open(os.path.join(HERE, "..", "configs", "pretrain-tiny.json")) as f:
        cfg = json.load(f)
    return dict(cfg["model"]), cfg["train"]["seq_length"], cfg["train"]["max_predictions_per_seq"]


def sizes():
    tiny, tiny_seq, tiny_pred = tiny_model()
    toy = common.model_config(common.MODELS["toy"], 64)
    mini = dict(vocab_size=16000, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                intermediate_size=1024)
    small = common.MODELS["small"]
    big = lambda m: common.model_config(m, 128)  # noqa: E731
    # base: optimizer -> base rate at the ladder's base batch (the first of `batches`)
    return {
        "toy": dict(model=toy, seq=64, predictions=10, batches=[16, 32], budget=512, micro=16, eval_points=2,
                    base={"lamb": 0.02, "adamw": 0.005, "lars": 1.0}, warmup=0.125, dupe_factor=1, eval_fraction=0.1),
        # the demo's model and corpus; AdamW's base rate is the demo's recipe (0.003 at 32)
        "tiny": dict(model=tiny, seq=tiny_seq, predictions=tiny_pred, batches=[32, 64, 128], budget=12800,
                     micro=32, eval_points=4, eval_batches=25, base={"lamb": 0.01, "adamw": 0.003, "lars": 0.25},
                     warmup=0.05,
                     dupe_factor=1, eval_fraction=0.02),
        "mini": dict(model=big(mini), seq=128, predictions=20, batches=[256, 1024, 4096, 16384],
                     budget=4194304, micro=256, eval_points=8, base={"lamb": 0.004, "adamw": 0.002, "lars": 0.1},
                     warmup=0.005, log_every=32, dupe_factor=3, eval_fraction=0.02),
        "small": dict(model=big(small), seq=128, predictions=20, batches=[256, 1024, 4096, 16384],
                      budget=4194304, micro=256, eval_points=8, base={"lamb": 0.004, "adamw": 0.002, "lars": 0.1},
                      warmup=0.005, log_every=32, dupe_factor=3, eval_fraction=0.02),
    }


M = common.Messages("batch_study")
say, fail = M.say, M.fail


def number_list(text, what, kind):
    """Comma-separated positive numbers: whole ones, at least one (kind int), or finite ones (float)."""
    words = "whole numbers" if kind is int else "numbers"
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        fail(f"{what} {text!r}: expected comma-separated {words}")
    if (kind is int and not values) or any(not 0 < v < math.inf for v in values):
        fail(f"{what} {text!r}: expected positive {words}")
    return values


# ---------------------------------------------------------------------------------------------
# the plan: runs, their learning rates, warmup and steps


def scaled_lr(base, rule, batch, base_batch):
    return base * (math.sqrt(batch / base_batch) if rule == "sqrt" else batch / base_batch)


def plan(setup):
    """Every run of the study, in the order they run: the ladder, then the sweep."""
    runs = []
    b = setup["base_batch"]
    largest = max(setup["batches"])

    def add(opt, g, mult):
        steps = setup["budget"] // g
        warmup = min(setup["warmup"] * g / b, setup["max_warmup"])
        base = setup["base_lr"][opt] * mult
        points = min(setup["eval_points"], steps)
        run = {"key": f"{opt}-b{g}" + (f"-x{mult:g}" if mult != 1 else ""), "optimizer": opt,
               "global_batch": g, "micro_batch": setup["micro"], "accumulation": g // setup["micro"],
               "steps": steps, "sequences": steps * g, "lr_rule": RULES[opt], "base_lr": base,
               "base_batch": b, "lr_multiplier": mult, "peak_lr": scaled_lr(base, RULES[opt], g, b),
               "warmup_proportion": warmup, "warmup_steps": warmup * steps, "schedule": SCHEDULE,
               "eval_every": steps // points, "log_every": max(1, min(steps // points, setup["log_every"]))}
        runs.append(run)

    for g in setup["batches"]:
        for opt in setup["optimizers"]:
            add(opt, g, 1.0)
    for mult in setup["sweep"]:
        for opt in setup["optimizers"]:
            add(opt, largest, mult)
    return runs


def check_setup(setup):
    for g in setup["batches"]:
        if g % setup["micro"]:
            fail(f"--batches: {g} is not a multiple of --micro-batch {setup['micro']}")
        if setup["budget"] % g:
            fail(f"--budget {setup['budget']} is not a multiple of the batch {g} (every run sees the same sequences)")
    if setup["budget"] // max(setup["batches"]) < 2:
        fail(f"--budget {setup['budget']} gives fewer than 2 steps at the batch {max(setup['batches'])}")
    if len(set(setup["batches"])) != len(setup["batches"]) or setup["batches"] != sorted(setup["batches"]):
        fail(f"--batches {setup['batches']}: expected distinct batches in rising order")
    if not setup["optimizers"] or len(set(setup["optimizers"])) != len(setup["optimizers"]):
        fail(f"--optimizers {','.join(setup['optimizers'])}: expected distinct names of {', '.join(RULES)}")
    for opt in setup["optimizers"]:
        if opt not in RULES:
            fail(f"--optimizers: {opt!r} is not one of {', '.join(RULES)}")


def train_config(setup, run, data, rundir):
    t = {"backend": setup["backend"], "precision": "fp16" if setup["backend"] == "cuda" else "fp32",
         "seed": setup["seed"], "micro_batch_size": run["micro_batch"], "global_batch_size": run["global_batch"],
         "seq_length": setup["seq"], "max_predictions_per_seq": setup["predictions"], "steps": run["steps"],
         "optimizer": run["optimizer"], "base_learning_rate": run["base_lr"], "base_batch_size": run["base_batch"],
         "lr_scaling": run["lr_rule"], "lr_schedule": SCHEDULE, "warmup_proportion": run["warmup_proportion"],
         "weight_decay": WEIGHT_DECAY, "max_grad_norm": CLIP, "log_every": run["log_every"],
         "eval_every": run["eval_every"], "eval_batches": setup["eval_batches"],
         "dynamic_masking": setup["dynamic_masking"],
         **common.data_paths(data, os.path.join(rundir, "metrics.jsonl")),
         "checkpoint_dir": os.path.abspath(os.path.join(rundir, "checkpoints")),
         "checkpoint_every": run["eval_every"], "keep_checkpoints": 1}
    return {"model": dict(setup["model"], architectures=["BertForPreTraining"], model_type="bert"), "train": t}


# ---------------------------------------------------------------------------------------------
# running one run, resuming a cut one



def read_metrics(path):
    """The metrics file's lines, a resumed run's repeated steps taken from the resumed part
    (the lines after the checkpoint were written again by the resumed run)."""
    train, evals = {}, {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                fail(f"{path}:{n}: not JSON ({e})")
            (evals if rec.get("eval") else train)[rec["step"]] = rec
    return [train[k] for k in sorted(train)], [evals[k] for k in sorted(evals)]


def fill_eval(args, cfg, step, run, log):
    """A run cut after it wrote the checkpoint of an evaluation step but before that evaluation's
    line: the resumed run starts after that step and would not evaluate it, so `bertpre eval`
    evaluates the checkpoint (the same evaluation, docs/TRAINING.md "Evaluation") and its numbers go into
    the metrics file as that step's eval line."""
    t = cfg["train"]
    if step % run["eval_every"] and step != run["steps"]:
        return
    metrics = t["metrics_file"]
    _, evals = read_metrics(metrics) if os.path.exists(metrics) else ([], [])
    if any(e["step"] == step for e in evals):
        return
    result = os.path.join(os.path.dirname(metrics), f"eval-step-{step}.json")
    cmd = [args.bertpre, "eval", os.path.join(t["checkpoint_dir"], f"step-{step:09d}"), "--data", t["eval_data"],
           "--json", result]
    if t["eval_batches"]:
        cmd += ["--batches", str(t["eval_batches"])]
    common.run_logged(cmd, log, M)
    with open(result) as f:
        r = json.load(f)
    line = {"eval": True, "step": step, "sequences": r["sequences"], "n_pred": r["masked_positions"],
            "mlm_loss": r["mlm_loss"], "nsp_loss": r["nsp_loss"], "mlm_accuracy": r["mlm_accuracy"],
            "nsp_accuracy": r["nsp_accuracy"], "mlm_baseline_accuracy": r["mlm_baseline_accuracy"],
            "elapsed_s": None, "from": "bertpre eval of the checkpoint"}
    with open(metrics, "a") as f:
        f.write(json.dumps(line) + "\n")
    say(f"{run['key']}: the evaluation at step {step} was cut off; bertpre eval of its checkpoint filled it in")


class Stop:
    """SIGTERM/SIGINT to the study, or --time-limit: the running bertpre gets SIGTERM (it writes
    a checkpoint and exits) and the study stops after it."""
    def __init__(self, limit):
        self.deadline = time.monotonic() + limit if limit else None
        self.requested = False
        self.child = None
        signal.signal(signal.SIGTERM, self.handler)
        signal.signal(signal.SIGINT, self.handler)

    def handler(self, signum, frame):
        self.requested = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    def expired(self):
        return self.deadline is not None and time.monotonic() >= self.deadline


def train_run(args, setup, run, data, out, stop):
    """Runs (or resumes) one run; returns its result record, or None when it was cut."""
    rundir = os.path.join(out, "runs", run["key"])
    os.makedirs(rundir, exist_ok=True)
    cfg = train_config(setup, run, data, rundir)
    cfg_path = os.path.join(rundir, "config.json")
    common.write_json(cfg_path, cfg)
    ckdir = cfg["train"]["checkpoint_dir"]
    metrics = cfg["train"]["metrics_file"]
    _, resumed = common.newest_checkpoint(ckdir)
    cmd = [args.bertpre, "train", cfg_path]
    log = os.path.join(rundir, "train.log")
    if resumed is not None:
        cmd += ["--resume", "auto"]
        say(f"{run['key']}: resuming from its checkpoint at step {resumed} of {run['steps']}")
        fill_eval(args, cfg, resumed, run, log)
    else:
        # a run cut before its first checkpoint starts again from nothing
        for p in (metrics, ckdir):
            if os.path.isdir(p):
                shutil.rmtree(p)
            elif os.path.exists(p):
                os.remove(p)
        say(f"{run['key']}: {run['steps']} steps of {run['global_batch']} ({run['micro_batch']} x "
            f"{run['accumulation']}), lr {run['peak_lr']:.4g} ({run['lr_rule']} from {run['base_lr']:g} at "
            f"{run['base_batch']}), warmup {run['warmup_proportion']:.4g}")
    t0 = time.monotonic()
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        child = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
        stop.child = child
        while True:
            try:
                rc = child.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                if stop.expired() and not stop.requested:
                    say(f"--time-limit reached: stopping {run['key']} at a checkpoint")
                    stop.handler(signal.SIGTERM, None)
        stop.child = None
    if rc != 0:
        with open(log) as f:
            tail = f.read()[-2000:]
        fail(f"bertpre train {cfg_path} exited {rc}; its output is in {log}:\n{tail}")
    train, evals = read_metrics(metrics)
    if not train or train[-1]["step"] != run["steps"] or not evals or evals[-1]["step"] != run["steps"]:
        return None  # stopped at a checkpoint before its last step (SIGTERM): resumed next time
    peak = max(t["lr"] for t in train)
    final = evals[-1]
    return dict(run, commit=args.commit, config=os.path.relpath(cfg_path, out),
                resumed_from_step=resumed, peak_lr_logged=peak,
                final_accuracy=final["mlm_accuracy"], final_mlm_loss=final["mlm_loss"],
                final_nsp_accuracy=final.get("nsp_accuracy"), final_nsp_loss=final.get("nsp_loss"),
                eval_sequences=final["sequences"], n_pred=final["n_pred"],
                most_frequent_token_accuracy=final["mlm_baseline_accuracy"],
                curve=[{"step": e["step"], "sequences": e["step"] * run["global_batch"],
                        "eval_accuracy": e["mlm_accuracy"], "eval_loss": e["mlm_loss"]} for e in evals],
                train_seconds=train[-1]["elapsed_s"], wall_seconds_this_part=time.monotonic() - t0,
                seq_per_s=run["sequences"] / train[-1]["elapsed_s"] if train[-1]["elapsed_s"] else None)


# ---------------------------------------------------------------------------------------------
# results, plots, table


def load_results(out):
    path = os.path.join(out, "results.jsonl")
    results = {}
    if os.path.exists(path):
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        r = json.loads(line)
                    except json.JSONDecodeError as e:
                        fail(f"{path}:{n}: not JSON ({e}); remove the line to run that run again")
                    if not isinstance(r, dict) or not isinstance(r.get("key"), str):
                        fail(f"{path}:{n}: not a run's result (no 'key' naming the run); remove the line to run that "
                             "run again")
                    results[r["key"]] = r
    return results


def baseline(ax, runs):
    """Always predicting the most frequent masked token: the level the plots start from."""
    level = runs[0].get("most_frequent_token_accuracy")
    if level is not None:
        ax.axhline(level, color="gray", linestyle=":", linewidth=1, label="most frequent token")


def draw(out, results):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = list(results.values())
    opts = [o for o in RULES if any(r["optimizer"] == o for r in runs)]
    colors = {"lamb": "tab:blue", "adamw": "tab:orange", "lars": "tab:green"}
    setup = json.load(open(os.path.join(out, "study.json")))
    title = (f"{setup['size']} model, {setup['budget']:,} sequences per run, seq {setup['seq']}; "
             f"held-out MLM accuracy")

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for opt in opts:
        ladder = sorted((r for r in runs if r["optimizer"] == opt and r["lr_multiplier"] == 1),
                        key=lambda r: r["global_batch"])
        ax.plot([r["global_batch"] for r in ladder], [r["final_accuracy"] for r in ladder], marker="o",
                color=colors[opt], label=f"{opt} ({RULES[opt]} LR scaling)")
        sweep = [r for r in runs if r["optimizer"] == opt and r["lr_multiplier"] != 1]
        for r in sweep:
            ax.scatter([r["global_batch"]], [r["final_accuracy"]], marker="x", color=colors[opt])
            ax.annotate(f"x{r['lr_multiplier']:g}", (r["global_batch"], r["final_accuracy"]), fontsize=7,
                        xytext=(4, 0), textcoords="offset points")
    baseline(ax, runs)
    ax.set_xscale("log", base=2)
    batches = sorted({r["global_batch"] for r in runs})
    ax.set_xticks(batches)
    ax.set_xticklabels([f"{g // 1024}K" if g >= 1024 and g % 1024 == 0 else str(g) for g in batches])
    ax.minorticks_off()
    ax.set_xlabel("global batch (sequences)")
    ax.set_ylabel("final held-out MLM accuracy")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "acc_vs_batch.png"), dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = ["-", "--", ":", "-."]
    batches = sorted({r["global_batch"] for r in runs})
    for r in sorted(runs, key=lambda r: (r["optimizer"], r["global_batch"], r["lr_multiplier"])):
        style = styles[batches.index(r["global_batch"]) % len(styles)]
        label = f"{r['optimizer']} {r['global_batch']}" + (f" x{r['lr_multiplier']:g}" if r["lr_multiplier"] != 1
                                                              else "")
        ax.plot([c["sequences"] for c in r["curve"]], [c["eval_accuracy"] for c in r["curve"]], style,
                marker=".", color=colors[r["optimizer"]], alpha=0.5 if r["lr_multiplier"] != 1 else 1.0,
                label=label)
    baseline(ax, runs)
    ax.set_xlabel("sequences seen")
    ax.set_ylabel("held-out MLM accuracy")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "acc_vs_sequences.png"), dpi=90)
    plt.close(fig)


def table(results):
    lines = ["| optimizer | global batch | micro x accumulation | steps | peak lr (rule) | largest lr logged | "
             "warmup | held-out MLM acc | MLM loss | train s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    order = sorted(results.values(), key=lambda r: (list(RULES).index(r["optimizer"]), r["global_batch"],
                                                    r["lr_multiplier"]))
    for r in order:
        name = r["optimizer"] + (f" (x{r['lr_multiplier']:g})" if r["lr_multiplier"] != 1 else "")
        lines.append(f"| {name} | {r['global_batch']:,} | {r['micro_batch']} x {r['accumulation']} | {r['steps']:,} "
                     f"| {r['peak_lr']:.4g} | {r['peak_lr_logged']:.4g} | {r['warmup_proportion']:.3g} "
                     f"| {r['final_accuracy']:.4f} | {r['final_mlm_loss']:.3f} | {r['train_seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def finish(out, results):
    if not results:
        return
    draw(out, results)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(table(results))
    say(f"wrote {out}/acc_vs_batch.png, {out}/acc_vs_sequences.png and {out}/table.md")


# ---------------------------------------------------------------------------------------------


def main_run(args):
    size = sizes()[args.size]
    setup = {"size": args.size, "model": size["model"], "seq": size["seq"], "predictions": size["predictions"],
             "batches": number_list(args.batches, "--batches", int) if args.batches else size["batches"],
             "optimizers": [o for o in args.optimizers.split(",") if o] if args.optimizers else list(RULES),
             "budget": args.budget or size["budget"], "micro": args.micro_batch or size["micro"],
             "eval_points": args.eval_points or size["eval_points"],
             "eval_batches": args.eval_batches if args.eval_batches is not None else size.get("eval_batches", 0),
             "warmup": args.warmup if args.warmup is not None else size["warmup"], "max_warmup": args.max_warmup,
             "log_every": args.log_every or size.get("log_every", 1),
             "sweep": number_list(args.sweep, "--sweep", float) if args.sweep else [], "seed": args.seed,
             "backend": args.backend, "dynamic_masking": int(args.dynamic_masking),
             "corpus": [os.path.abspath(c) for c in args.corpus], "pattern": args.pattern,
             "eval_fraction": args.eval_fraction if args.eval_fraction is not None else size["eval_fraction"],
             "dupe_factor": args.dupe_factor or size["dupe_factor"]}
    setup["base_batch"] = args.base_batch or setup["batches"][0]
    setup["base_lr"] = dict(size["base"])
    for opt, value in ((o, getattr(args, f"base_lr_{o}")) for o in RULES):
        if value is not None:
            setup["base_lr"][opt] = value
    check_setup(setup)
    for c in setup["corpus"]:
        if not os.path.exists(c):
            fail(f"corpus input {c} does not exist")
    if not os.access(args.bertpre, os.X_OK):
        fail(f"bertpre binary {args.bertpre} not found (build it: tools/build.sh)")
    if args.time_limit is not None and not args.time_limit > 0:
        fail(f"--time-limit {args.time_limit} must be positive")
    if args.seed < 0:
        fail(f"--seed {args.seed}: expected a whole number >= 0")
    for opt, value in setup["base_lr"].items():
        if not (math.isfinite(value) and value > 0):
            fail(f"--base-lr-{opt} {value}: expected a rate above 0")
    fingerprint = common.corpus_fingerprint(setup["corpus"], setup["pattern"])
    common.check_eval_fraction(setup["eval_fraction"], fingerprint["files"], M)
    out = args.out
    if os.path.exists(out) and not os.path.isdir(out):
        fail(f"--out {out} is a file, not a folder")
    os.makedirs(out, exist_ok=True)
    # What only bertpre checks, for every run of the plan, before any work.
    for run in plan(setup):
        common.check_config(args.bertpre, train_config(setup, run, {"shards": "", "tokenizer": ""}, out),
                            os.path.join(out, ".check.json"), M, f"run {run['key']}'s config")
    study_path, data_path = os.path.join(out, "study.json"), os.path.join(out, "data.json")
    if os.path.exists(study_path) and os.path.exists(data_path):
        try:
            with open(study_path) as f:
                old = json.load(f)
            if not isinstance(old, dict):
                raise ValueError(f"a JSON {type(old).__name__}, not an object")
        except ValueError as e:
            fail(f"{study_path}: not a study's setup ({e}): restore it, or start the study in another --out")
        # the sweep only adds runs at the largest batch: it may change between commands; the
        # corpus's path may differ on another machine (its fingerprint is data.json's)
        for k in sorted((set(old) | set(setup)) - {"sweep", "corpus"}):
            if old.get(k) != setup.get(k):
                fail(f"{out} holds a study with another setup: {k} is {old.get(k)!r} there, {setup.get(k)!r} now "
                     f"(give the same options to resume it, or another --out)")

    stop = Stop(args.time_limit)  # --time-limit counts from here: the shards' preparation included
    args.commit = common.commit()  # the code this process runs, whatever the checkout does meanwhile

    # 1. the corpus, tokenizer and held-out shards, once (their paths kept relative to OUT, so
    # that OUT can move to another machine between the commands of a long ladder)
    if os.path.exists(data_path):
        try:
            with open(data_path) as f:
                data = json.load(f)
            made_from = data["fingerprint"]
        except (ValueError, KeyError, TypeError) as e:
            fail(f"{data_path}: not the record of the study's shards ({e!r}): remove it to make them again")
        if made_from != fingerprint:
            fail(f"--corpus: {out}'s shards were made from another corpus ({made_from['files']} files, "
                 f"{made_from['bytes']} bytes) than the one given ({fingerprint['files']} files, {fingerprint['bytes']} "
                 "bytes): give that corpus to resume the study, or another --out")
        for k in ("tokenizer", "shards"):
            data[k] = os.path.join(os.path.abspath(out), data[k])
        say(f"corpus: kept {data['shards']} ({data['documents']} documents, {data['held_out_documents']} held out)")
        if not os.path.exists(study_path):
            common.write_json(study_path, setup)
    else:
        log = os.path.join(out, "prep.log")
        open(log, "w").close()
        t = time.time()
        tokenizer, shards, corpus = common.prepare_corpus(
            args.bertpre, setup["corpus"], out, log, M, pattern=setup["pattern"], vocab=setup["model"]["vocab_size"],
            seq=setup["seq"], predictions=setup["predictions"], eval_fraction=setup["eval_fraction"],
            dupe_factor=setup["dupe_factor"], packing="pairs")
        data = dict(corpus, tokenizer=os.path.relpath(tokenizer, out), shards=os.path.relpath(shards, out),
                    fingerprint=fingerprint)
        # The setup is recorded once the study has started (its shards made): a refused or failed
        # attempt leaves nothing that holds OUT.
        common.write_json(study_path, setup)
        common.write_json(data_path, data)
        for k in ("tokenizer", "shards"):
            data[k] = os.path.join(os.path.abspath(out), data[k])
        say(f"corpus: {data['documents']} documents ({data['held_out_documents']} held out), {data['tokens']} "
            f"tokens; tokenizer and shards took {time.time() - t:.0f} s")

    # 2. the runs
    runs = plan(setup)
    results = load_results(out)
    cut, last_run_s = False, None
    for run in runs:
        if run["key"] in results:
            say(f"{run['key']}: finished earlier (held-out accuracy {results[run['key']]['final_accuracy']:.4f}), kept")
            continue
        # every run trains the same sequences: one that would not end before --time-limit, by the
        # last run's time, is not started (the next command starts it from the beginning: it
        # has no checkpoint yet)
        if stop.requested or stop.expired() or (
                stop.deadline is not None and last_run_s is not None and time.monotonic() + last_run_s > stop.deadline):
            cut = True
            break
        t_run = time.monotonic()
        result = train_run(args, setup, run, data, out, stop)
        last_run_s = time.monotonic() - t_run
        if result is None:
            cut = True
            break
        result["corpus_tokens"] = data["tokens"]
        with open(os.path.join(out, "results.jsonl"), "a") as f:
            f.write(json.dumps(result) + "\n")
        results[run["key"]] = result
        if not args.keep_checkpoints:
            shutil.rmtree(os.path.join(out, "runs", run["key"], "checkpoints"), ignore_errors=True)
        say(f"{run['key']}: held-out MLM accuracy {result['final_accuracy']:.4f} (loss {result['final_mlm_loss']:.3f}), "
            f"peak lr logged {result['peak_lr_logged']:.4g}, {result['train_seconds']:.0f} s of training")
    finish(out, results)
    if cut:
        say(f"cut after {len(results)} of {len(runs)} runs: run the same command again to resume")
        sys.exit(CUT_EXIT)
    print(table(results), end="")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="prepare the shards once, run (or resume) the ladder, plot")
    r.add_argument("--corpus", nargs="+", required=True, help="text files or folders (gzip or plain)")
    r.add_argument("--pattern", help="files to take inside the corpus folders, e.g. '*.rst.gz' (default all)")
    r.add_argument("--out", required=True)
    r.add_argument("--size", choices=["toy", "tiny", "mini", "small"], default="tiny")
    r.add_argument("--batches", help="global batches, comma-separated, rising (default: the size's ladder)")
    r.add_argument("--optimizers", help="comma-separated, of lamb, adamw, lars (default: all three)")
    r.add_argument("--budget", type=int, help="training sequences of every run")
    r.add_argument("--micro-batch", type=int)
    r.add_argument("--base-batch", type=int, help="the batch the base rates are for (default: the smallest)")
    for opt in RULES:
        r.add_argument(f"--base-lr-{opt}", type=float, help=f"{opt}'s base rate ({RULES[opt]} scaling)")
    r.add_argument("--warmup", type=float, help="warmup share of the steps at the base batch (doubles with the batch)")
    r.add_argument("--max-warmup", type=float, default=0.5, help="the warmup share is capped here")
    r.add_argument("--eval-points", type=int, help="held-out evaluations per run (every steps / N steps)")
    r.add_argument("--eval-batches", type=int, help="micro-batches of held-out rows evaluated (0: every row; "
                   "default: the size's)")
    r.add_argument("--log-every", type=int, help="steps between metrics lines (default 1 on the CPU sizes: the rate "
                   "of every step; 32 for mini and small, whose log line costs a device sync)")
    r.add_argument("--sweep", help="multipliers of the base rate tried at the largest batch, e.g. 0.5,2")
    r.add_argument("--seed", type=int, default=42)
    r.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    r.add_argument("--dynamic-masking", action="store_true", help="fresh masks every epoch (train.dynamic_masking)")
    r.add_argument("--eval-fraction", type=float, help="share of whole documents held out")
    r.add_argument("--dupe-factor", type=int)
    r.add_argument("--time-limit", type=float, help="stop at a checkpoint after this many seconds (exit 3)")
    r.add_argument("--keep-checkpoints", action="store_true", help="keep a finished run's last checkpoint")
    r.add_argument("--bertpre", default=os.path.join(HERE, "..", "build", "bertpre"))
    p = sub.add_parser("plot", help="redraw the plots and the table from OUT/results.jsonl")
    p.add_argument("out")
    args = ap.parse_args()
    common.need("batch_study", "matplotlib", *([] if args.command == "plot" else ["h5py", "numpy"]))
    if args.command == "plot":
        results = load_results(args.out)
        if not results:
            fail(f"{args.out}/results.jsonl holds no finished run")
        finish(args.out, results)
        print(table(results), end="")
        return
    common.check_at_least_one(args, ("budget", "micro_batch", "base_batch", "eval_points", "log_every",
                                     "dupe_factor"), M)
    for k in ("warmup", "max_warmup"):
        v = getattr(args, k)
        if v is not None and not 0 <= v <= 1:
            fail(f"--{k.replace('_', '-')} {v} must be in [0, 1]")
    main_run(args)


if __name__ == "__main__":
    main()

"""tools/batch_study.py end to end on the CPU at its toy size: one linux-doc subtree (process/,
10% of the documents held out), a budget of 512 sequences, global batches 16 and 32 (micro-batch
16: accumulation 1 and 2), LAMB and LARS (one optimizer of each scaling rule), cut twice and
resumed.

The ladder runs lamb-b16, lars-b16, lamb-b32, lars-b32. It is
  1. killed (SIGKILL to the study and bertpre at once) while lars-b16 runs, after its first
     checkpoint: results.jsonl then holds lamb-b16 alone;
  2. run again and stopped with SIGTERM while lamb-b32 runs (the study passes it on, bertpre
     writes a checkpoint and exits, the study exits 3): lars-b16 resumed from its checkpoint;
  3. run again to the end: lamb-b32 resumed, lars-b32 run.
Checked:
  - finished runs are kept: results.jsonl's earlier lines unchanged, one line per run, each
    run's resumed_from_step the step of the checkpoint found on disk at the cut;
  - the rules, computed here from the stated rule (not from the tool): steps = 512 / G,
    accumulation = G / 16, peak rate = base x sqrt(G / 16) for LAMB, base x G / 16 for LARS, warmup share =
    0.125 x G / 16; every learning rate bertpre logged (its metrics file, one line per step)
    equal to the linear warmup-decay schedule at that step with that peak and warmup (relative
    1e-9: both sides compute in double and the file keeps 17 digits), the largest one the
    peak (the warmup ends on a whole step);
  - every step 1..steps logged; evaluations every steps / 4 steps; the result's curve and final
    numbers are the metrics file's eval lines; accuracies in [0, 1];
  - the run resumed after SIGKILL: its held-out numbers at every evaluation bit for bit those
    of the same config trained without a cut (where the kill fell between a checkpoint and its
    evaluation's line, that point comes from `bertpre eval` of the checkpoint, which the study
    runs on resuming);
  - both plots are PNG files (signature, IHDR of a plausible size, decoded by Pillow);
    table.md has one row per run; `plot OUT` redraws them;
  - another setup in the same OUT (a different --budget) and a budget that is not a multiple of
    a batch are errors naming the field, before any work; so are --seed -1, a NaN base rate,
    --eval-fraction 0 or one that holds out no document, an OUT that is a file, a damaged
    study.json and a results line without its key (no traceback, no tokenizer or shards
    made); the corrected command runs in the OUT of a failed attempt (its tokenizer left, no
    study recorded), and another --corpus in a study's OUT is refused naming it.
usage: test_batch_study.py BATCH_STUDY_PY BERTPRE
"""
import json
import math
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time

import checks
from checks import expect
from data_fixtures import linux_doc, require

study, bertpre = sys.argv[1], os.path.abspath(sys.argv[2])
require(bertpre, "hdf5", "sentencepiece")
corpus = os.path.join(linux_doc(), "process")
with checks.needs("matplotlib and Pillow"):
    import matplotlib  # noqa: F401
    from PIL import Image

BUDGET, MICRO, BATCHES, OPTS = 512, 16, [16, 32], ["lamb", "lars"]
BASE = {"lamb": 0.02, "lars": 1.0}
# the rules as docs/LARGE-BATCH.md states them: LAMB's square root (You et al. 2020), LARS linear (Goyal et al.)
RULE = {"lamb": lambda g: math.sqrt(g / MICRO), "lars": lambda g: g / MICRO}
RULE_NAME = {"lamb": "sqrt", "lars": "linear"}
WARMUP, POINTS = 0.125, 4
ORDER = [f"{o}-b{g}" for g in BATCHES for o in OPTS]


def expected_lr(peak, warmup, steps, n):
    """The linear schedule with warmup, NVIDIA's counting (update n of steps, progress n / steps)."""
    p = n / steps
    if p < warmup:
        return peak * p / warmup
    return peak * (1 - (p - warmup) / (1 - warmup))


def command(out, budget=BUDGET):
    return [sys.executable, study, "run", "--size", "toy", "--corpus", corpus, "--out", out, "--bertpre", bertpre,
            "--batches", ",".join(map(str, BATCHES)), "--optimizers", ",".join(OPTS), "--budget", str(budget),
            "--micro-batch", str(MICRO), "--base-lr-lamb", str(BASE["lamb"]), "--base-lr-lars", str(BASE["lars"]),
            "--warmup", str(WARMUP), "--eval-points", str(POINTS), "--log-every", "1", "--eval-fraction", "0.1",
            "--dupe-factor", "1"]


def results(out):
    path = os.path.join(out, "results.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line for line in f if line.strip()]


def checkpoints(out, key):
    d = os.path.join(out, "runs", key, "checkpoints")
    if not os.path.isdir(d):
        return []
    return sorted(int(x[5:]) for x in os.listdir(d) if x.startswith("step-") and x[5:].isdigit()
                  and os.path.exists(os.path.join(d, x, "COMPLETE")))


def cut_during(out, key, sig, limit_s=150):
    """Starts the study, waits until run `key` has a complete checkpoint before its last step,
    then sends `sig` (to the whole process group for SIGKILL, to the study alone for SIGTERM).
    Returns (exit code, output, the checkpoint step seen, the results lines at the cut)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    p = subprocess.Popen(command(out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True, env=env)
    seen, t0 = None, time.monotonic()
    while p.poll() is None and time.monotonic() - t0 < limit_s:
        steps = checkpoints(out, key)
        if steps:
            seen = steps[-1]
            lines = results(out)
            if sig == signal.SIGKILL:
                os.killpg(p.pid, signal.SIGKILL)
            else:
                p.send_signal(sig)
            break
        time.sleep(0.02)
    else:
        lines = results(out)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    text = p.communicate()[0]
    return p.returncode, text, seen, lines


with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "study")
    t_start = time.monotonic()

    # 1. killed while lars-b16 runs
    rc, text, seen_kill, lines_kill = cut_during(out, "lars-b16", signal.SIGKILL)
    print(text)
    expect(f"cut 1: SIGKILL during lars-b16 after its checkpoint at step {seen_kill}",
           rc == -signal.SIGKILL and seen_kill is not None, (rc, text[-2000:]))
    expect("cut 1: results.jsonl holds lamb-b16 alone",
           [json.loads(x)["key"] for x in lines_kill] == ["lamb-b16"], lines_kill)
    if seen_kill is None:
        sys.exit(checks.exit_status())
    seen_kill = checkpoints(out, "lars-b16")[-1]  # the newest complete one (bertpre keeps 1)

    # 2. stopped with SIGTERM while lamb-b32 runs
    rc, text, seen_term, lines_term = cut_during(out, "lamb-b32", signal.SIGTERM)
    print(text)
    expect("cut 2: lamb-b16 kept, lars-b16 resumed from its checkpoint",
           "lamb-b16: finished earlier" in text and f"lars-b16: resuming from its checkpoint at step {seen_kill} "
           in text, text[-2000:])
    expect(f"cut 2: SIGTERM during lamb-b32 (checkpoint at step {seen_term}): exit 3, 'run the same command again'",
           rc == 3 and seen_term is not None and "run the same command again" in text, (rc, text[-2000:]))
    expect("cut 2: results.jsonl's first line unchanged, lars-b16 added",
           lines_term[:1] == lines_kill and [json.loads(x)["key"] for x in results(out)] == ORDER[:2],
           results(out))
    seen_term = (checkpoints(out, "lamb-b32") or [None])[-1]  # bertpre checkpointed where SIGTERM found it

    # 3. to the end
    before = results(out)
    p = subprocess.run(command(out), capture_output=True, text=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    print(p.stdout, p.stderr)
    expect("run 3: exit 0, lamb-b32 resumed at the SIGTERM checkpoint",
           p.returncode == 0 and f"lamb-b32: resuming from its checkpoint at step {seen_term} " in p.stdout,
           p.stdout[-2000:] + p.stderr[-2000:])
    after = results(out)
    expect("run 3: earlier lines unchanged, one line per run in ladder order",
           after[:len(before)] == before and [json.loads(x)["key"] for x in after] == ORDER, after)
    res = {r["key"]: r for r in map(json.loads, after)}
    expect("resumed_from_step: null, the SIGKILL checkpoint, the SIGTERM checkpoint, null",
           [res[k]["resumed_from_step"] for k in ORDER if k in res] == [None, seen_kill, seen_term, None],
           {k: r["resumed_from_step"] for k, r in res.items()})
    print(f"the ladder with two cuts took {time.monotonic() - t_start:.0f} s")

    # the rules, from the rule
    for key in ORDER:
        if key not in res:
            continue
        r = res[key]
        opt, g = r["optimizer"], r["global_batch"]
        steps, peak, warmup = BUDGET // g, BASE[opt] * RULE[opt](g), WARMUP * g / MICRO
        expect(f"{key}: steps {steps}, accumulation {g // MICRO}, {BUDGET} sequences, {RULE_NAME[opt]} rule: peak "
               f"{peak:.6g}, warmup {warmup}",
               r["steps"] == steps and r["accumulation"] == g // MICRO and r["micro_batch"] == MICRO
               and r["sequences"] == BUDGET and r["lr_rule"] == RULE_NAME[opt] and abs(r["peak_lr"] - peak) <= 1e-12 * peak
               and r["warmup_proportion"] == warmup, {k: r[k] for k in ("steps", "accumulation", "peak_lr",
                                                                         "warmup_proportion", "lr_rule")})
        cfg = json.load(open(os.path.join(out, r["config"])))["train"]
        train, evals = {}, {}
        for line in open(cfg["metrics_file"]):
            m = json.loads(line)
            (evals if m.get("eval") else train)[m["step"]] = m  # a resumed run logs its last steps again
        worst = max(abs(train[n]["lr"] - expected_lr(peak, warmup, steps, n)) / peak for n in train)
        expect(f"{key}: bertpre logged every step 1..{steps}, each rate the schedule's (worst {worst:.1e} of the "
               f"peak, limit 1e-9), the largest the peak",
               sorted(train) == list(range(1, steps + 1)) and worst <= 1e-9
               and abs(max(t["lr"] for t in train.values()) - peak) <= 1e-9 * peak
               and abs(r["peak_lr_logged"] - peak) <= 1e-9 * peak, (sorted(train), worst))
        every = steps // POINTS
        expect(f"{key}: evaluations at steps {list(range(every, steps + 1, every))}, the curve and final numbers "
               f"from them, accuracy in [0, 1]",
               sorted(evals) == list(range(every, steps + 1, every))
               and [(c["step"], c["sequences"], c["eval_accuracy"]) for c in r["curve"]]
               == [(s, s * g, evals[s]["mlm_accuracy"]) for s in sorted(evals)]
               and r["final_accuracy"] == evals[steps]["mlm_accuracy"]
               and r["final_mlm_loss"] == evals[steps]["mlm_loss"]
               and all(0 <= e["mlm_accuracy"] <= 1 for e in evals.values()), (sorted(evals), r["curve"]))

    # the resumed run against the same config without a cut
    if "lars-b16" in res:
        cfg = json.load(open(os.path.join(out, res["lars-b16"]["config"])))
        cfg["train"]["metrics_file"] = os.path.join(tmp, "uncut.jsonl")
        cfg["train"]["checkpoint_dir"] = os.path.join(tmp, "uncut-ckpt")
        with open(os.path.join(tmp, "uncut.json"), "w") as f:
            json.dump(cfg, f)
        p = subprocess.run([bertpre, "train", os.path.join(tmp, "uncut.json")], capture_output=True, text=True,
                           env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        uncut = [json.loads(x) for x in open(cfg["train"]["metrics_file"]) if '"eval"' in x]
        curve = res["lars-b16"]["curve"]
        expect("lars-b16, resumed after SIGKILL: held-out accuracy and loss at every evaluation bit for bit "
               "those of an uncut run", p.returncode == 0
               and [(e["step"], e["mlm_accuracy"], e["mlm_loss"]) for e in uncut]
               == [(c["step"], c["eval_accuracy"], c["eval_loss"]) for c in curve], (uncut, curve, p.stderr[-500:]))

    # plots and table
    def png_ok(path):
        if not os.path.exists(path):
            return False, "missing"
        with open(path, "rb") as f:
            head = f.read(24)
        if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
            return False, head
        w, h = struct.unpack(">II", head[16:24])
        with Image.open(path) as im:
            im.load()
            size = im.size
        return 300 <= w <= 2000 and 200 <= h <= 2000 and size == (w, h), (w, h, size)

    for name in ("acc_vs_batch.png", "acc_vs_sequences.png"):
        ok, detail = png_ok(os.path.join(out, name))
        expect(f"{name}: a PNG (signature, IHDR, decoded by Pillow) of a plot's size", ok, detail)
    rows = [x for x in open(os.path.join(out, "table.md")) if x.startswith("| ") and not x.startswith("| optimizer")]
    expect("table.md: one row per run", len(rows) == len(ORDER), rows)
    os.remove(os.path.join(out, "acc_vs_batch.png"))
    p = subprocess.run([sys.executable, study, "plot", out], capture_output=True, text=True)
    expect("plot OUT redraws acc_vs_batch.png", p.returncode == 0 and png_ok(os.path.join(out, "acc_vs_batch.png"))[0],
           p.stderr)

    # bad setups, refused before any work
    p = subprocess.run(command(out, budget=1024), capture_output=True, text=True)
    expect("another --budget in the same OUT: exit 1 naming budget, both values",
           p.returncode == 1 and "budget is 512 there, 1024 now" in p.stderr, p.stderr)
    p = subprocess.run(command(os.path.join(tmp, "bad"), budget=500), capture_output=True, text=True)
    expect("--budget 500 with batch 16: exit 1 naming it, nothing written",
           p.returncode == 1 and "--budget 500 is not a multiple of the batch 16" in p.stderr
           and not os.path.exists(os.path.join(tmp, "bad")), p.stderr)

    # Values only bertpre checks, an OUT that is a file, damaged records: named, before any work.
    def short(out, *extra, corpus_dir=corpus):
        cmd = command(out, budget=32)
        cmd[cmd.index("--corpus") + 1] = corpus_dir
        cmd[cmd.index("--batches") + 1], cmd[cmd.index("--optimizers") + 1] = "16", "lamb"
        return subprocess.run(cmd + list(extra), capture_output=True, text=True)

    fresh = os.path.join(tmp, "fresh")
    for extra, named in ((["--seed", "-1"], "--seed -1"), (["--base-lr-lamb", "nan"], "--base-lr-lamb nan"),
                         (["--eval-fraction", "0"], "--eval-fraction 0"),
                         (["--eval-fraction", "0.01"], "holds out none")):
        p = short(fresh, *extra)
        made = sorted(os.listdir(fresh)) if os.path.isdir(fresh) else []
        expect(f"{' '.join(extra)}: exit 1 naming '{named}', no traceback, no tokenizer, shards or study.json made "
               f"({made})", p.returncode == 1 and named in p.stderr and "Traceback" not in p.stderr
               and not {"spm.model", "shards", "study.json"} & set(made), p.stderr[-800:])
    afile = os.path.join(tmp, "a-file")
    open(afile, "w").close()
    p = short(afile)
    expect("--out FILE: exit 1 naming it, no traceback", p.returncode == 1 and afile in p.stderr
           and "Traceback" not in p.stderr, p.stderr[-800:])
    damaged = os.path.join(tmp, "damaged")
    os.makedirs(damaged)
    for name, text in (("study.json", "{"), ("data.json", "{}"), ("results.jsonl", '{"optimizer": "lamb"}\n')):
        with open(os.path.join(damaged, name), "w") as f:
            f.write(text)
    p = short(damaged)
    expect("a damaged study.json: exit 1 naming it, no traceback", p.returncode == 1 and "study.json" in p.stderr
           and "Traceback" not in p.stderr, p.stderr[-800:])
    p = subprocess.run([sys.executable, study, "plot", damaged], capture_output=True, text=True)
    expect("a results line without 'key': exit 1 naming results.jsonl:1, no traceback", p.returncode == 1
           and "results.jsonl:1" in p.stderr and "Traceback" not in p.stderr, p.stderr[-800:])
    # A first attempt that failed after the tokenizer (its spm.model left, another setup recorded
    # before this version recorded setups late) does not hold OUT for the corrected command.
    os.makedirs(fresh, exist_ok=True)
    for name, text in (("spm.model", "x"), ("spm.vocab", "x"), ("study.json", json.dumps({"budget": 1}))):
        with open(os.path.join(fresh, name), "w") as f:
            f.write(text)
    p = short(fresh)
    expect("the corrected command in the OUT of a failed attempt: exit 0, its one run finished",
           p.returncode == 0 and len(results(fresh)) == 1, p.stdout[-1500:] + p.stderr[-1500:])
    other = os.path.join(linux_doc(), "filesystems")
    p = short(fresh, corpus_dir=other)
    expect("another --corpus in that OUT: exit 1 naming --corpus and both corpora's sizes, no traceback",
           p.returncode == 1 and "--corpus" in p.stderr and "another corpus" in p.stderr
           and "Traceback" not in p.stderr, p.stderr[-800:])

sys.exit(checks.exit_status())

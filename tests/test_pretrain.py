"""tools/pretrain.sh at toy size on a corpus other than linux-doc: the docstrings of the Python
standard library that runs this test (data_fixtures.python_docstrings: one text file per
top-level module, about 150 files and 0.9 MB).

Run from another working directory with --out a relative path, a 600-piece tokenizer, 10% of
the documents held out and 20 steps (--set train.steps=20). Checked: exit 0; each stage
announced; the tokenizer; 3 train shards and an eval shard whose datasets h5py reads with the
run's sequence length; DIR/config.json with absolute paths only (data, eval_data, tokenizer,
checkpoint_dir, metrics_file) and the tokenizer's vocabulary; a complete checkpoint of step 20;
an export that transformers loads with AutoModelForPreTraining and AutoTokenizer (vocabulary
600 = the tokenizer's, the tiny preset's hidden size and layers); the metrics file with its
eval line; eval.json with that line's numbers; the plot; the summary naming every path and
repeating the held-out numbers; TensorBoard events in DIR/tensorboard written as it trained
(train.tensorboard_dir), the command to watch them said before training. The same with --objective mlm --mask-prob 0.3
--whole-word-mask: full-sentences shards, the config's objective and masking (19 = round(64 x
0.3) masked positions), a BertForMaskedLM export, no NSP number in eval.json or the summary.
--eval-text DIR (with and without --whole-word-mask): the held-out shard made from DIR alone,
the same rows and masks in both runs (prep --eval-masking bert), all its rows evaluated, the
summary saying how they are masked; with --eval-fraction, refused.
--arch modernbert: config.json holds a ModernBERT of the tiny preset's widths and depth
(GeGLU at 2/3 its intermediate size) and ModernBERT's recipe (MLM, 30%, StableAdamW, WSD),
the export is a ModernBertForMaskedLM, eval.json holds the held-out MLM accuracy.
--arch modernbert also packs ModernBERT's way: the shards record document_starts (each document
of a row apart, prep --separate-documents), which the BERT run's full-sentences shards do not.
Bad input (a missing input, an unknown preset, --arch modernbert with --objective mlm+nsp, an
unknown option, --packing full-sentences with --objective mlm+nsp, --mask-prob 1.5,
--separate-documents with doc-sentences) exits 1 naming it, before any file is written.

usage: test_pretrain.py PRETRAIN_SH BERTPRE
"""
import json
import os
import subprocess
import sys
import tempfile

import checks
from checks import expect
from data_fixtures import python_docstrings, require

script, bertpre = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
require(bertpre, "hdf5", "sentencepiece")
with checks.needs("h5py and transformers"):
    import h5py
    import transformers  # noqa: F401

STEPS, VOCAB, SEQ = 20, 600, 64  # SEQ: configs/pretrain-tiny.json
with tempfile.TemporaryDirectory() as tmp:
    corpus = os.path.join(tmp, "docstrings")
    files = python_docstrings(corpus)
    size = sum(os.path.getsize(f) for f in files)
    print(f"corpus: {len(files)} files, {size} bytes of Python standard library docstrings")
    cwd = os.path.join(tmp, "elsewhere")
    os.makedirs(cwd)
    env = dict(os.environ, BERTPRE=bertpre)

    def pretrain(*args):
        return subprocess.run(["bash", script, *args], capture_output=True, text=True, env=env, cwd=cwd)

    p = pretrain(corpus, "--out", "../run", "--vocab", str(VOCAB), "--eval-fraction", "0.1", "--eval-batches", "2",
                 "--shards", "3", "--set", f"train.steps={STEPS}", "--set", "train.log_every=10")
    out = p.stdout
    expect("tools/pretrain.sh exits 0", p.returncode == 0, out[-3000:] + p.stderr[-3000:])
    for stage in ("training a SentencePiece tokenizer", "writing shards", "pretraining",
                  "exporting", "plotting the metrics"):
        expect(f"announces: {stage}", f"pretrain: {stage}" in out)
    expect(f"the tokenizer's stage names the {len(files)} files it reads",
           f"training a SentencePiece tokenizer ({VOCAB} pieces) on {len(files)} file(s)" in out, out[:1500])
    run = os.path.join(tmp, "run")
    expect("the tokenizer: run/spm.model", os.path.exists(os.path.join(run, "spm.model")))

    shards = os.path.join(run, "shards")
    names = sorted(os.listdir(shards)) if os.path.isdir(shards) else []
    expect(f"shards: 3 train and 1 eval: {names}",
           names == ["eval-00000.hdf5", "train-00000.hdf5", "train-00001.hdf5", "train-00002.hdf5"])
    for name in names:
        with h5py.File(os.path.join(shards, name)) as f:
            shape = f["input_ids"].shape
            rows_ok = shape[0] > 0 and shape[1] == SEQ and f["masked_lm_ids"].shape[1] == 10
            ids_ok = int(f["input_ids"][:].max()) < VOCAB
        expect(f"{name}: input_ids {shape}, sequence length {SEQ}, 10 masked positions, ids below {VOCAB}",
               rows_ok and ids_ok)

    cfg = json.load(open(os.path.join(run, "config.json")))
    paths = {k: cfg["train"].get(k, "") for k in ("data", "eval_data", "tokenizer", "checkpoint_dir", "metrics_file")}
    expect(f"config.json: absolute paths into the output directory: {paths}",
           all(os.path.isabs(v) and os.path.realpath(v).startswith(os.path.realpath(run)) for v in paths.values()))
    expect(f"config.json: vocab_size {cfg['model']['vocab_size']} = --vocab", cfg["model"]["vocab_size"] == VOCAB)

    ckpt = os.path.join(run, "checkpoints", f"step-{STEPS:09d}")
    expect(f"complete checkpoint {os.path.basename(ckpt)}", os.path.exists(os.path.join(ckpt, "COMPLETE")))
    export = os.path.join(run, "export")
    from transformers import AutoModelForPreTraining, AutoTokenizer
    try:
        model = AutoModelForPreTraining.from_pretrained(export)
        tok = AutoTokenizer.from_pretrained(export)
        cfg_hf = model.config
        expect(f"export: {type(model).__name__}, vocab {cfg_hf.vocab_size} = the tokenizer's {len(tok)} = {VOCAB}, "
               f"hidden {cfg_hf.hidden_size}, {cfg_hf.num_hidden_layers} layers (tiny preset: 64, 2)",
               type(model).__name__ == "BertForPreTraining" and cfg_hf.vocab_size == len(tok) == VOCAB
               and cfg_hf.hidden_size == 64 and cfg_hf.num_hidden_layers == 2)
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        expect("the export loads with AutoModelForPreTraining and AutoTokenizer", False, repr(e))

    metrics = os.path.join(run, "metrics.jsonl")
    lines = [json.loads(line) for line in open(metrics)] if os.path.exists(metrics) else []
    evals = [line for line in lines if line.get("eval")]
    expect(f"metrics: training lines at steps 10, 20: {[line['step'] for line in lines if not line.get('eval')]}",
           [line["step"] for line in lines if not line.get("eval")] == [10, 20])
    expect("metrics: one eval line at the last step", len(evals) == 1 and evals[0]["step"] == STEPS, evals)
    evaljson = os.path.join(run, "eval.json")
    ej = json.load(open(evaljson)) if os.path.exists(evaljson) else {}
    if evals:
        e = evals[0]
        expect("eval.json (bertpre eval of the checkpoint) gives the train-time eval's numbers exactly",
               all(ej.get(k) == e[k] for k in ("sequences", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy")), ej)
    png = os.path.join(run, "metrics.png")
    expect("a PNG plot", os.path.exists(png) and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n")
    board = os.path.join(run, "tensorboard")
    events = [n for n in os.listdir(board) if n.startswith("events.out.tfevents.")] if os.path.isdir(board) else []
    expect("TensorBoard events written as it trained (DIR/tensorboard, train.tensorboard_dir), 'watch it live' said "
           "before training", len(events) == 1 and os.path.getsize(os.path.join(board, events[0])) > 200 and
           "pretrain: watch it live: " in out and out.find("watch it live") < out.find("step    10/"),
           (events, out[:3000]))
    summary = out[out.find("pretrain: done"):]
    for path in (os.path.join(run, "config.json"), ckpt, export, metrics, png, evaljson, board):
        expect(f"summary names {os.path.relpath(path, tmp)}", os.path.realpath(path) in summary
               or path in summary, summary)
    if ej:
        want = f"MLM accuracy {ej['mlm_accuracy']:.3f} (most frequent token alone: {ej['mlm_baseline_accuracy']:.3f})"
        expect(f"summary repeats the held-out numbers: '{want}'", want in summary, summary)

    # The masked LM alone, as RoBERTa-style recipes train it: packed rows, 30% dynamic whole-word masking.
    p = pretrain(corpus, "--out", "../run-mlm", "--vocab", str(VOCAB), "--eval-fraction", "0.1", "--eval-batches",
                 "2", "--objective", "mlm", "--mask-prob", "0.3", "--whole-word-mask", "--set", f"train.steps={STEPS}")
    run_mlm = os.path.join(tmp, "run-mlm")
    expect("--objective mlm --mask-prob 0.3 --whole-word-mask: exits 0", p.returncode == 0,
           p.stdout[-2000:] + p.stderr[-2000:])
    if p.returncode == 0:
        with h5py.File(os.path.join(run_mlm, "shards", "train-00000.hdf5")) as f:
            packing, starts = f.attrs.get("packing"), "document_starts" in f
        t = json.load(open(os.path.join(run_mlm, "config.json")))["train"]
        want = {"objective": "mlm", "dynamic_masking": 1, "mask_prob": 0.3, "whole_word_mask": 1,
                "max_predictions_per_seq": round(SEQ * 0.3)}
        expect(f"shards packed as full-sentences (the default with mlm: {packing}), documents not apart (a BERT's "
               f"default); config.json {want}",
               packing in ("full-sentences", b"full-sentences") and not starts
               and all(t.get(k) == v for k, v in want.items()), {k: t.get(k) for k in want})
        from transformers import AutoModelForMaskedLM
        model, info = AutoModelForMaskedLM.from_pretrained(os.path.join(run_mlm, "export"), output_loading_info=True)
        ej = json.load(open(os.path.join(run_mlm, "eval.json")))
        summary = p.stdout[p.stdout.find("pretrain: done"):]
        expect("the export is a BertForMaskedLM (no missing or unexpected keys); eval.json and the summary hold no "
               "NSP number, the summary names AutoModelForMaskedLM",
               type(model).__name__ == "BertForMaskedLM" and not info["missing_keys"] and not info["unexpected_keys"]
               and "nsp_accuracy" not in ej and "NSP" not in summary and "AutoModelForMaskedLM" in summary,
               summary + json.dumps(ej))

    # Held-out text of one's own (--eval-text), masked as BERT's in every run: a run with whole-word
    # masking and one without evaluate the same rows with the same masks.
    own = os.path.join(tmp, "own-held-out")
    os.makedirs(own)
    for name in sorted(os.listdir(corpus))[:6]:
        os.rename(os.path.join(corpus, name), os.path.join(own, name))
    shards = {}
    for label, extra in (("wwm", ["--whole-word-mask"]), ("plain", [])):
        p = pretrain(corpus, "--out", f"../run-own-{label}", "--vocab", str(VOCAB), "--eval-text", own,
                     "--eval-batches", "0", "--objective", "mlm", "--set", "train.steps=4", *extra)
        d = os.path.join(tmp, f"run-own-{label}")
        held = os.path.join(d, "eval-shards", "eval-00000.hdf5")
        data = {}
        if os.path.exists(held):
            with h5py.File(held) as f:
                data = {k: f[k][:].tolist() for k in f.keys()}
        shards[label] = (p, d, data)
    (p, d, held), (q, _, held2) = shards["wwm"], shards["plain"]
    t = json.load(open(os.path.join(d, "config.json")))["train"] if p.returncode == 0 else {}
    rows = 0
    if held:
        with h5py.File(os.path.join(d, "eval-shards", "eval-00000.hdf5")) as f:
            rows = len(f["input_ids"])
    ej = json.load(open(os.path.join(d, "eval.json"))) if p.returncode == 0 else {}
    expect(f"--eval-text DIR: exit 0; the held-out shard made from it alone (DIR/eval-shards, {rows} rows, all "
           "evaluated), none of the inputs held out; the summary says how held-out rows are masked; with and without "
           "--whole-word-mask the held-out shard holds the same rows and masks (every dataset equal)",
           p.returncode == 0 and q.returncode == 0 and t.get("eval_data", "").endswith("eval-shards/eval-*.hdf5") and
           not [n for n in os.listdir(os.path.join(d, "shards")) if n.startswith("eval-")] and
           ej.get("sequences") == rows > 0 and "masked as BERT's, 15% of tokens token by token, in every run" in
           p.stdout and held and held == held2, p.stdout[-2500:] + p.stderr[-1500:])
    p = pretrain(corpus, "--out", "../run-own-bad", "--eval-text", own, "--eval-fraction", "0.1")
    expect("--eval-text with --eval-fraction: exit 1 saying they exclude each other, nothing written",
           p.returncode == 1 and "--eval-text and --eval-fraction" in p.stderr and
           not os.path.exists(os.path.join(tmp, "run-own-bad")), p.stderr[-800:])

    # A ModernBERT of the tiny preset's size, trained ModernBERT's way.
    p = pretrain(corpus, "--out", "../run-modern", "--arch", "modernbert", "--vocab", str(VOCAB), "--eval-fraction",
                 "0.1", "--eval-batches", "2", "--set", f"train.steps={STEPS}")
    run_modern = os.path.join(tmp, "run-modern")
    expect("--arch modernbert: exits 0", p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:])
    if p.returncode == 0:
        c = json.load(open(os.path.join(run_modern, "config.json")))
        tiny = json.load(open(os.path.join(os.path.dirname(script), "..", "configs", "pretrain-tiny.json")))["model"]
        m, t = c["model"], c["train"]
        want_m = {"model_type": "modernbert", "hidden_size": tiny["hidden_size"],
                  "num_hidden_layers": tiny["num_hidden_layers"], "num_attention_heads": tiny["num_attention_heads"],
                  "intermediate_size": round(tiny["intermediate_size"] * 2 / 3 / 8) * 8, "local_attention": 128,
                  "global_attn_every_n_layers": 3, "vocab_size": VOCAB}
        want_t = {"objective": "mlm", "dynamic_masking": 1, "mask_prob": 0.3, "optimizer": "stableadamw",
                  "decoupled_weight_decay": 1, "weight_decay": 1e-5, "beta2": 0.98, "lr_schedule": "wsd",
                  "decay_proportion": 0.1}
        expect(f"config.json: a ModernBERT of the preset's size {want_m}, trained {want_t}",
               all(m.get(k) == v for k, v in want_m.items()) and all(t.get(k) == v for k, v in want_t.items()),
               {**{k: m.get(k) for k in want_m}, **{k: t.get(k) for k in want_t}})
        # ModernBERT's packing: each document of a row apart (prep --separate-documents).
        with h5py.File(os.path.join(run_modern, "shards", "train-00000.hdf5")) as f:
            starts = f["document_starts"][:] if "document_starts" in f else None
        several = int((starts[:, 1] > 0).sum()) if starts is not None else 0
        expect(f"ModernBERT's shards record document_starts, {several} rows of several documents; said",
               several > 0 and "each document apart" in p.stdout, p.stdout[-1500:])
        exported = json.load(open(os.path.join(run_modern, "export", "config.json")))
        ej = json.load(open(os.path.join(run_modern, "eval.json")))
        summary = p.stdout[p.stdout.find("pretrain: done"):]
        expect("the export is a ModernBertForMaskedLM; eval.json holds the held-out MLM accuracy; the summary names "
               "AutoModelForMaskedLM", exported.get("architectures") == ["ModernBertForMaskedLM"]
               and "mlm_accuracy" in ej and "AutoModelForMaskedLM" in summary, summary + json.dumps(exported))

    for args, named in (([os.path.join(tmp, "missing")], "missing"), ([corpus, "--preset", "huge"], "huge"),
                        ([corpus, "--arch", "modernbert", "--objective", "mlm+nsp"], "--arch modernbert"),
                        ([corpus, "--epochs", "3"], "--epochs"),
                        ([corpus, "--objective", "mlm+nsp", "--packing", "full-sentences"], "--packing full-sentences"),
                        ([corpus, "--mask-prob", "1.5"], "--mask-prob"),
                        ([corpus, "--objective", "mlm", "--packing", "doc-sentences", "--separate-documents"],
                         "--separate-documents")):
        p = pretrain(*args, "--out", "../bad")
        expect(f"pretrain.sh {' '.join(os.path.basename(a) for a in args)}: exit 1 naming '{named}', nothing written",
               p.returncode == 1 and named in p.stderr and not os.path.exists(os.path.join(tmp, "bad")),
               p.stdout[-500:] + p.stderr[-500:])

sys.exit(checks.exit_status())

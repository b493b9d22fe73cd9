"""tools/pretrain.sh TEXT --from HF_DIR, the continued pretraining of a published BERT, without
a network: the "published" model is made here, a 2-layer BERT with a WordPiece vocabulary that
the tokenizers library trains on the Python standard library's docstrings, pretrained on them
by bertpre and exported as a transformers directory (config.json, model.safetensors,
vocab.txt, tokenizer_config.json). Then `tools/pretrain.sh LINUX_DOC_SUBSET --from that-dir`
must: exit 0, announce each stage; evaluate the starting and the continued model on the same
held-out linux-doc rows, the continued one with a higher MLM accuracy (the point of
domain-adaptive pretraining); export a directory that AutoModelForPreTraining and
AutoTokenizer load, whose tokenizer's ids of the linux-doc files hold every A and B segment of
the eval shard (masked tokens restored). The same directory with the fast tokenizer's
tokenizer.json in place of vocab.txt runs too (2 steps), its vocabulary taken out equal to
vocab.txt; its casing that of AutoTokenizer when tokenizer.json (lowercase false) and
tokenizer_config.json (do_lower_case true) disagree, with a warning naming both. A
BertForMaskedLM that transformers saved from the published model continues MLM-only (chosen and
said) on full-sentences rows, its held-out MLM accuracy higher, no NSP number anywhere, its
export a BertForMaskedLM. A ModernBERT directory with its byte-level BPE tokenizer.json (made
here: the tokenizers library's BPE and bertpre's ModernBERT, both on the docstrings) continues
MLM-only at 30% masking, its held-out accuracy higher, its export a ModernBertForMaskedLM
carrying the same tokenizer.json. The BertForMaskedLM as transformers 5 saves it (config.json
with "dtype", tokenizer.json without vocab.txt), FP32 and BF16, continues too: the FP32 save's
starting model scores on the held-out rows exactly what the transformers-4 save scores, the
BF16 save's within 0.01 accuracy with a note naming "dtype". A directory without
model.safetensors exits 1 naming it.
usage: test_continue.py PRETRAIN_SH BERTPRE"""
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

import checks
from checks import expect
from data_fixtures import byte_level_bpe, linux_doc, python_docstrings, require, restored_rows, segments_missing

script, bertpre = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
require(bertpre, "hdf5")
with checks.needs("h5py, transformers and tokenizers"):
    import h5py  # noqa: F401
    import transformers
    from tokenizers import BertWordPieceTokenizer
transformers.logging.set_verbosity_error()

MODEL = {"architectures": ["BertForPreTraining"], "model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "intermediate_size": 256, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
         "attention_probs_dropout_prob": 0.0, "max_position_embeddings": 64, "type_vocab_size": 2,
         "initializer_range": 0.05, "layer_norm_eps": 1e-12, "pad_token_id": 0}
SMALL = {"train.micro_batch_size": 32, "train.global_batch_size": 32, "train.seq_length": 64,
         "train.max_predictions_per_seq": 10, "train.learning_rate": 0.003, "train.log_every": 50,
         "train.checkpoint_every": 0, "train.backend": "cpu"}
START_STEPS, CONTINUE_STEPS = 120, 60


def run(cmd, **kw):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if p.returncode != 0:
        print(f"FAIL: {' '.join(map(str, cmd[:3]))} exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
        sys.exit(1)
    return p


with tempfile.TemporaryDirectory() as tmp:
    # The published model: vocabulary and weights from Python docstrings.
    corpus = os.path.join(tmp, "docstrings")
    files = python_docstrings(corpus)
    trainer = BertWordPieceTokenizer(lowercase=True)
    trainer.train(files, vocab_size=4000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                  show_progress=False)
    vocab_dir = os.path.join(tmp, "vocab")
    os.mkdir(vocab_dir)
    trainer.save_model(vocab_dir)
    vocab = os.path.join(vocab_dir, "vocab.txt")
    V = sum(1 for _ in open(vocab, encoding="utf-8"))
    run([bertpre, "prep", "--tokenizer", vocab, "--output", os.path.join(tmp, "py-shards"), "--format", "text",
         "--seq-length", 64, "--max-predictions", 10, "--dupe-factor", 2, "--no-progress", corpus])
    cfg = os.path.join(tmp, "start.json")
    with open(cfg, "w") as f:
        train = {k.split(".")[1]: v for k, v in SMALL.items()}
        json.dump({"model": dict(MODEL, vocab_size=V), "train": dict(
            train, steps=START_STEPS, optimizer="adamw", lr_schedule="linear", warmup_proportion=0.1,
            data=os.path.join(tmp, "py-shards"), tokenizer=vocab, checkpoint_dir=os.path.join(tmp, "py-ckpt"))}, f)
    run([bertpre, "train", cfg])
    published = os.path.join(tmp, "published")
    run([bertpre, "export", os.path.join(tmp, "py-ckpt"), "--out", published])
    expect("the published model: config.json, model.safetensors, vocab.txt, tokenizer_config.json",
           all(os.path.exists(os.path.join(published, f))
               for f in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json")))

    # The new domain: a linux-doc subtree (running text, a document per file).
    text = os.path.join(linux_doc(), "process")
    env = dict(os.environ, BERTPRE=bertpre)
    sets = [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]
    out = os.path.join(tmp, "run")
    p = subprocess.run(["bash", script, text, "--from", published, "--out", out, "--eval-fraction", "0.15",
                        "--eval-batches", "0", "--pattern", "*.rst.gz", *sets, "--set",
                        f"train.steps={CONTINUE_STEPS}"], capture_output=True, text=True, env=env)
    expect("tools/pretrain.sh TEXT --from HF_DIR exits 0", p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:])
    for stage in ("importing the weights", "writing shards with the model's tokenizer", "evaluating the starting model",
                  "continuing pretraining", "exporting"):
        expect(f"announces: {stage}", f"pretrain: {stage}" in p.stdout)
    if p.returncode != 0:
        sys.exit(checks.exit_status())
    a = json.load(open(os.path.join(out, "eval-start.json")))
    b = json.load(open(os.path.join(out, "eval.json")))
    expect(f"held-out linux-doc MLM accuracy: starting model {a['mlm_accuracy']:.3f}, after {CONTINUE_STEPS} steps "
           f"of continued pretraining {b['mlm_accuracy']:.3f}: higher, on the same {b['sequences']} sequences",
           b["mlm_accuracy"] > a["mlm_accuracy"] and a["sequences"] == b["sequences"] and
           a["masked_positions"] == b["masked_positions"], f"{a}\n{b}")
    expect("the summary prints both accuracies", f"{a['mlm_accuracy']:.3f}" in p.stdout and
           f"{b['mlm_accuracy']:.3f}" in p.stdout, p.stdout[-1500:])
    export = os.path.join(out, "export")
    model = transformers.AutoModelForPreTraining.from_pretrained(export)
    tok = transformers.AutoTokenizer.from_pretrained(export)
    expect(f"the export loads: {type(model).__name__} with the published shape, {type(tok).__name__} uncased, "
           f"{V} tokens", model.config.hidden_size == 64 and model.config.vocab_size == V and len(tok) == V
           and tok("Linux Kernel")["input_ids"] == tok("linux kernel")["input_ids"])
    streams = []
    for path in sorted(glob.glob(os.path.join(text, "**", "*.rst.gz"), recursive=True)):
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
            streams.append(tok(f.read(), add_special_tokens=False)["input_ids"])
    rows = restored_rows(glob.glob(os.path.join(out, "shards", "eval-*.hdf5"))[0])
    missing = segments_missing(rows, tok.sep_token_id, streams)
    expect(f"the export's tokenizer on the linux-doc files gives the ids of all {2 * len(rows)} segments of the eval "
           "shard", missing == 0, f"{missing} not found")

    # A BertForMaskedLM (the hub's most common BERT): the published model as transformers saves
    # it for the masked LM alone, continued MLM-only on packed rows.
    mlm_dir = os.path.join(tmp, "published-mlm")
    transformers.BertForMaskedLM.from_pretrained(published).save_pretrained(mlm_dir, safe_serialization=True)
    for f in ("vocab.txt", "tokenizer_config.json"):
        shutil.copy(os.path.join(published, f), mlm_dir)
    out_mlm = os.path.join(tmp, "run-mlm")
    p = subprocess.run(["bash", script, text, "--from", mlm_dir, "--out", out_mlm, "--eval-fraction", "0.15",
                        "--eval-batches", "0", "--pattern", "*.rst.gz", *sets, "--set",
                        f"train.steps={CONTINUE_STEPS}"], capture_output=True, text=True, env=env)
    expect("--from a BertForMaskedLM saved by transformers: exit 0, objective mlm chosen and said",
           p.returncode == 0 and "objective mlm (" in p.stdout and "BertForMaskedLM" in p.stdout,
           p.stdout[-3000:] + p.stderr[-3000:])
    if p.returncode == 0:
        a = json.load(open(os.path.join(out_mlm, "eval-start.json")))
        b = json.load(open(os.path.join(out_mlm, "eval.json")))
        import h5py
        with h5py.File(glob.glob(os.path.join(out_mlm, "shards", "train-*.hdf5"))[0]) as f:
            packing = f.attrs.get("packing")
        expect(f"BertForMaskedLM continued on {packing} rows: held-out MLM accuracy {a['mlm_accuracy']:.3f} -> "
               f"{b['mlm_accuracy']:.3f}, higher on the same {b['sequences']} sequences; no NSP number in either "
               f"evaluation or the summary", packing in ("full-sentences", b"full-sentences") and
               b["mlm_accuracy"] > a["mlm_accuracy"] and a["masked_positions"] == b["masked_positions"] and
               "nsp_accuracy" not in a and "nsp_accuracy" not in b and "NSP" not in p.stdout.split("continued ")[-1],
               f"{a}\n{b}\n{p.stdout[-800:]}")
        m, info = transformers.AutoModelForMaskedLM.from_pretrained(os.path.join(out_mlm, "export"),
                                                                    output_loading_info=True)
        expect("its export loads with AutoModelForMaskedLM (BertForMaskedLM, no missing or unexpected keys)",
               type(m).__name__ == "BertForMaskedLM" and not info["missing_keys"] and not info["unexpected_keys"],
               info)

    # The same BertForMaskedLM as transformers 5 saves it ("dtype" in config.json; the tokenizer
    # as tokenizer.json and tokenizer_config.json, no vocab.txt), in FP32 and BF16: it continues,
    # and its starting model scores on the held-out rows what the transformers-4 save scores.
    hf5 = os.path.join(os.path.dirname(os.path.dirname(script)), ".venv-hf5", "bin", "python")
    if not os.access(hf5, os.X_OK):
        print(f"SKIP (this part): {hf5} is missing; tools/setup.sh makes it (transformers 5 with torch 2)")
    else:
        save5 = ("import sys, torch, transformers\n"
                 "src, dst, half = sys.argv[1], sys.argv[2], sys.argv[3] == 'bf16'\n"
                 "m = transformers.BertForMaskedLM.from_pretrained(src)\n"
                 "(m.to(torch.bfloat16) if half else m).save_pretrained(dst)\n"
                 "transformers.AutoTokenizer.from_pretrained(src).save_pretrained(dst)\n"
                 "print(transformers.__version__)\n")
        for dtype in ("fp32", "bf16"):
            d5 = os.path.join(tmp, f"published-hf5-{dtype}")
            version = run([hf5, "-c", save5, mlm_dir, d5, dtype]).stdout.strip().splitlines()[-1]
            saved = json.load(open(os.path.join(d5, "config.json")))
            out5 = os.path.join(tmp, f"run-hf5-{dtype}")
            p = subprocess.run(["bash", script, text, "--from", d5, "--out", out5, "--eval-fraction", "0.15",
                                "--eval-batches", "0", "--pattern", "*.rst.gz", *sets, "--set", "train.steps=2"],
                               capture_output=True, text=True, env=env)
            ok = p.returncode == 0 and os.path.exists(os.path.join(out5, "eval-start.json"))
            a5 = json.load(open(os.path.join(out5, "eval-start.json"))) if ok else {}
            a4 = json.load(open(os.path.join(out_mlm, "eval-start.json"))) if os.path.exists(
                os.path.join(out_mlm, "eval-start.json")) else {}
            note = 'bertpre: note: ' + os.path.join(d5, "config.json") + ": field 'dtype' = \"bfloat16\" is not applied"
            if dtype == "fp32":
                same = ok and a4 and (a5["mlm_accuracy"], a5["mlm_loss"], a5["sequences"]) == (
                    a4["mlm_accuracy"], a4["mlm_loss"], a4["sequences"])
                expect(f"a BertForMaskedLM saved by transformers {version} (config.json with \"dtype\": "
                       f"{saved.get('dtype')!r}, tokenizer.json without vocab.txt): --from exits 0, its starting "
                       f"model's held-out MLM loss and accuracy equal those of the transformers-4 save "
                       f"({a5.get('mlm_loss')}, {a5.get('mlm_accuracy')})",
                       int(version.split(".")[0]) >= 5 and "dtype" in saved and
                       not os.path.exists(os.path.join(d5, "vocab.txt")) and same,
                       f"{a5}\n{a4}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
            else:
                close = ok and a4 and abs(a5["mlm_accuracy"] - a4["mlm_accuracy"]) <= 0.01
                expect(f"the same saved in BF16 by transformers {version} (\"dtype\": {saved.get('dtype')!r}): "
                       f"--from exits 0 with a note that the weights train from FP32 masters; starting held-out "
                       f"MLM accuracy {a5.get('mlm_accuracy')} within 0.01 of the FP32 save's "
                       f"{a4.get('mlm_accuracy')} (weights rounded to 8 mantissa bits)",
                       saved.get("dtype") == "bfloat16" and close and note in p.stderr,
                       f"{a5}\n{a4}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")

    # tokenizer.json without vocab.txt, its normalizer saying lowercase false, beside a
    # tokenizer_config.json saying do_lower_case true: AutoTokenizer follows the config
    # (asked here, the reference), and so must the script, with a warning naming both.
    fast_dir = os.path.join(tmp, "fast-only")
    os.mkdir(fast_dir)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(published, f), fast_dir)
    transformers.BertTokenizerFast(os.path.join(published, "vocab.txt"), do_lower_case=False).save_pretrained(fast_dir)
    for f in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        if os.path.exists(os.path.join(fast_dir, f)):
            os.remove(os.path.join(fast_dir, f))
    with open(os.path.join(fast_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": True, "tokenizer_class": "BertTokenizer"}, f)
    auto = transformers.AutoTokenizer.from_pretrained(fast_dir)
    auto_lower = auto("Linux Kernel")["input_ids"] == auto("linux kernel")["input_ids"]
    out2 = os.path.join(tmp, "run-fast")
    p = subprocess.run(["bash", script, text, "--from", fast_dir, "--out", out2, "--eval-fraction", "0.15",
                        "--eval-batches", "2", "--pattern", "*.rst.gz", *sets, "--set", "train.steps=2"],
                       capture_output=True, text=True, env=env)
    taken = os.path.join(out2, "tokenizer", "vocab.txt")
    expect(f"--from a directory with tokenizer.json (lowercase false) and tokenizer_config.json (do_lower_case "
           f"true), no vocab.txt: exit 0, its vocabulary taken out equal to vocab.txt, lower-cased as AutoTokenizer "
           f"reads it ({'lower-cased' if auto_lower else 'cased'}), a warning naming both files",
           p.returncode == 0 and open(taken).read() == open(vocab).read() and auto_lower and
           json.load(open(os.path.join(out2, "tokenizer", "tokenizer_config.json")))["do_lower_case"] is True and
           "warning" in p.stderr and os.path.join(fast_dir, "tokenizer.json") in p.stderr and
           os.path.join(fast_dir, "tokenizer_config.json") in p.stderr, p.stdout[-1500:] + p.stderr[-1500:])
    expect(f"says what it took, labelled: '({V} tokens, do_lower_case true)'",
           f"took the WordPiece vocabulary of {os.path.join(fast_dir, 'tokenizer.json')} ({V} tokens, do_lower_case "
           "true)" in p.stdout, p.stdout[:1500])
    # A second run on a --out in use (its lock held here, as a running pretrain.sh holds it) is
    # refused before it removes anything.
    import fcntl
    with open(os.path.join(out2, ".pretrain-lock"), "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        before = sorted(os.listdir(out2))
        p = subprocess.run(["bash", script, text, "--from", fast_dir, "--out", out2, "--eval-batches", "2",
                            "--pattern", "*.rst.gz", "--set", "train.steps=2"], capture_output=True, text=True,
                           env=env)
        expect("--from into a --out whose lock another run holds: exit 1 naming it, nothing removed",
               p.returncode == 1 and "in use by another run" in p.stderr and sorted(os.listdir(out2)) == before,
               p.stderr.strip())
    # A ModernBERT with its byte-level BPE tokenizer.json: a published one made here the same
    # way (the tokenizers library's BPE on the docstrings, bertpre's 2-layer ModernBERT trained on
    # them, exported with it), continued MLM-only at ModernBERT's 30%.
    bpe_path = os.path.join(tmp, "bpe-tokenizer.json")
    bpe = byte_level_bpe(files, 2000, bpe_path)
    run([bertpre, "prep", "--tokenizer", bpe_path, "--output", os.path.join(tmp, "bpe-shards"), "--format", "text",
         "--seq-length", 64, "--max-predictions", 20, "--masked-lm-prob", 0.3, "--packing", "full-sentences",
         "--dupe-factor", 1, "--no-progress", corpus])
    modern = {"model_type": "modernbert", "vocab_size": bpe.get_vocab_size(), "hidden_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 168, "max_position_embeddings": 64,
              "local_attention": 16, "global_attn_every_n_layers": 2, "pad_token_id": bpe.token_to_id("[PAD]"),
              "cls_token_id": bpe.token_to_id("[CLS]"), "sep_token_id": bpe.token_to_id("[SEP]")}
    cfg = os.path.join(tmp, "modern-start.json")
    with open(cfg, "w") as f:
        train = {k.split(".")[1]: v for k, v in SMALL.items()}
        json.dump({"model": modern, "train": dict(
            train, steps=START_STEPS, max_predictions_per_seq=20, objective="mlm", optimizer="adamw",
            data=os.path.join(tmp, "bpe-shards"), tokenizer=bpe_path,
            checkpoint_dir=os.path.join(tmp, "modern-ckpt"))}, f)
    run([bertpre, "train", cfg])
    modern_dir = os.path.join(tmp, "published-modernbert")
    run([bertpre, "export", os.path.join(tmp, "modern-ckpt"), "--out", modern_dir])
    out_modern = os.path.join(tmp, "run-modernbert")
    p = subprocess.run(["bash", script, text, "--from", modern_dir, "--out", out_modern, "--eval-fraction", "0.15",
                        "--eval-batches", "0", "--pattern", "*.rst.gz", *sets, "--set", f"train.steps={CONTINUE_STEPS}",
                        "--set", "train.max_predictions_per_seq=20"], capture_output=True, text=True, env=env)
    expect("--from a ModernBERT directory (byte-level BPE tokenizer.json): exit 0", p.returncode == 0,
           p.stdout[-3000:] + p.stderr[-3000:])
    if p.returncode == 0:
        t = json.load(open(os.path.join(out_modern, "config.json")))["train"]
        a = json.load(open(os.path.join(out_modern, "eval-start.json")))
        b = json.load(open(os.path.join(out_modern, "eval.json")))
        exported = json.load(open(os.path.join(out_modern, "export", "config.json")))
        same = open(os.path.join(out_modern, "export", "tokenizer.json"), "rb").read() == open(
            os.path.join(modern_dir, "tokenizer.json"), "rb").read()
        expect(f"its run: objective mlm, 30% dynamic masking, the directory's tokenizer.json; held-out MLM accuracy "
               f"{a['mlm_accuracy']:.3f} -> {b['mlm_accuracy']:.3f} (higher, same rows); the export a "
               f"ModernBertForMaskedLM with that tokenizer.json",
               t.get("objective") == "mlm" and t.get("mask_prob") == 0.3 and t.get("tokenizer", "").endswith(
                   "tokenizer.json") and b["mlm_accuracy"] > a["mlm_accuracy"] and a["sequences"] == b["sequences"]
               and exported.get("architectures") == ["ModernBertForMaskedLM"] and same, f"{t}\n{a}\n{b}")

    os.remove(os.path.join(fast_dir, "model.safetensors"))
    p = subprocess.run(["bash", script, text, "--from", fast_dir, "--out", os.path.join(tmp, "run-bad")],
                       capture_output=True, text=True, env=env)
    expect("--from a directory without model.safetensors: exit 1 naming it, nothing written",
           p.returncode == 1 and "model.safetensors" in p.stderr and not os.path.exists(os.path.join(tmp, "run-bad")),
           p.stderr.strip())
sys.exit(checks.exit_status())

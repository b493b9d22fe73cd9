"""A ModernBERT into and out of transformers: bertpre's export loads as transformers'
ModernBertForMaskedLM and computes bertpre's numbers; a ModernBertForMaskedLM saved by
transformers imports into bertpre, computes transformers' numbers there, and trains on.

  export   `bertpre train` (CPU, synthetic batches, 6 steps) of a ModernBERT (global attention
           every 2nd layer, local_attention 8), `bertpre export`: AutoModelForMaskedLM loads the
           directory with no missing, unexpected or mismatched keys as a ModernBertForMaskedLM
           with the run's layer pattern and RoPE bases; on a batch of rows of 3 to 24 tokens
           (rows of 24, some within the window, some past it), its MLM logits at the masked
           positions and its last hidden states at the real tokens equal bertpre's (`dump forward`
           of the checkpoint: the padded model).
  tokenizer  a byte-level BPE tokenizer.json made with the tokenizers library (NFC, ByteLevel,
           [MASK] with lstrip, [CLS] A [SEP] post-processing): `bertpre prep` with it, 3 steps of a
           ModernBERT on the shards, `bertpre export --tokenizer` it: AutoTokenizer of the export
           gives bertpre's ids on lines with whitespace runs, accents, emoji, CJK and [MASK], adds
           [CLS] ... [SEP], passes no token_type_ids, and the exported model runs on its output.
  import   transformers saves a random ModernBertForMaskedLM: FP32 in one file, BF16, and FP32
           sharded into several files (model.safetensors.index.json); `bertpre import` of each:
           `dump forward` of the imported checkpoint gives transformers' logits and hidden
           states (BF16: of the same model with its weights rounded to BF16, which is what the
           file holds); `bertpre train --init-from` the import trains 3 steps MLM-only. A
           ModernBertModel (the encoder alone) imports with its head and decoder bias fresh,
           named in a warning. A config with an unsupported rope_type is refused naming it.
  refused  `train.objective mlm+nsp` with a ModernBERT: exit 1 naming it (and `bench model` of
           one now predicts its step: RoPE, GeGLU and the windowed attention priced).

Tolerance 1e-5 relative per tensor: FP32 on both sides with other summation orders (seen
about 1e-7 to 1e-6).

Runs in .venv-hf5 (transformers 5 with torch 2; tools/setup.sh makes it).

usage: test_modernbert_interop.py BERTPRE DUMP
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

import checks

checks.run_in_hf5()
with checks.needs("torch 2, transformers with ModernBERT and safetensors (in .venv-hf5)"):
    import torch
    import transformers
    from safetensors.torch import load_file, save_file

# One thread: the suite runs tests side by side, and torch's own threads spinning against
# another process's on the same cores took one of these from seconds to past its time limit.
torch.set_num_threads(1)

TOL = 1e-5
bertpre, dump = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
MODEL = dict(model_type="modernbert", vocab_size=91, hidden_size=32, intermediate_size=40, num_hidden_layers=3,
             num_attention_heads=4, max_position_embeddings=64, local_attention=8, global_attn_every_n_layers=2,
             pad_token_id=0, cls_token_id=2, sep_token_id=3, bos_token_id=2, eos_token_id=3)


def run(*args, **kw):
    return subprocess.run([*args], capture_output=True, text=True, **kw)


rel = checks.rel_error


def expect_close(what, a, b):
    err = rel(a, b)
    checks.expect(f"{what:<70} rel error {err:.2e} (tolerance {TOL:.0e})", err <= TOL)


def make_batch(vocab, T=24, seed=3):
    g = torch.Generator().manual_seed(seed)
    lengths = [24, 3, 9, 17, 6]
    B, P = len(lengths), 3
    ids = torch.randint(5, vocab, (B, T), dtype=torch.int32, generator=g)
    mask = torch.zeros(B, T, dtype=torch.int32)
    pos = torch.zeros(B, P, dtype=torch.int32)
    mlm_ids = torch.zeros(B, P, dtype=torch.int32)
    for b, L in enumerate(lengths):
        ids[b, 0], ids[b, L - 1], ids[b, L:] = 2, 3, 0
        mask[b, :L] = 1
        chosen = [p for p in (1, L // 2, L - 2) if 0 < p < L - 1]
        for k, p in enumerate(sorted(set(chosen))):
            pos[b, k], mlm_ids[b, k] = p, int(torch.randint(5, vocab, (1,), generator=g))
    return {"input_ids": ids, "input_mask": mask, "segment_ids": torch.zeros(B, T, dtype=torch.int32),
            "masked_lm_positions": pos, "masked_lm_ids": mlm_ids,
            "next_sentence_labels": torch.zeros(B, dtype=torch.int32)}


def theirs(model, batch):
    """transformers' MLM logits at the masked positions (bertpre's order) and last hidden states."""
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"].long(), attention_mask=batch["input_mask"].long(),
                    output_hidden_states=True)
    rows = [(b, p) for b in range(batch["input_ids"].shape[0]) for p in batch["masked_lm_positions"][b].tolist() if p]
    logits = torch.stack([out.logits[b, p] for b, p in rows]).float()
    return logits, out.hidden_states[-1].float()


def ours(checkpoint, batch, tmp):
    path, out = os.path.join(tmp, "batch.safetensors"), os.path.join(tmp, "forward.safetensors")
    save_file(batch, path)
    p = run(dump, "forward", checkpoint, path, out)
    if p.returncode:
        checks.expect(f"dump forward {checkpoint}", False, p.stdout + p.stderr)
        return None
    return load_file(out)


def compare(what, checkpoint, model, batch, tmp):
    mine = ours(checkpoint, batch, tmp)
    if mine is None:
        return
    logits, hidden = theirs(model, batch)
    expect_close(f"{what}: MLM logits at the masked positions", mine["mlm_logits"], logits)
    real = batch["input_mask"].bool()
    expect_close(f"{what}: last hidden states at the real tokens", mine["hidden_states"][real], hidden[real])


def case_export(tmp):
    cfg = os.path.join(tmp, "run.json")
    with open(cfg, "w") as f:
        json.dump({"model": MODEL, "train": {"backend": "cpu", "micro_batch_size": 4, "seq_length": 24,
                                             "max_predictions_per_seq": 4, "steps": 6, "learning_rate": 3e-3,
                                             "optimizer": "adamw", "checkpoint_dir": os.path.join(tmp, "ck")}}, f)
    p = run(bertpre, "train", cfg)
    checks.expect("bertpre train of a ModernBERT (CPU)", p.returncode == 0, p.stdout + p.stderr)
    checkpoint = sorted(glob.glob(os.path.join(tmp, "ck", "step-*")))[-1]
    export = os.path.join(tmp, "export")
    p = run(bertpre, "export", checkpoint, "--out", export)
    checks.expect("bertpre export", p.returncode == 0 and "ModernBertForMaskedLM" in p.stdout, p.stdout + p.stderr)
    model, info = transformers.AutoModelForMaskedLM.from_pretrained(export, output_loading_info=True,
                                                                   attn_implementation="eager")
    model.float().train(False)
    bad = {k: v for k, v in info.items() if v}
    checks.expect(f"AutoModelForMaskedLM loads the export as {type(model).__name__}: no missing, unexpected or "
                  f"mismatched keys", type(model).__name__ == "ModernBertForMaskedLM" and not bad, bad)
    c = model.config
    checks.expect("the export's layer pattern and RoPE bases are the run's",
                  c.layer_types == ["full_attention", "sliding_attention", "full_attention"] and
                  c.rope_parameters["full_attention"]["rope_theta"] == 160000.0 and
                  c.rope_parameters["sliding_attention"]["rope_theta"] == 10000.0 and c.local_attention == 8,
                  c.to_json_string())
    compare("export", checkpoint, model, make_batch(c.vocab_size), tmp)


def case_tokenizer(tmp):
    """A ModernBERT on its own byte-level BPE tokenizer.json, prep to export."""
    from data_fixtures import byte_level_bpe
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    corpus = sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    tj = os.path.join(tmp, "tokenizer.json")
    tok = byte_level_bpe(corpus, 600, tj)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    shards = os.path.join(tmp, "bpe-shards")
    p = run(bertpre, "prep", "--tokenizer", tj, "--output", shards, "--format", "text", "--seq-length", "32",
            "--max-predictions", "10", "--masked-lm-prob", "0.3", "--packing", "full-sentences", "--dupe-factor", "1",
            "--no-progress", *corpus[:3])
    checks.expect("prep with a byte-level BPE tokenizer.json", p.returncode == 0, p.stdout[-1500:] + p.stderr)
    model = dict(MODEL, vocab_size=tok.get_vocab_size(), pad_token_id=tok.token_to_id("[PAD]"), cls_token_id=cls,
                 sep_token_id=sep, bos_token_id=cls, eos_token_id=sep)
    cfg = os.path.join(tmp, "bpe-run.json")
    with open(cfg, "w") as f:
        json.dump({"model": model, "train": {"backend": "cpu", "micro_batch_size": 4, "seq_length": 32,
                                             "max_predictions_per_seq": 10, "steps": 3, "objective": "mlm",
                                             "data": shards, "tokenizer": tj, "dynamic_masking": 1, "mask_prob": 0.3,
                                             "checkpoint_dir": os.path.join(tmp, "bpe-ck")}}, f)
    p = run(bertpre, "train", cfg)
    checks.expect("bertpre train of a ModernBERT on those shards", p.returncode == 0, p.stdout[-1500:] + p.stderr)
    checkpoint = sorted(glob.glob(os.path.join(tmp, "bpe-ck", "step-*")))[-1:]
    export = os.path.join(tmp, "bpe-export")
    p = run(bertpre, "export", *checkpoint, "--out", export, "--tokenizer", tj)
    checks.expect("bertpre export with the tokenizer.json", p.returncode == 0, p.stdout + p.stderr)
    if p.returncode != 0:
        return
    auto = transformers.AutoTokenizer.from_pretrained(export)
    lines = ["The quick brown fox jumps over the lazy dog.", "  two spaces, tabs\tand caf\u00e9 \U0001f600",
             "The capital of France is [MASK].", "don't stop; it's 3.14 and \u4f60\u597d"]
    p = run(bertpre, "tokenizer", "encode", "--model", os.path.join(export, "tokenizer.json"), "--json-lines",
            input="".join(json.dumps(line) + "\n" for line in lines))
    ours = [[int(x) for x in line.split()] for line in p.stdout.splitlines()]
    theirs = [auto(line, add_special_tokens=False)["input_ids"] for line in lines]
    checks.expect(f"AutoTokenizer of the export ({type(auto).__name__}) gives bertpre's ids",
                  p.returncode == 0 and ours == theirs, f"{ours}\n{theirs}\n{p.stderr}")
    enc = auto(lines[2], return_tensors="pt")
    checks.expect("the export's tokenizer adds [CLS] ... [SEP], marks [MASK], and passes no token_type_ids",
                  enc["input_ids"][0, 0].item() == cls and enc["input_ids"][0, -1].item() == sep
                  and auto.mask_token_id == tok.token_to_id("[MASK]") and "token_type_ids" not in enc, dict(enc))
    mlm = transformers.AutoModelForMaskedLM.from_pretrained(export)
    with torch.no_grad():
        out = mlm(**enc)
    checks.expect("the export's model runs on its tokenizer's output",
                  tuple(out.logits.shape) == (1, enc["input_ids"].shape[1], tok.get_vocab_size()), out.logits.shape)


def case_import(tmp):
    torch.manual_seed(7)
    config = transformers.ModernBertConfig(**{k: v for k, v in MODEL.items() if k != "model_type"},
                                           attn_implementation="eager", initializer_range=0.2)
    model = transformers.ModernBertForMaskedLM(config).float()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    model.train(False)
    batch = make_batch(config.vocab_size)
    for what, kwargs in (("FP32", {}), ("FP32 sharded", {"max_shard_size": "40KB"}), ("BF16", {})):
        src = os.path.join(tmp, "hf-" + what.replace(" ", "-"))
        saved = model
        if what == "BF16":
            saved = transformers.ModernBertForMaskedLM(config)
            saved.load_state_dict(model.state_dict())
            saved = saved.to(torch.bfloat16)
        saved.save_pretrained(src, **kwargs)
        shards = len(glob.glob(os.path.join(src, "*.safetensors")))
        if what == "FP32 sharded":
            checks.expect(f"transformers saved the model in {shards} files", shards > 1)
        dest = os.path.join(tmp, "imported-" + what.replace(" ", "-"))
        p = run(bertpre, "import", src, "--out", dest)
        checks.expect(f"bertpre import of a ModernBertForMaskedLM ({what})",
                      p.returncode == 0 and "ModernBertForMaskedLM" in p.stdout and "warning" not in p.stderr,
                      p.stdout + p.stderr)
        reference = model
        if what == "BF16":  # the file holds the weights rounded to BF16: the same model in FP32
            reference = transformers.ModernBertForMaskedLM(config).float()
            reference.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in model.state_dict().items()})
            reference.train(False)
        compare(f"import {what}", dest, reference, batch, tmp)

    # Continue pretraining from the import (MLM only, the objective a ModernBERT has).
    cfg = os.path.join(tmp, "continue.json")
    with open(cfg, "w") as f:
        json.dump({"model": os.path.join(tmp, "hf-FP32", "config.json"),
                   "train": {"backend": "cpu", "micro_batch_size": 4, "seq_length": 24, "max_predictions_per_seq": 4,
                             "steps": 3, "log_every": 1, "optimizer": "adamw", "learning_rate": 1e-3}}, f)
    p = run(bertpre, "train", cfg, "--init-from", os.path.join(tmp, "imported-FP32"))
    checks.expect("bertpre train --init-from the import: 3 steps, MLM only",
                  p.returncode == 0 and "step     3/3" in p.stdout and "ModernBertForMaskedLM" in p.stdout,
                  p.stdout + p.stderr)

    # The encoder alone: its head and the decoder bias start fresh, named.
    encoder = os.path.join(tmp, "hf-encoder")
    model.model.save_pretrained(encoder)
    p = run(bertpre, "import", encoder, "--out", os.path.join(tmp, "imported-encoder"))
    checks.expect("a ModernBertModel imports, its head and decoder bias fresh and named in a warning",
                  p.returncode == 0 and "head.dense.weight" in p.stderr and "decoder.bias" in p.stderr,
                  p.stdout + p.stderr)

    # What bertpre cannot compute is refused by name, before anything is written.
    with open(os.path.join(tmp, "hf-FP32", "config.json")) as f:
        raw = json.load(f)
    raw["rope_parameters"]["full_attention"]["rope_type"] = "yarn"
    bad = os.path.join(tmp, "hf-yarn")
    os.makedirs(bad)
    with open(os.path.join(bad, "config.json"), "w") as f:
        json.dump(raw, f)
    os.link(os.path.join(tmp, "hf-FP32", "model.safetensors"), os.path.join(bad, "model.safetensors"))
    dest = os.path.join(tmp, "imported-yarn")
    p = run(bertpre, "import", bad, "--out", dest)
    checks.expect("a rope_type bertpre does not compute is refused naming the field, nothing written",
                  p.returncode == 1 and "rope_type" in p.stderr and "yarn" in p.stderr and not os.path.exists(dest),
                  p.stdout + p.stderr)


def case_refused(tmp):
    """What bertpre does not do for a ModernBERT yet stops before any work, naming it."""
    path = os.path.join(tmp, "modern.json")
    with open(path, "w") as f:
        json.dump(MODEL, f)
    p = run(bertpre, "bench", "model", path, "--seq", "64", "--predictions", "10")
    checks.expect("bench model of a ModernBERT predicts its step (RoPE, GeGLU and the windowed attention priced)",
                  p.returncode == 0 and "rope_forward" in p.stdout and "geglu_forward" in p.stdout and "MFU" in p.stdout,
                  p.stdout[-2000:] + p.stderr)
    run_cfg = os.path.join(tmp, "nsp.json")
    with open(run_cfg, "w") as f:
        json.dump({"model": MODEL, "train": {"backend": "cpu", "objective": "mlm+nsp"}}, f)
    p = run(bertpre, "train", run_cfg)
    checks.expect("train.objective mlm+nsp with a ModernBERT is refused naming the field and value",
                  p.returncode == 1 and "'objective'" in p.stderr and "mlm+nsp" in p.stderr, p.stdout + p.stderr)


def main():
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        case_export(tmp)
        case_tokenizer(tmp)
        case_import(tmp)
        case_refused(tmp)
    sys.exit(checks.exit_status())


if __name__ == "__main__":
    main()

"""Every config in configs/ still loads: training configs through `bertpre train CONFIG
--dry-run` (parse, validate, derive the accumulation count, print the plan, exit 0), model
configs (BertConfig files) inside a minimal training config. The recipe configs must hold
NVIDIA's two-phase LAMB recipe as docs/ARCHITECTURE.md (section 2) states it, and split into
whole micro-batches on 1 and on 8 ranks (one 8-GPU node); the printed plan must show the
accumulation count computed here from global / (micro x ranks). The MosaicBERT preset must
hold that recipe's numbers (MOSAIC, with their source), and the ModernBERT-base and -large
presets the first phase of ModernBERT's (MODERN, MODERN_LARGE, with their sources).

usage: test_configs.py BERTPRE CONFIGS_DIR
"""
from glob import glob as matching
import json
import math
import os
import subprocess
import sys
import tempfile

import checks
from checks import expect

bertpre, configs = sys.argv[1], sys.argv[2]
# docs/ARCHITECTURE.md section 2: seq, global batch, lr, warmup, steps; max predictions per NVIDIA's scripts.
RECIPE = {"phase1": dict(seq_length=128, global_batch_size=65536, learning_rate=6e-3, warmup_proportion=0.2843,
                         steps=7038, max_predictions_per_seq=20),
          "phase2": dict(seq_length=512, global_batch_size=32768, learning_rate=4e-3, warmup_proportion=0.128,
                         steps=1563, max_predictions_per_seq=80)}
EXPECTED_RECIPES = ["bert-base-phase1", "bert-base-phase2", "bert-large-phase1", "bert-large-phase2"]
# configs/mosaicbert-base.json: MosaicBERT-Base's training recipe as mosaicml/examples states it
# (examples/benchmarks/bert/yamls/main/mosaic-bert-base-uncased.yaml) on bertpre's BERT-base:
# MLM only, mlm_probability 0.3 (max predictions round(128 x 0.3) = 38), max_seq_len 128,
# global_train_batch_size 4096, max_duration 286,720,000 samples = 70,000 steps, decoupled AdamW
# lr 5e-4, betas (0.9, 0.98), eps 1e-6, weight_decay 1e-5 scaled by lr / peak lr each step,
# which is torch's AdamW decay of 1e-5 / 5e-4 = 0.02; linear decay after a 6% warmup; seed 17;
# attention dropout 0.
MOSAIC = dict(objective="mlm", dynamic_masking=1, mask_prob=0.3, max_predictions_per_seq=38, seq_length=128,
              global_batch_size=4096, steps=286720000 // 4096, optimizer="adamw", learning_rate=5e-4, beta1=0.9,
              beta2=0.98, eps=1e-6, weight_decay=1e-5 / 5e-4, lr_schedule="linear", warmup_proportion=0.06, seed=17)

# configs/modernbert-base.json: ModernBERT-base's first phase as AnswerDotAI/ModernBERT states it
# (yamls/modernbert/modernbert-base-pretrain.yaml): max_seq_len 1024, mlm_probability 0.3
# (max predictions round(1024 x 0.3) = 307), global_train_batch_size 4608, device microbatch 96,
# batch_size_warmup_min_size = the device microbatch (96 per rank: 768 on its 8 H100s) grown
# over batch_size_warmup_tokens 50,000,000,000 by ModernBERT's BatchSizeWarmupScheduler (below,
# per rank: thresholds ceil(W_r / (1 + .. + 5) x (1 + .. + b)) on the rank's tokens), then
# max_duration 1,719,000,000,000 tokens at 4608 x 1024 per step, decoupled_stableadamw
# lr 8e-4, betas (0.9, 0.98), eps 1e-6, weight_decay 1e-5 relative to the peak rate, no decay
# for biases and norms, no gradient clipping (no gradient_clipping algorithm: max_grad_norm 0);
# warmup_stable_decay with t_warmup 3,000,000,000 tokens (the steps that
# reach them on 8 ranks, as a share of the steps) and t_decay 0; seed 17 (amp_bf16: the config's precision is auto, so
# that it loads on the CPU too; docs/TRAINING.md says to set bf16 on a GPU). The model: 22 layers, hidden
# 768, intermediate 1152, 12 heads, sliding window 128 with a global layer every 3rd, one RoPE
# base of 10,000, no biases but the decoder's, LayerNorm eps 1e-5, vocabulary 50,368.
def modernbert_ramp(ranks=8, micro=96, seq=1024, full=4608, warmup_tokens=5e10):
    """The global batch of each step of ModernBERT's batch-size warmup, in sequences."""
    low, high, per_rank = 1, full // (micro * ranks), math.ceil(warmup_tokens / ranks)
    per_unit, cum, thresholds = per_rank / sum(range(low, high)), 0, []
    for size in range(low, high):
        cum += size
        thresholds.append(math.ceil(per_unit * cum))
    sizes, tokens = [], 0
    while tokens < per_rank:
        size = next(low + i for i, th in enumerate(thresholds) if tokens < th)
        sizes.append(size * micro * ranks)
        tokens += size * micro * seq
    return sizes


def modernbert_recipe(micro, full, ramp_tokens, warmup_tokens, lr, seed, ranks=8, seq=1024, tokens=1.719e12):
    """The train fields of a ModernBERT pretraining YAML: its token durations in steps on 8 ranks."""
    ramp = modernbert_ramp(ranks, micro, seq, full, ramp_tokens)
    steps = len(ramp) + math.ceil((tokens - sum(ramp) * seq) / (full * seq))
    warmup = next(k + 1 for k in range(len(ramp)) if sum(ramp[:k + 1]) * seq >= warmup_tokens)
    return dict(objective="mlm", dynamic_masking=1, mask_prob=0.3, max_predictions_per_seq=307, seq_length=seq,
                global_batch_size=full, micro_batch_size=micro, batch_warmup_min_size=micro * ranks,
                batch_warmup_tokens=ramp_tokens, steps=steps, optimizer="stableadamw", learning_rate=lr, beta1=0.9,
                beta2=0.98, eps=1e-6, weight_decay=1e-5, decoupled_weight_decay=1, max_grad_norm=0.0,
                lr_schedule="wsd", warmup_proportion=warmup / steps, decay_proportion=0.0, seed=seed)


MODERN = modernbert_recipe(96, 4608, 5e10, 3e9, 8e-4, 17)
MODERN_MODEL = dict(model_type="modernbert", vocab_size=50368, num_hidden_layers=22, hidden_size=768,
                    intermediate_size=1152, num_attention_heads=12, local_attention=128, global_attn_every_n_layers=3,
                    global_rope_theta=10000.0, local_rope_theta=10000.0, norm_eps=1e-5, norm_bias=False,
                    attention_bias=False, mlp_bias=False, decoder_bias=True, hidden_activation="gelu")
# configs/modernbert-large.json: ModernBERT-large's first phase as AnswerDotAI/ModernBERT states it
# (yamls/modernbert/modernbert-large-pretrain.yaml, commit 00220af): as the base's but 28 layers,
# hidden 1024, intermediate 2624, 16 heads; device microbatch 56 (448 on 8 ranks at first),
# global_train_batch_size 4928, batch_size_warmup_tokens 10,000,000,000, t_warmup
# 2,000,000,000 tokens, lr 5e-4, seed 314 (the same 1.719T tokens).
MODERN_LARGE = modernbert_recipe(56, 4928, 1e10, 2e9, 5e-4, 314)
MODERN_LARGE_MODEL = dict(MODERN_MODEL, num_hidden_layers=28, hidden_size=1024, intermediate_size=2624,
                          num_attention_heads=16)


def dry_run(path, *extra):
    p = subprocess.run([bertpre, "train", path, "--dry-run", *extra], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


names = sorted(f for f in os.listdir(configs) if f.endswith(".json"))
expect(f"{len(names)} configs found, the four recipe configs among them",
       all(r + ".json" in names for r in EXPECTED_RECIPES), str(names))
with tempfile.TemporaryDirectory() as tmp:
    for name in names:
        path = os.path.join(configs, name)
        cfg = json.load(open(path))
        if "model" not in cfg:  # a BertConfig: load it as the model of a small run
            wrapper = os.path.join(tmp, name)
            with open(wrapper, "w") as f:
                json.dump({"model": os.path.abspath(path), "train": {"seq_length": 16, "max_predictions_per_seq": 3}}, f)
            rc, out = dry_run(wrapper)
            expect(f"{name}: model config loads (dry run exits 0)", rc == 0, out)
            continue
        train = cfg.get("train", {})
        micro = train.get("micro_batch_size", 8)
        glob = train.get("global_batch_size", micro)
        # --dry-run opens the data and tokenizer a config names: where they are not prepared
        # here (the demo's shards), that is an error naming the path, and the plan is checked
        # without them.
        # Relative paths in a config are relative to the config file; data paths may be globs.
        paths = [train[k] for k in ("data", "eval_data", "tokenizer") if train.get(k)]
        missing = [p for p in paths if not matching(os.path.join(configs, p))]
        without = []
        if missing:
            rc, out = dry_run(path)
            expect(f"{name}: dry run with {' / '.join(missing)} not prepared: exit 1 naming one of them",
                   rc == 1 and any(p in out for p in missing), out)
            without = ["--set", "train.data=", "--set", "train.eval_data=", "--set", "train.tokenizer="]
        for ranks in ([1, 8] if name[:-5] in EXPECTED_RECIPES else [1]):
            rc, out = dry_run(path, "--ranks", str(ranks), *without)
            accum = glob // (micro * ranks)
            plan = f"global batch {glob} = micro-batch {micro} x {accum} accumulated x {ranks} rank"
            expect(f"{name} on {ranks} rank(s): dry run exits 0, plan '{plan}'", rc == 0 and plan in out, out)
        if name == "mosaicbert-base.json":
            wrong = {k: train.get(k) for k, v in MOSAIC.items() if train.get(k) != v}
            model = cfg["model"]
            expect(f"{name}: MosaicBERT-Base's recipe (differing: {wrong}), attention dropout 0, BERT-base widths",
                   not wrong and model.get("attention_probs_dropout_prob") == 0.0 and
                   (model["hidden_size"], model["num_hidden_layers"], model["intermediate_size"]) == (768, 12, 3072))
        for recipe, (want, want_model) in {"modernbert-base.json": (MODERN, MODERN_MODEL),
                                           "modernbert-large.json": (MODERN_LARGE, MODERN_LARGE_MODEL)}.items():
            if name == recipe:
                wrong = {k: train.get(k) for k, v in want.items() if train.get(k) != v}
                wrong_model = {k: cfg["model"].get(k) for k, v in want_model.items() if cfg["model"].get(k) != v}
                expect(f"{name}: {recipe[:-5]}'s first phase (differing: {wrong}, model {wrong_model})",
                       not wrong and not wrong_model)
        for phase, values in RECIPE.items():
            if phase in name:
                wrong = {k: train.get(k) for k, v in values.items() if train.get(k) != v}
                expect(f"{name}: {phase} recipe of docs/ARCHITECTURE.md §2 (differing: {wrong})", not wrong)
sys.exit(checks.exit_status())

"""bertpre trains like the reference: 80 steps of bertpre's loop (tests/dump.c train: the
calls `bertpre train` makes) against transformers.BertForPreTraining + PyTorch with timm's
Lamb, from the same initial weights on the same batches, dropout off. The same for the other
optimizers (argument OPTIMIZER), each with another schedule:
  lars   timm's Lars (configured as in test_optim.py: weights decay 0.01 and adapt, biases and
         LayerNorm neither; momentum 0.9, trust coefficient 0.02), linear decay, lr 0.5;
  adamw  torch.optim.AdamW (decay 0.01 except biases and LayerNorm, eps 1e-8), cosine decay,
         lr 2e-3, and MLM label smoothing 0.1 (torch's CrossEntropyLoss(label_smoothing)).
  stableadamw  (with modernbert) torch-optimi's StableAdamW as ModernBERT's recipe sets it:
         decoupled weight decay 1e-5 (decouple_lr, relative to the peak rate), betas (0.9,
         0.98), eps 1e-6; lr 8e-3 on the warmup-stable-decay schedule (8 warmup updates, 56
         stable, 16 of 1-sqrt decay), the reference's rates from transformers'
         get_wsd_schedule(decay_type="1-sqrt").
For these the reference clips the gradients itself, as bertpre does: g *= min(1, 1 / ||g||)
over all tensors.
With a second argument `mlm` (train.objective mlm), bertpre's MLM-only model against
transformers.BertForMaskedLM (no pooler, no NSP head: bertpre must hold exactly its
parameters), the objective sum(MLM losses) / (masked positions in the global batch) alone.

Both sides: global batch 16 = 2 accumulated micro-batches of 8; the objective of a step is
sum(MLM losses) / (masked positions in the global batch) + sum(NSP losses) / (sequences in
the global batch), accumulated over the micro-batches (bertpre's rule, docs/TESTING.md); LAMB with
apex FusedLAMB's semantics (timm options as in test_optim.py: clipping at global norm 1,
betas 0.9/0.999, eps 1e-6, weight decay 0.01 except biases and LayerNorm, trust ratio only
where decay applies); learning rate from NVIDIA's PolyWarmUpScheduler, re-implemented here
(warmup 0.1 of the steps, then (1 - progress) ** 0.5).

The batches are padding-heavy (tests/dump.c train, cut_lengths): in every micro-batch of
8 x 32 the lengths run from 2 ([CLS][SEP]) to 32 (2, 9, 16, 23, 31, a full row, and two rows
as synthetic_batch draws them: 32, or shorter one time in ten), in NVIDIA's layout (real
tokens first, input_mask a prefix of ones, masked positions inside the real tokens); 33% of
all tokens are padding (checked below: at least 25%). transformers gets input_mask as its
attention_mask. bertpre's unpadding (train.unpad, auto by default: on whenever a micro-batch
has padding) computes them on their real tokens only, the padded model the same function;
either way the losses must be transformers'.

Compared per step: MLM loss, NSP loss and their sum, relative error |a - b| / |b| <= 1e-3
(the issue's bar). Both sides are FP32 with different summation orders (~1e-6 per step);
LAMB normalizes the gradient, so differences grow slowly over the run and stay far below
1e-3 unless a rule differs, which moves the losses by O(1e-2) within a few steps. Also
checked: the loss falls (the run trains), and bertpre's learning rates equal the formula.

With a third argument `modernbert` (objective mlm), bertpre's ModernBERT against transformers'
own ModernBertForMaskedLM (eager attention) at a config of its own (3 layers, global attention
in layers 0 and 2, local_attention 8 in rows of 32, so the window cuts most rows; RoPE bases
10,000 and 160,000; biases off but the decoder's), in .venv-hf5 (transformers 5 with torch 2;
the optimizer then is torch.optim.AdamW, decay off for biases and every norm).

With a fifth argument `batch_warmup` (ModernBERT's batch-size warmup, train.batch_warmup_*):
40 steps, global batch 32 = 4 micro-batches of 8, starting at 8 sequences and growing one
micro-batch at a time over 10,000 tokens (rows x 32 counted). The reference picks each step's batch with
ModernBERT's BatchSizeWarmupScheduler rule, written here from its definition (thresholds
ceil(W / (1 + 2 + 3) x (1 + .. + b)) on the tokens so far, the full batch from W tokens on):
7 steps each of 8, 16 and 24 sequences, then 32 (worked out by hand: 7 x 256 = 1,792 tokens
pass 1,667; 1,792 + 7 x 512 = 5,376 pass 5,000; 5,376 + 7 x 768 = 10,752 pass 10,000).
Compared also: bertpre's sequences per step equal the reference's exactly.

usage: test_train_parity.py TRAIN_DUMP_EXECUTABLE [lamb|lars|adamw] [mlm+nsp|mlm] [bert|modernbert] [batch_warmup]
"""
import math
import json
import os
import subprocess
import sys
import tempfile

import checks

ARCH = sys.argv[4] if len(sys.argv) > 4 else "bert"
if ARCH == "modernbert":
    checks.run_in_hf5()
    with checks.needs("torch 2, transformers with ModernBERT, torch-optimi and safetensors (in .venv-hf5)"):
        import torch
        import transformers
        from optimi import StableAdamW
        from safetensors.torch import load_file
else:
    with checks.needs("torch, transformers, safetensors and timm"):
        import torch
        import transformers
        from safetensors.torch import load_file
        from timm.optim.lamb import Lamb
        from timm.optim.lars import Lars
# One thread: the suite runs tests side by side, and torch's own threads spinning against
# another process's on the same cores took one of these from seconds to past its time limit.
torch.set_num_threads(1)

TOL = 1e-3
OPT = sys.argv[2] if len(sys.argv) > 2 else "lamb"
CASES = {"lamb": ({}, 2e-2, "poly", 0.0),
         "lars": ({"optimizer": "lars", "momentum": 0.9, "trust_coefficient": 0.02, "weight_decay": 0.01}, 0.5,
                  "linear", 0.0),
         "adamw": ({"optimizer": "adamw", "weight_decay": 0.01, "eps": 1e-8}, 2e-3, "cosine", 0.1),
         # ModernBERT's optimizer as its recipe sets it: decoupled weight decay 1e-5, betas (0.9, 0.98).
         "stableadamw": ({"optimizer": "stableadamw", "weight_decay": 1e-5, "decoupled_weight_decay": 1, "beta1": 0.9,
                          "beta2": 0.98, "eps": 1e-6, "decay_proportion": 0.2}, 8e-3, "wsd", 0.0)}
OPT_FIELDS, LR, SCHEDULE, SMOOTHING = CASES[OPT]
OBJECTIVE = sys.argv[3] if len(sys.argv) > 3 else "mlm+nsp"
NSP = OBJECTIVE == "mlm+nsp"
STEPS, MICRO, GLOBAL, WARMUP = 80, 8, 16, 0.1
BATCH_WARMUP = len(sys.argv) > 5 and sys.argv[5] == "batch_warmup"
WARMUP_FIELDS = {}
if BATCH_WARMUP:
    STEPS, GLOBAL = 40, 32  # 21 steps of warmup, 19 at the full batch
    WARMUP_FIELDS = {"batch_warmup_min_size": 8, "batch_warmup_tokens": 10000}
WSD = []  # transformers' warmup-stable-decay schedule, made at first use
MODEL = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=32, type_vocab_size=2, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0, initializer_range=0.02, layer_norm_eps=1e-12, pad_token_id=0,
             hidden_act="gelu")
if ARCH == "modernbert":
    MODEL = dict(model_type="modernbert", vocab_size=64, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                 intermediate_size=48, max_position_embeddings=64, local_attention=8,
                 layer_types=["full_attention", "sliding_attention", "full_attention"],
                 rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                                  "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
                 initializer_range=0.02, norm_eps=1e-5, pad_token_id=0, cls_token_id=2, sep_token_id=3,
                 bos_token_id=2, eos_token_id=3, hidden_activation="gelu")
TRAIN = dict(backend="cpu", seed=5, micro_batch_size=MICRO, global_batch_size=GLOBAL, seq_length=32,
             max_predictions_per_seq=5, steps=STEPS, learning_rate=LR, warmup_proportion=WARMUP,
             lr_schedule=SCHEDULE, label_smoothing=SMOOTHING, objective=OBJECTIVE, **OPT_FIELDS, **WARMUP_FIELDS)
failures = 0


def expect(what, ok):
    global failures
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}")


def nvidia_lr(applied_before):
    """NVIDIA's counting and warmup (engine/schedule.h), then the case's decay; wsd from
    transformers' own schedule (its multiplier at step n = the update number)."""
    if SCHEDULE == "wsd":
        if not WSD:
            opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=LR)
            decay = round(OPT_FIELDS["decay_proportion"] * STEPS)
            WSD.append(transformers.get_wsd_schedule(opt, round(WARMUP * STEPS), decay, STEPS, decay_type="1-sqrt"))
        return LR * WSD[0].lr_lambdas[0](applied_before + 1)
    progress = (applied_before + 1) / STEPS
    if progress < WARMUP:
        return LR * progress / WARMUP
    after = (progress - WARMUP) / (1.0 - WARMUP)
    return {"poly": LR * (1.0 - progress) ** 0.5, "linear": LR * (1.0 - after),
            "cosine": LR * 0.5 * (1.0 + math.cos(math.pi * after))}[SCHEDULE]


def micro_batches_per_step():
    """Each step's micro-batches: ModernBERT's BatchSizeWarmupScheduler (one rank), in units of
    micro-batches, on the tokens taken so far (every row counted as seq_length tokens)."""
    full = GLOBAL // MICRO
    if not BATCH_WARMUP:
        return [full] * STEPS
    low, tokens_per_unit = WARMUP_FIELDS["batch_warmup_min_size"] // MICRO, MICRO * TRAIN["seq_length"]
    warmup_tokens = math.ceil(WARMUP_FIELDS["batch_warmup_tokens"] / 1)  # one rank
    per_unit = warmup_tokens / sum(range(low, full))
    thresholds, cum = [], 0
    for size in range(low, full):
        cum += size
        thresholds.append(math.ceil(per_unit * cum))
    sizes, tokens = [], 0
    for _ in range(STEPS):
        size = full
        if tokens < warmup_tokens:
            size = next((low + i for i, th in enumerate(thresholds) if tokens < th), full)
        sizes.append(size)
        tokens += size * tokens_per_unit
    return sizes


def main():
    with tempfile.TemporaryDirectory() as tmp:
        cfg_path = os.path.join(tmp, "run.json")
        with open(cfg_path, "w") as f:
            json.dump({"model": MODEL, "train": TRAIN}, f)
        out_path = os.path.join(tmp, "out.safetensors")
        subprocess.run([sys.argv[1], "train", cfg_path, out_path], check=True, stdout=subprocess.DEVNULL)
        ours = load_file(out_path)

    torch.manual_seed(0)
    if ARCH == "modernbert":
        kind = transformers.ModernBertForMaskedLM
        model = kind(transformers.ModernBertConfig(**{k: v for k, v in MODEL.items() if k != "model_type"},
                                                   attn_implementation="eager")).float()
    else:
        kind = transformers.BertForPreTraining if NSP else transformers.BertForMaskedLM
        model = kind(transformers.BertConfig(**MODEL)).float()
    params = dict(model.named_parameters())
    missing = [n for n in params if "init." + n not in ours]
    extra = [k[5:] for k in ours if k.startswith("init.") and k[5:] not in params]
    expect(f"bertpre wrote initial weights for all {len(params)} parameters of {kind.__name__} and no other "
           f"(missing: {missing}, extra: {extra})", not missing and not extra)
    if missing or extra:
        sys.exit(1)
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(ours["init." + n].reshape(p.shape))
    model.train(False)

    no_decay = ("bias", "gamma", "beta", "LayerNorm")  # NVIDIA's grouping in run_pretraining.py
    if ARCH == "modernbert":
        no_decay = ("bias", "norm.")  # ModernBERT's recipe: no decay on biases and norms
    groups = [{"params": [p for n, p in params.items() if not any(k in n for k in no_decay)], "weight_decay": 0.01},
              {"params": [p for n, p in params.items() if any(k in n for k in no_decay)], "weight_decay": 0.0}]
    if OPT == "lamb":
        opt = Lamb(groups, lr=LR, betas=(0.9, 0.999), eps=1e-6, max_grad_norm=1.0, bias_correction=True,
                   grad_averaging=True, trust_clip=False, always_adapt=False)
    elif OPT == "lars":
        groups[0]["always_adapt"], groups[1]["always_adapt"] = True, False
        opt = Lars(groups, lr=LR, momentum=0.9, dampening=0, nesterov=False, trust_coeff=0.02, eps=1e-8,
                   trust_clip=False)
    elif OPT == "stableadamw":
        for g in groups:
            g["weight_decay"] = 1e-5 if g["weight_decay"] else 0.0
        opt = StableAdamW(groups, lr=LR, betas=(0.9, 0.98), eps=1e-6, decouple_lr=True, max_lr=LR, foreach=False)
    else:
        opt = torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.999), eps=1e-8)

    batch = {k: ours[k].long() for k in ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                                          "masked_lm_ids", "next_sentence_labels")}
    T = TRAIN["seq_length"]
    lengths = batch["input_mask"].sum(1)
    prefix = bool((batch["input_mask"] == (torch.arange(T) < lengths[:, None]).long()).all())
    inside = bool(((batch["masked_lm_positions"] == 0) | (batch["masked_lm_positions"] < lengths[:, None])).all())
    spread = all(lengths[r:r + MICRO].min() == 2 and lengths[r:r + MICRO].max() == T
                 for r in range(0, len(lengths), MICRO))
    padding = 1.0 - lengths.sum().item() / (len(lengths) * T)
    expect(f"padding-heavy micro-batches: input_mask a prefix of ones, masked positions inside the real tokens, "
           f"lengths 2 to {T} in each; {padding:.1%} of the tokens are padding", prefix and inside and spread
           and padding >= 0.25)
    sizes = micro_batches_per_step()
    starts = [sum(sizes[:s]) for s in range(STEPS)]
    if BATCH_WARMUP:
        expect(f"the reference's batch-size warmup: 7 steps each of 8, 16 and 24 sequences, then 32 "
               f"(got {[s * MICRO for s in sizes[:22]]} ...)", sizes == [1] * 7 + [2] * 7 + [3] * 7 + [4] * 19)
    got = [int(x) for x in ours["sequences"].tolist()]
    expect(f"bertpre's sequences per step = the reference's (first 22: {got[:22]})",
           got == [s * MICRO for s in sizes])
    ce = torch.nn.CrossEntropyLoss(reduction="sum")
    ce_mlm = torch.nn.CrossEntropyLoss(reduction="sum", label_smoothing=SMOOTHING)
    ref_mlm, ref_nsp = [], []
    for step in range(STEPS):
        rows = [slice((starts[step] + k) * MICRO, (starts[step] + k + 1) * MICRO) for k in range(sizes[step])]
        sequences = sizes[step] * MICRO
        # Valid masked slots as NVIDIA's loader reads them: the list ends at the first zero position.
        valid = [torch.cumprod((batch["masked_lm_positions"][r] != 0).long(), dim=1).bool() for r in rows]
        n_pred = sum(int(v.sum()) for v in valid)
        opt.zero_grad(set_to_none=True)
        mlm_sum = nsp_sum = 0.0
        for r, v in zip(rows, valid):
            segments = {} if ARCH == "modernbert" else {"token_type_ids": batch["segment_ids"][r]}
            out = model(input_ids=batch["input_ids"][r], attention_mask=batch["input_mask"][r], **segments)
            b_idx, p_idx = v.nonzero(as_tuple=True)
            scores = out.prediction_logits if NSP else out.logits
            logits = scores[b_idx, batch["masked_lm_positions"][r][b_idx, p_idx]]
            mlm = ce_mlm(logits, batch["masked_lm_ids"][r][b_idx, p_idx])
            nsp = ce(out.seq_relationship_logits, batch["next_sentence_labels"][r]) if NSP else torch.zeros(())
            (mlm / n_pred + nsp / sequences).backward()
            mlm_sum += mlm.item()
            nsp_sum += nsp.item()
        ref_mlm.append(mlm_sum / n_pred)
        ref_nsp.append(nsp_sum / sequences)
        for g in opt.param_groups:
            g["lr"] = nvidia_lr(step)
        if OPT != "lamb":  # timm's Lamb clips by itself
            norm = math.sqrt(sum((p.grad.double() ** 2).sum().item() for p in params.values()))
            for p in params.values():
                p.grad = (p.grad.double() * min(1.0, 1.0 / norm)).float()
        opt.step()

    worst = {"mlm": 0.0, "nsp": 0.0, "total": 0.0} if NSP else {"mlm": 0.0}
    if not NSP:
        nsp_max = ours["nsp_loss"].abs().max().item()
        expect(f"no NSP loss in an MLM-only run (largest |nsp_loss| {nsp_max})", nsp_max == 0.0)
    for step in range(STEPS):
        a_m, a_n = ours["mlm_loss"][step].item(), ours["nsp_loss"][step].item()
        pairs = {"mlm": (a_m, ref_mlm[step]), "nsp": (a_n, ref_nsp[step]),
                 "total": (a_m + a_n, ref_mlm[step] + ref_nsp[step])}
        pairs = {key: pairs[key] for key in worst}
        for key, (a, b) in pairs.items():
            worst[key] = max(worst[key], abs(a - b) / abs(b))
        if step % 10 == 0 or step == STEPS - 1:
            print(f"step {step + 1:3d}: bertpre mlm {a_m:.6f} nsp {a_n:.6f} | transformers mlm {ref_mlm[step]:.6f} "
                  f"nsp {ref_nsp[step]:.6f}")
    for key, err in worst.items():
        expect(f"{key} loss over {STEPS} steps: worst rel error {err:.2e} (tolerance {TOL:.0e})", err <= TOL)
    lr_err = max(abs(ours["lr"][s].item() - nvidia_lr(s)) / max(nvidia_lr(s), 1e-30) for s in range(STEPS - 1))
    expect(f"bertpre's learning rates follow the {SCHEDULE} formula: worst rel error {lr_err:.1e} (tolerance 1e-6, "
           f"FP32 storage)", lr_err <= 1e-6 and abs(ours["lr"][STEPS - 1].item()) <= 1e-12 * LR)
    first = sum(ref_mlm[:5]) / 5 + sum(ref_nsp[:5]) / 5
    last = sum(ref_mlm[-5:]) / 5 + sum(ref_nsp[-5:]) / 5
    expect(f"the run trains: mean loss of the first 5 steps {first:.4f} > last 5 steps {last:.4f}", last < first - 0.05)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

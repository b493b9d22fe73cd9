#!/usr/bin/env python3
"""PyTorch + transformers training throughput on the shapes bertpre is benchmarked on, for the
side-by-side table of tools/bench_gpu.py.

BertForPreTraining from a bertpre model config, trained under torch.autocast (FP16 with a
GradScaler, or BF16) on random token ids: MICRO sequences of SEQ tokens per micro-batch, ACCUM
micro-batches accumulated per optimizer step (as bertpre accumulates to its global batch),
max_predictions = SEQ * 20 / 128 masked positions per sequence (bertpre's benchmark setting),
a random next-sentence label. Timed with CUDA synchronisation after the warm-up steps (which
include torch.compile's compilation). Prints one JSON object per run and 'seq_per_s N'.

What it computes differently from bertpre, so that the table is read correctly:
- `--head full` (stock BertForPreTraining.forward) computes MLM logits at every position,
  SEQ x V per sequence (about 1.1 GFLOP forward per sequence for BERT-large at SEQ 128,
  V 30522), where bertpre (like NVIDIA's BERT) gathers the masked positions first and
  computes max_predictions x V. `--head gathered` runs model.bert, gathers the masked rows
  and applies model.cls to them only: the same work as bertpre.
- The optimizer is torch.optim.AdamW (fused where the installed PyTorch has it): PyTorch has
  no LAMB; both cost a few elementwise passes over the parameters once per optimizer step,
  which is small beside ACCUM micro-batches of forward and backward.
- Attention goes through transformers' default implementation for BERT in the installed
  version (scaled_dot_product_attention where available: FlashAttention-style kernels).
- No padding: every sequence has SEQ real tokens (bertpre's synthetic batches have ~10% short
  sequences, which costs it nothing extra).

A ModernBERT config (model_type modernbert; or a training config, whose "model" section is
read) builds ModernBertForMaskedLM instead, MLM only, with --attention (default sdpa:
PyTorch's scaled_dot_product_attention, the sliding windows as an explicit mask). `--head
full` computes the logits at every position; `--head gathered` sets transformers'
sparse_prediction, which computes them at the masked positions only (bertpre's work).

usage: bench_torch.py MODEL_CONFIG SEQ MICRO [--accum N] [--dtype fp16|bf16|fp32]
                      [--mode eager|compile] [--head full|gathered] [--steps N] [--warmup N]
                      [--device cuda|cpu] [--attention sdpa|eager|flash_attention_2]
(--device cpu --dtype fp32 runs the same code on the CPU for a smoke test; its numbers mean
nothing. fp32 turns autocast off.)
"""
import argparse
import json
import sys
import time

import common

common.need("bench_torch", "torch", "transformers")
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import BertConfig, BertForPreTraining  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("config")
ap.add_argument("seq", type=int)
ap.add_argument("micro", type=int)
ap.add_argument("--accum", type=int, default=2)
ap.add_argument("--dtype", choices=["fp16", "bf16", "fp32"], default="fp16")
ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
ap.add_argument("--head", choices=["full", "gathered"], default="full")
ap.add_argument("--steps", type=int, default=8)
ap.add_argument("--warmup", type=int, default=3)
ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
ap.add_argument("--attention", choices=["sdpa", "eager", "flash_attention_2"], default="sdpa",
                help="a ModernBERT's attention implementation in transformers")
args = ap.parse_args()

if args.device == "cuda" and not torch.cuda.is_available():
    sys.exit("bench_torch: no CUDA device is visible to PyTorch")
if args.mode == "compile" and not hasattr(torch, "compile"):
    sys.exit(f"bench_torch: torch.compile is not in PyTorch {torch.__version__}")
dev = torch.device(args.device)
dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
raw = common.model_section(args.config)
modern = raw.get("model_type") == "modernbert"
torch.manual_seed(0)
if modern:
    if not hasattr(transformers, "ModernBertForMaskedLM"):
        sys.exit(f"bench_torch: transformers {transformers.__version__} has no ModernBERT (4.48 or later has)")
    config = transformers.ModernBertConfig(**{k: v for k, v in raw.items()
                                              if not k.startswith("_") and k not in ("architectures", "model_type")})
    config.sparse_prediction = args.head == "gathered"
    model = transformers.ModernBertForMaskedLM._from_config(config, attn_implementation=args.attention)
else:
    config = BertConfig(**{k: v for k, v in raw.items() if not k.startswith("_")})
    model = BertForPreTraining(config)
model = model.to(dev).train()
fused = {"fused": True} if args.device == "cuda" and "fused" in torch.optim.AdamW.__init__.__code__.co_varnames else {}
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, **fused)
use_scaler = args.dtype == "fp16" and args.device == "cuda"
if use_scaler:
    # torch.amp.GradScaler("cuda") in current PyTorch; torch.cuda.amp.GradScaler before 2.3.
    scaler = torch.amp.GradScaler("cuda") if hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler()

B, T, V = args.micro, args.seq, config.vocab_size
P = max(1, T * 20 // 128)
gen = torch.Generator(device="cpu").manual_seed(0)
ids = torch.randint(5, V, (B, T), generator=gen)
segments = (torch.arange(T)[None, :] >= T // 2).long().expand(B, T).contiguous()
positions = torch.stack([torch.randperm(T - 1, generator=gen)[:P].sort().values + 1 for _ in range(B)])
targets = torch.gather(ids, 1, positions)
labels = torch.full_like(ids, -100).scatter_(1, positions, targets)
nsp = torch.randint(0, 2, (B,), generator=gen)
ids, segments, positions, targets, labels, nsp = (t.to(dev) for t in (ids, segments, positions, targets, labels, nsp))
ce = torch.nn.CrossEntropyLoss()


def loss_full(m):
    if modern:  # with sparse_prediction (--head gathered) the model itself keeps the masked rows only
        return m(input_ids=ids, labels=labels).loss
    return m(input_ids=ids, token_type_ids=segments, labels=labels, next_sentence_label=nsp).loss


def loss_gathered(m):
    # NVIDIA's order: the encoder, then the MLM head on the masked rows only.
    seq_out, pooled = m.bert(input_ids=ids, token_type_ids=segments, return_dict=False)[:2]
    rows = torch.gather(seq_out, 1, positions[:, :, None].expand(B, P, seq_out.shape[-1]))
    mlm_logits, nsp_logits = m.cls(rows, pooled)
    return ce(mlm_logits.reshape(-1, V).float(), targets.reshape(-1)) + ce(nsp_logits.float(), nsp)


loss_fn = loss_full if args.head == "full" or modern else loss_gathered
step_model = torch.compile(model) if args.mode == "compile" else model


def sync():
    if args.device == "cuda":
        torch.cuda.synchronize()


def step():
    for _ in range(args.accum):
        if args.dtype == "fp32":
            loss = loss_fn(step_model) / args.accum
        else:
            with torch.autocast(args.device, dtype=dtype):
                loss = loss_fn(step_model) / args.accum
        (scaler.scale(loss) if use_scaler else loss).backward()
    if use_scaler:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


t0 = time.perf_counter()
for _ in range(args.warmup):
    last = step()
sync()
warm_s = time.perf_counter() - t0
start = time.perf_counter()
for _ in range(args.steps):
    last = step()
sync()
elapsed = time.perf_counter() - start
seq_per_s = args.steps * args.accum * B / elapsed
print(json.dumps({"framework": "pytorch", "torch": torch.__version__, "transformers": __import__("transformers").__version__,
                  "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "seq": T, "micro": B,
                  "accum": args.accum, "dtype": args.dtype, "mode": args.mode, "head": args.head,
                  "max_predictions": P, "steps": args.steps, "warmup_s": round(warm_s, 2),
                  "seq_per_s": round(seq_per_s, 2), "last_loss": float(last) * args.accum,
                  "model": type(model).__name__, "attention": getattr(model.config, "_attn_implementation", "default"),
                  "optimizer": "AdamW" + (" (fused)" if fused else "")}))
print(f"seq_per_s {seq_per_s:.1f}")

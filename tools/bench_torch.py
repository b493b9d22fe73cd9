"""PyTorch + transformers reference throughput for tools/bench_gpu.sh: BertForPreTraining from
a bertpre model config, trained under torch.autocast(float16) with a GradScaler and AdamW on
random token ids (batch MICRO x SEQ, 15% of the positions labelled), timed with CUDA
synchronisation after 3 warm-up steps. Prints 'seq_per_s N'.

usage: bench_torch.py MODEL_CONFIG SEQ MICRO_BATCH
"""
import json
import sys
import time

import torch
from transformers import BertConfig, BertForPreTraining

path, seq, micro = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
config = BertConfig(**{k: v for k, v in json.load(open(path)).items() if not k.startswith("_")})
model = BertForPreTraining(config).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler = torch.cuda.amp.GradScaler()
gen = torch.Generator(device="cuda").manual_seed(0)
ids = torch.randint(5, config.vocab_size, (micro, seq), device="cuda", generator=gen)
labels = torch.full_like(ids, -100)
masked = torch.rand(ids.shape, device="cuda", generator=gen) < 0.15
labels[masked] = ids[masked]
nsp = torch.randint(0, 2, (micro,), device="cuda", generator=gen)


def step():
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(input_ids=ids, labels=labels, next_sentence_label=nsp).loss
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


for _ in range(3):
    step()
torch.cuda.synchronize()
steps = 10
start = time.perf_counter()
for _ in range(steps):
    step()
torch.cuda.synchronize()
elapsed = time.perf_counter() - start
print(f"seq_per_s {steps * micro / elapsed:.1f}")

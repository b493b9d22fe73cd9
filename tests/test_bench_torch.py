"""tools/bench_torch.py (the PyTorch side of the GPU benchmark) with the installed PyTorch and
transformers, on the CPU in FP32 with a tiny model: both MLM heads run and print their JSON
line, and the gathered head (MLM logits at the masked rows only, as bertpre computes them)
gives the loss of transformers' own BertForPreTraining loss (logits at every position, then
the positions labelled -100 ignored) after the same 3 optimizer steps: relative difference
<= 1e-4 (FP32 with another summation order; a wrong gather or label set differs by ~1e-1).

With `modernbert` for MODEL_CONFIG, in .venv-hf5 (transformers 5, which has ModernBERT): a
tiny ModernBertForMaskedLM config (3 layers, the first global, a window of 16) written here,
run through the same two heads, each line naming ModernBertForMaskedLM with SDPA attention;
the gathered head is transformers' sparse_prediction (logits at the masked rows only), whose
loss must equal the full head's likewise.

usage: test_bench_torch.py BENCH_TORCH_PY MODEL_CONFIG|modernbert
"""
import json
import os
import subprocess
import sys
import tempfile

import checks
from checks import expect

script, config = sys.argv[1], sys.argv[2]
modern = config == "modernbert"
if modern:
    checks.run_in_hf5()
    config = os.path.join(tempfile.mkdtemp(), "modernbert-tiny.json")
    json.dump({"model_type": "modernbert", "vocab_size": 101, "hidden_size": 64, "num_hidden_layers": 3,
               "num_attention_heads": 2, "intermediate_size": 96, "max_position_embeddings": 64,
               "local_attention": 16, "global_attn_every_n_layers": 3, "pad_token_id": 0, "cls_token_id": 1,
               "sep_token_id": 2, "bos_token_id": 1, "eos_token_id": 2}, open(config, "w"))
with checks.needs("torch and transformers", hint="tools/setup.sh installs PyTorch and transformers"):
    import torch  # noqa: F401
    import transformers  # noqa: F401
losses = {}
for head in ("full", "gathered"):
    p = subprocess.run([sys.executable, script, config, "32", "4", "--device", "cpu", "--dtype", "fp32", "--steps",
                        "2", "--warmup", "1", "--head", head], capture_output=True, text=True, timeout=300)
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    ok = p.returncode == 0 and len(rows) == 1 and rows[0]["seq_per_s"] > 0 and rows[0]["head"] == head
    if modern:
        ok = ok and rows[0]["model"] == "ModernBertForMaskedLM" and rows[0]["attention"] == "sdpa"
    expect(f"bench_torch.py --head {head}: exit 0, one JSON line with seq_per_s", ok, p.stdout + p.stderr)
    if ok:
        losses[head] = rows[0]["last_loss"]
if len(losses) == 2:
    rel = abs(losses["full"] - losses["gathered"]) / abs(losses["full"])
    expect(f"gathered head loss {losses['gathered']:.7f} = transformers' loss {losses['full']:.7f} "
           f"(rel {rel:.1e} <= 1e-4)", rel <= 1e-4)
sys.exit(checks.exit_status())

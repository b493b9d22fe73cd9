"""`bertpre bench model`: the roofline model's launches, counts and times, checked against
formulas written here, not against bertpre's own numbers.

- FLOPs: the baseline's tensor-core FLOPs equal the model-FLOPs formula of
  engine/throughput.h (re-implemented here from its comment: 6 x forward multiply-adds) for
  BERT-large at seq 128 (micro-batch 256) and seq 512 (micro-batch 32), with the vocabulary
  padded to a multiple of 8 (the decoder GEMM runs on 30528 columns: 6 x R x C x 6 more),
  and exactly without that term for a vocabulary already a multiple of 8. Relative error
  <= 1e-12: both sides sum the same integers in doubles (exact below 2^53 per term).
- Bytes: the minimum DRAM bytes of bias + GELU, a LayerNorm, residual + dropout + LayerNorm,
  the one-pass LayerNorm + dropout backward (and the baseline's separate partials pass), a
  biased GEMM and the MLM cross-entropy backward, from hand-written formulas, exactly
  (integers in doubles).
- Times: a compute-bound GEMM takes FLOPs / (989.4 TFLOP/s x 0.70), a memory-bound launch
  bytes / (3350 GB/s x 0.80) (H100 SXM); --gemm-efficiency 0.35 doubles the GEMM time; the
  step time and MFU follow from the launches (relative error <= 1e-12).
- Coverage: every backend op that engine/model.c, engine/train.c and engine/optim.c call
  (found here by reading those sources) appears in the output.
- The kernels the engine runs against --baseline (the unfused ones they replaced): the fused
  ops costed as their unfused launches, FLOPs exactly the formula there and the formula plus
  the flash backward's recomputation now; no permutes and 4 flash-attention launches per
  layer now, 7 host round trips per micro-batch (14 in the baseline), fewer bytes.
- Errors: an unknown --gpu and a --seq beyond max_position_embeddings name the value.

usage: test_roofline.py BERTPRE SOURCE_ROOT
"""
import math
import os
import re
import subprocess
import sys
import tempfile
import json

import checks
from checks import expect

bertpre, root = sys.argv[1], sys.argv[2]
configs = os.path.join(root, "configs")


def run(*args):
    return subprocess.run([bertpre, "bench", "model", *args], capture_output=True, text=True)


def tsv(*args):
    p = run(*args, "--tsv")
    if p.returncode != 0:
        expect(f"bench model {' '.join(args)} runs", False, p.stderr)
        sys.exit(checks.exit_status())
    rows, summary = [], {}
    lines = p.stdout.splitlines()
    header = lines[0].split("\t")
    for line in lines[1:]:
        f = line.split("\t")
        if line.startswith("# "):
            summary[f[0][2:]] = f[1:]
            continue
        r = dict(zip(header, f))
        for k in ("flops", "bytes", "instructions", "time_s"):
            r[k] = float(r[k])
        rows.append(r)
    return rows, summary


def model_flops(cfg, sequences, T, masked):
    L, C, I, V = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    per_seq = L * T * (4 * C * C + 2 * C * I) + L * 2 * T * T * C + C * C + 2 * C
    return 6 * (per_seq * sequences + (C * C + C * V) * masked)


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-300)


large = json.load(open(os.path.join(configs, "bert-large.json")))
H100_FLOPS, H100_BYTES = 989.4e12, 3350e9

for config, B, T, P in (("bert-large-phase1.json", 256, 128, 20), ("bert-large-phase2.json", 32, 512, 80)):
    path = os.path.join(configs, config)
    rows, summary = tsv(path, "--gpu", "h100")
    base, _ = tsv(path, "--gpu", "h100", "--baseline")
    R = B * P
    L, V, C, I, NH = (large[k] for k in ("num_hidden_layers", "vocab_size", "hidden_size", "intermediate_size",
                                         "num_attention_heads"))
    Vp = (V + 7) // 8 * 8
    N, A = B * T, 2
    micro = [r for r in rows if r["phase"] != "opt"]
    padded = model_flops(large, B, T, R) + 6 * R * C * (Vp - V)
    gemm = sum(r["flops"] for r in base if r["phase"] != "opt")
    e = rel(gemm, padded)
    expect(f"{config} --baseline: tensor-core FLOPs {gemm:.6g} = model formula with V padded to {Vp} "
           f"{padded:.6g} (rel {e:.1e} <= 1e-12)", e <= 1e-12)
    # The fused attention's backward recomputes: per head 7 products of T x T x HS (key-tile
    # kernel: S, dP, dV, dK; query-tile kernel: S, dP, dQ) where the model counts 4.
    recompute = L * 2 * 3 * B * T * T * C
    gemm = sum(r["flops"] for r in micro)
    e = rel(gemm, padded + recompute)
    expect(f"{config}: tensor-core FLOPs {gemm:.6g} = that + the flash backward's recomputation "
           f"{recompute:.6g} (rel {e:.1e} <= 1e-12)", e <= 1e-12)

    def find(rs, op, launch, shape):
        return [r for r in rs if r["op"] == op and r["launch"] == launch and r["shape"] == shape]

    g = find(rows, "bias_gelu_forward", "bias_gelu_forward", f"N={N} C={I}")
    expect(f"{config}: bias_gelu_forward on [N,I] = 2 N I A + I A = {2 * N * I * A + I * A} bytes, {L} launches",
           len(g) == L and all(r["bytes"] == 2 * N * I * A + I * A for r in g), g[:1])
    g = find(base, "bias_gelu_forward", "gelu_forward", f"N={N} C={I}")
    expect(f"{config} --baseline: the GELU pass alone, 2 N I A = {2 * N * I * A} bytes",
           len(g) == L and all(r["bytes"] == 2 * N * I * A for r in g), g[:1])
    ln_bytes = 2 * N * C * A + 2 * C * A + 2 * N * 4
    ln = find(rows, "layernorm_forward", "layernorm_forward", f"N={N} C={C}")
    expect(f"{config}: embedding layernorm_forward = 2 N C A + 2 C A + 8 N = {ln_bytes} bytes",
           len(ln) == 1 and ln[0]["bytes"] == ln_bytes, ln)
    rd = find(rows, "residual_dropout_layernorm_forward", "residual_dropout_layernorm", f"N={N} C={C}")
    rd_bytes = 4 * N * C * A + 2 * C * A + 2 * N * 4
    expect(f"{config}: residual + dropout + LayerNorm = 4 N C A + 2 C A + 8 N = {rd_bytes} bytes, {2 * L} launches",
           len(rd) == 2 * L and all(r["bytes"] == rd_bytes for r in rd), rd[:1])
    lnb = find(base, "residual_dropout_layernorm_forward", "layernorm_forward", f"N={N} C={C}")
    expect(f"{config} --baseline: the fused op costed as dropout_residual + layernorm_forward ({2 * L} each)",
           len(lnb) == 2 * L and all(r["bytes"] == ln_bytes for r in lnb)
           and len(find(base, "residual_dropout_layernorm_forward", "dropout_residual", f"N={N} C={C}")) == 2 * L)
    # LayerNorm backward in one pass: dout and the input read once, dinp (and the dropout
    # backward's output) written, min(256, ceil(N / 64)) chunks of FP32 weight/bias partials
    # written beside them and read back by the second launch; the baseline read dout and the
    # input a second time in a separate partials pass.
    chunks = min(256, -(-N // 64))
    part = chunks * 2 * C * 4
    lnd = find(rows, "layernorm_dropout_backward", "layernorm_dropout_backward", f"N={N} C={C}")
    lnd_bytes = 4 * N * C * A + C * A + 2 * N * 4 + part
    lna = find(rows, "layernorm_dropout_backward", "layernorm_add_partials", f"N={N} C={C}")
    expect(f"{config}: LayerNorm + dropout backward = 4 N C A + C A + 8 N + 8 C chunks = {lnd_bytes} bytes and "
           f"the partials' sum, {2 * L} launches each, no partials pass",
           len(lnd) == 2 * L and all(r["bytes"] == lnd_bytes for r in lnd)
           and len(lna) == 2 * L and all(r["bytes"] == part + 4 * C * 4 for r in lna)
           and not any(r["launch"] == "layernorm_partials" for r in rows), lnd[:1])
    lnp = find(base, "layernorm_dropout_backward", "layernorm_partials", f"N={N} C={C}")
    expect(f"{config} --baseline: the partials pass reads dout and the input, 2 N C A + 8 N + 8 C chunks = "
           f"{2 * N * C * A + 2 * N * 4 + part} bytes, {2 * L} launches",
           len(lnp) == 2 * L and all(r["bytes"] == 2 * N * C * A + 2 * N * 4 + part for r in lnp), lnp[:1])
    mm = find(rows, "matmul_forward", "gemm (forward)", f"N={N} IC={C} OC={3 * C}")
    mm_bytes = (N * C + 3 * C * C + N * 3 * C + 3 * C) * A
    mm_flops = 2 * N * C * 3 * C
    expect(f"{config}: QKV GEMM: {mm_flops} FLOPs, (N C + 3C C + 3N C + 3C) A = {mm_bytes} bytes",
           len(mm) == L and all(r["bytes"] == mm_bytes and r["flops"] == mm_flops for r in mm), mm[:1])
    t_expect = max(mm_flops / (H100_FLOPS * 0.70), mm_bytes / (H100_BYTES * 0.80))
    expect(f"{config}: QKV GEMM time = max(FLOPs / 70% peak, bytes / 80% bandwidth) = {t_expect * 1e6:.2f} us",
           rel(mm[0]["time_s"], t_expect) <= 1e-12 and mm[0]["bound"] == "C", mm[:1])
    ce = find(rows, "crossentropy_backward", "crossentropy_backward", f"N={R} V={V} Vp={Vp}")
    ce_bytes = R * V * A + R * Vp * A + R * 4
    expect(f"{config}: MLM cross-entropy backward = R V A + R Vp A + 4 R = {ce_bytes} bytes",
           len(ce) == 1 and ce[0]["bytes"] == ce_bytes, ce)
    expect(f"{config}: memory-bound launch time = bytes / 80% bandwidth",
           rel(ce[0]["time_s"], ce_bytes / (H100_BYTES * 0.80)) <= 1e-12 and ce[0]["bound"] == "M", ce)
    permutes = [r for r in base if r["launch"].startswith("permute")]
    expect(f"{config} --baseline: the permutes are flagged instruction-bound (five per layer)",
           len(permutes) == 5 * L and all(r["bound"] == "I" and r["instructions"] > 0 for r in permutes))
    flash = [r for r in rows if r["launch"].startswith("flash")]
    syncs = sum(int(r["host_syncs"]) for r in micro)
    expect(f"{config}: no permute, 4 flash-attention launches per layer, 7 host round trips (the forward's "
           f"copies), DRAM {sum(r['bytes'] for r in micro) / 1e9:.1f} GB < baseline "
           f"{sum(r['bytes'] for r in base if r['phase'] != 'opt') / 1e9:.1f} GB",
           not any(r["launch"].startswith("permute") for r in rows) and len(flash) == 4 * L and syncs == 7
           and sum(r["bytes"] for r in micro) < sum(r["bytes"] for r in base if r["phase"] != "opt"))

    # Step time and MFU from the launches.
    accum = int(summary["micro_batch"][3])
    micro_t = sum(r["time_s"] for r in micro)
    opt_t = sum(r["time_s"] for r in rows if r["phase"] == "opt")
    step = accum * micro_t + opt_t
    mfu = accum * model_flops(large, B, T, R) / step / H100_FLOPS
    expect(f"{config}: step = {accum} x micro-batch + optimizer = {step:.3f} s, MFU {100 * mfu:.1f}%",
           rel(float(summary["step_time_s"][0]), step) <= 1e-12 and rel(float(summary["mfu"][0]), mfu) <= 1e-12,
           summary)

    # Half the GEMM efficiency doubles every compute-bound GEMM's time.
    slow, _ = tsv(path, "--gemm-efficiency", "0.35")
    ok = all(rel(s["time_s"], 2 * r["time_s"]) <= 1e-12 for r, s in zip(rows, slow) if r["bound"] == "C")
    expect(f"{config}: --gemm-efficiency 0.35 doubles the compute-bound launches' times", ok)

# A vocabulary that is already a multiple of 8: no padding term.
with tempfile.TemporaryDirectory() as tmp:
    cfg = dict(large, vocab_size=30528)
    path = os.path.join(tmp, "model.json")
    json.dump(cfg, open(path, "w"))
    rows, _ = tsv(path, "--micro-batch", "4", "--seq", "64", "--predictions", "10", "--baseline")
    gemm = sum(r["flops"] for r in rows if r["phase"] != "opt")
    f = model_flops(cfg, 4, 64, 40)
    expect(f"vocab 30528 --baseline: tensor-core FLOPs = model formula exactly ({gemm:.6g} vs {f:.6g})", rel(gemm, f) <= 1e-12)

# Every backend op the engine calls appears.
called = set()
for src in ("engine/model.c", "engine/train.c", "engine/optim.c"):
    called |= set(re.findall(r"be->(\w+)\(", open(os.path.join(root, src)).read()))
called -= {"alloc", "release", "workspace_bytes"}  # allocation and the memory plan are not part of a step
# The recipe trains with LAMB: the other optimizers' steps are listed under their own configs below.
called -= {"lars_step", "adamw_step"}
rows, _ = tsv(os.path.join(configs, "bert-large-phase1.json"))
listed = {r["op"] for r in rows}
missing = sorted(called - listed)
expect(f"every backend op the engine calls is listed ({len(called)} ops: {', '.join(sorted(called))})",
       not missing and len(called) >= 20, f"missing: {missing}")

tmp = tempfile.mkdtemp()
for name in ("lars", "adamw"):
    path = os.path.join(tmp, f"{name}.json")
    with open(os.path.join(configs, "bert-large-phase1.json")) as f:
        recipe = json.load(f)
    recipe["model"] = os.path.join(configs, "bert-large.json")
    recipe["train"]["optimizer"] = name
    json.dump(recipe, open(path, "w"))
    rows, _ = tsv(path)
    expect(f"train.optimizer {name}: its step ({name}_step) is costed", f"{name}_step" in {r["op"] for r in rows})

p = run(os.path.join(configs, "bert-large.json"), "--gpu", "v100")
expect("--gpu v100: exit 1 naming the value and the choices",
       p.returncode == 1 and "'v100'" in p.stderr and "h100" in p.stderr, p.stderr)
p = run(os.path.join(configs, "bert-large.json"), "--seq", "1024")
expect("--seq 1024 beyond max_position_embeddings: exit 1 naming both",
       p.returncode == 1 and "1024" in p.stderr and "max_position_embeddings = 512" in p.stderr, p.stderr)
p = run(os.path.join(configs, "bert-large.json"), "--gpu", "a100", "--by-kernel")
expect("--by-kernel on the A100: summary lines with step time and MFU",
       p.returncode == 0 and "A100" in p.stdout and "MFU" in p.stdout, p.stderr)

sys.exit(checks.exit_status())

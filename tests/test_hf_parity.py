"""bertpre's FP32 CPU BertForPreTraining against transformers' BertForPreTraining in PyTorch.

Same weights, same batch, dropout off, for each hidden_act bertpre accepts (ACTIVATIONS). Compared, each by relative error ||a - b|| / ||b||
over the whole tensor: total loss, MLM logits at the masked positions, NSP logits, and the
gradient of every parameter. Tolerance 1e-4: both sides compute in FP32 with different
summation orders (BLAS vs torch kernels); over 2 layers that moves results by ~1e-6
relative, so 1e-4 leaves room while any wrong rule shows up as O(1). The erf and tanh GELUs
differ by at most ~5e-4; computing one where transformers computes the other moves the MLM
logits by 2.4e-4 and gradients by up to 9.5e-4 relative (43 of 49 checks fail), so the
tolerance tells them apart.

Two batches, each in NVIDIA's layout (a row's real tokens first, input_mask a prefix of ones
whose count is the row's length, masked positions only inside the real tokens, never on
[CLS]); transformers gets input_mask as its attention_mask:
  some padding    4 x 11, lengths 11, 8, 6, 11: 18% of the tokens are padding;
  padding-heavy   6 x 16, lengths 2 ([CLS][SEP], no masked position), 16, 5, 9, 3, 12:
                  51% padding. bertpre's unpadding (train.unpad, auto by default) computes
                  such a batch on its real tokens only; the padded model computes the same
                  function, so either way the results must be transformers'.

MLM-only (train.objective mlm) against transformers' BertForMaskedLM, the same way for the exact
GELU and one tanh form: loss, MLM logits and every gradient; bertpre's MLM-only model must hold
exactly BertForMaskedLM's parameters (no pooler, no NSP head) and write no NSP logits.

usage: test_hf_parity.py MODEL_DUMP_EXECUTABLE
"""
import os
import subprocess
import sys
import tempfile

import checks

with checks.needs("torch, transformers and safetensors"):
    import torch
    import transformers
    from safetensors.torch import load_file, save_file

TOL = 1e-4
# hidden_act values, each run through both batches: the exact GELU, and transformers' three
# names of the tanh approximation (NewGELUActivation, PytorchGELUTanh, FastGELUActivation),
# which bertpre computes with one formula (kernels/backend.h GELU_TANH).
ACTIVATIONS = ["gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast"]
failures = 0


rel = checks.rel_error


def expect(what, err, tol=TOL):
    global failures
    ok = err <= tol
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what:<62} rel error {err:.3e} (tolerance {tol:.0e})")


def batch(cfg, lengths, T, chosen, nsp):
    """A batch in NVIDIA's layout: [CLS] tokens [SEP] per row, padding after its length."""
    B, P = len(lengths), max(len(c) for c in chosen)
    ids = torch.randint(5, cfg["vocab_size"], (B, T), dtype=torch.int32)
    mask = torch.ones(B, T, dtype=torch.int32)
    seg = torch.zeros(B, T, dtype=torch.int32)
    positions = torch.zeros(B, P, dtype=torch.int32)
    for b in range(B):
        assert all(0 < p < lengths[b] for p in chosen[b]), "masked positions inside the real tokens"
        ids[b, 0] = 2
        ids[b, lengths[b] - 1] = 3
        ids[b, lengths[b]:] = 0
        mask[b, lengths[b]:] = 0
        seg[b, lengths[b] // 2:lengths[b]] = 1
        positions[b, :len(chosen[b])] = torch.tensor(chosen[b], dtype=torch.int32)
    mlm_ids = torch.where(positions > 0, torch.randint(5, cfg["vocab_size"], (B, P), dtype=torch.int32), 0)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": seg, "masked_lm_positions": positions,
            "masked_lm_ids": mlm_ids, "next_sentence_labels": torch.tensor(nsp, dtype=torch.int32)}


def compare(dump, model, config, what, inputs):
    """Forward and backward of one batch on both sides; every comparison printed under `what`.
    model: a BertForPreTraining, or a BertForMaskedLM (bertpre's MLM-only model)."""
    nsp = isinstance(model, transformers.BertForPreTraining)
    B, T = inputs["input_ids"].shape
    P = inputs["masked_lm_positions"].shape[1]
    real = int(inputs["input_mask"].sum())
    print(f"{what}: {B} x {T}, lengths {inputs['input_mask'].sum(1).tolist()}, "
          f"{1 - real / (B * T):.0%} of the tokens are padding")
    labels = torch.full((B, T), -100, dtype=torch.long)
    for b in range(B):
        for p in range(P):
            if inputs["masked_lm_positions"][b, p] > 0:
                labels[b, inputs["masked_lm_positions"][b, p]] = inputs["masked_lm_ids"][b, p]
    model.zero_grad(set_to_none=True)
    extra = {"next_sentence_label": inputs["next_sentence_labels"].long()} if nsp else {}
    out = model(input_ids=inputs["input_ids"].long(), attention_mask=inputs["input_mask"].long(),
                token_type_ids=inputs["segment_ids"].long(), labels=labels, **extra)
    out.loss.backward()

    with tempfile.TemporaryDirectory() as tmp:
        config.save_pretrained(tmp)  # the config.json users have
        weights = {n: p.detach().contiguous() for n, p in model.named_parameters()}
        save_file(weights, os.path.join(tmp, "weights.safetensors"))
        save_file(inputs, os.path.join(tmp, "batch.safetensors"))
        subprocess.run([dump, "model", os.path.join(tmp, "config.json"), os.path.join(tmp, "weights.safetensors"),
                        os.path.join(tmp, "batch.safetensors"), os.path.join(tmp, "out.safetensors")]
                       + ([] if nsp else ["mlm"]), check=True)
        ours = load_file(os.path.join(tmp, "out.safetensors"))

    print(f"transformers {transformers.__version__}, torch {torch.__version__}: loss {out.loss.item():.6f}")
    expect("total loss", rel(ours["loss"][:1], out.loss.detach().reshape(1)))
    mask_slots = labels != -100
    scores = out.prediction_logits if nsp else out.logits
    expect("MLM logits at the masked positions", rel(ours["mlm_logits"], scores[mask_slots].detach()))
    if nsp:
        expect("NSP logits", rel(ours["nsp_logits"], out.seq_relationship_logits.detach()))
    elif "nsp_logits" in ours:
        expect("no NSP logits from the MLM-only model", float("inf"))
    n_grads = 0
    for name, p in model.named_parameters():
        key = "grad." + name
        if key not in ours:
            expect(f"{name} present in bertpre's table", float("inf"))
            continue
        if name.endswith("attention.self.key.bias"):
            # q.b_k is added to every score of a row and softmax ignores it: the true gradient is 0
            # and both sides hold only FP32 rounding noise. Both must be tiny next to the
            # query bias gradient of the same layer (1e-5: FP32 rounding is ~1e-7 relative).
            scale = dict(model.named_parameters())[name.replace("key", "query")].grad.norm().item()
            worst = max(ours[key].norm().item(), p.grad.norm().item()) / scale
            expect("grad " + name + " is zero (norm / query-bias norm)", worst, 1e-5)
        else:
            expect("grad " + name, rel(ours[key].reshape(p.shape), p.grad))
        n_grads += 1
    extra = [k for k in ours if k.startswith("grad.") and k[5:] not in dict(model.named_parameters())]
    if extra:
        expect(f"no parameters beyond transformers' ({extra})", float("inf"))
    print(f"{what}: {n_grads} parameter gradients compared\n")


def main():
    dump = sys.argv[1]
    for act, kind in [(a, transformers.BertForPreTraining) for a in ACTIVATIONS] + \
            [("gelu", transformers.BertForMaskedLM), ("gelu_new", transformers.BertForMaskedLM)]:
        torch.manual_seed(0)
        cfg = dict(vocab_size=53, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                   intermediate_size=40, max_position_embeddings=32, type_vocab_size=2,
                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_eps=1e-12,
                   initializer_range=0.2, pad_token_id=0, hidden_act=act)
        config = transformers.BertConfig(**cfg)
        model = kind(config).float()
        # Non-trivial LayerNorm parameters and biases (the init leaves them at 1 and 0).
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 1:
                    p.add_(0.1 * torch.randn_like(p))
        model.train(False)

        what = act if kind is transformers.BertForPreTraining else f"BertForMaskedLM, {act}"
        compare(dump, model, config, f"{what}, some padding",
                batch(cfg, [11, 8, 6, 11], 11, [[1, 4, 9], [2, 3, 6, 7], [5], [1, 2, 3, 10]], [0, 1, 1, 0]))
        compare(dump, model, config, f"{what}, padding-heavy",
                batch(cfg, [2, 16, 5, 9, 3, 12], 16, [[], [1, 4, 9, 14], [2], [1, 3, 7], [1], [2, 5, 6, 10]],
                      [1, 0, 1, 1, 0, 0]))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

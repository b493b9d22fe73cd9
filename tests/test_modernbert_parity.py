"""bertpre's FP32 CPU ModernBERT against transformers' own ModernBertForMaskedLM in PyTorch.

transformers builds a random ModernBertForMaskedLM (eager attention, FP32) and saves its
config.json and weights; bertpre reads both (`dump model`: the config as transformers wrote
it, the tensors by their Hugging Face names) and runs the forward and backward of the same
batch with dropout off. Compared, each by relative error ||a - b|| / ||b|| over the whole
tensor: the loss, the MLM logits at the masked positions, and the gradient of every parameter.

The grid (the issue's): global attention every 1, 2 and 3 layers (1: every layer global, no
window), two seeds each, and for each model one batch whose rows are shorter than, as long as
and longer than the window (local_attention 8: a token sees 4 positions each side; lengths 3,
8, 9, 17 and 20 in rows of 20), run padded (train.unpad off: every row a query, padding keys
masked) and unpadded (the real tokens only). The models differ beyond the pattern: RoPE bases
(the local one equal to or apart from the global one), every bias on (norm_bias, attention_bias,
mlp_bias, classifier_bias) or off, decoder_bias on or off, the exact and the tanh GELU, a
vocabulary that is not a multiple of 8 (bertpre pads it inside the model), and a [PAD] id
inside the batch (its embedding row gets the tied decoder's gradient only, on both sides).

Tolerance 1e-5: both sides compute in FP32 with different summation orders (BLAS against
torch's kernels), which over 3 layers moves results by about 1e-7 to 1e-6 relative (the
largest seen is printed); a wrong rule (a window off by one, RoPE's pairs or angles, the
first layer's missing norm, GeGLU's halves swapped, a bias dropped) moves them by 1e-3 or more.

Also: bertpre reads transformers 4's spelling of the same config (global_attn_every_n_layers,
global_rope_theta, local_rope_theta) as the same model (the same loss to the last bit), and
the defaults of its modernbert table are ModernBertConfig()'s.

Runs in .venv-hf5 (transformers 5 with torch 2; tools/setup.sh makes it): ModernBERT needs
transformers 4.48 or later, which needs torch 2, and .venv's Debian torch is 1.13.

usage: test_modernbert_parity.py DUMP_EXECUTABLE BERTPRE
"""
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
    from transformers import ModernBertConfig, ModernBertForMaskedLM
    from safetensors.torch import load_file, save_file

# One thread: the suite runs tests side by side, and torch's own threads spinning against
# another process's on the same cores took one of these from seconds to past its time limit.
torch.set_num_threads(1)

TOL = 1e-5
worst = 0.0


rel = checks.rel_error


def expect(what, err, tol=TOL):
    global worst
    worst = max(worst, err) if err != float("inf") else worst
    checks.expect(f"{what:<66} rel error {err:.3e} (tolerance {tol:.0e})", err <= tol)


def make_batch(vocab, lengths, T, chosen, pad_id, seed):
    """Rows of [CLS] tokens [SEP] then padding; masked positions inside the real tokens."""
    g = torch.Generator().manual_seed(seed)
    B, P = len(lengths), max(len(c) for c in chosen)
    ids = torch.randint(5, vocab, (B, T), dtype=torch.int32, generator=g)
    mask = torch.zeros(B, T, dtype=torch.int32)
    positions = torch.zeros(B, P, dtype=torch.int32)
    mlm_ids = torch.zeros(B, P, dtype=torch.int32)
    for b, L in enumerate(lengths):
        ids[b, 0], ids[b, L - 1] = 1, 2
        ids[b, L:] = pad_id
        mask[b, :L] = 1
        for k, p in enumerate(chosen[b]):
            assert 0 < p < L - 1
            positions[b, k] = p
            mlm_ids[b, k] = int(torch.randint(5, vocab, (1,), generator=g))
    if lengths[0] > 4:
        ids[0, 3] = pad_id  # a [PAD] token among the real ones: no gradient to its embedding row
    return {"input_ids": ids, "input_mask": mask, "segment_ids": torch.zeros(B, T, dtype=torch.int32),
            "masked_lm_positions": positions, "masked_lm_ids": mlm_ids,
            "next_sentence_labels": torch.zeros(B, dtype=torch.int32)}


def transformers_step(model, inputs):
    B, T = inputs["input_ids"].shape
    labels = torch.full((B, T), -100, dtype=torch.long)
    for b in range(B):
        for p, i in zip(inputs["masked_lm_positions"][b].tolist(), inputs["masked_lm_ids"][b].tolist()):
            if p > 0:
                labels[b, p] = i
    model.zero_grad(set_to_none=True)
    out = model(input_ids=inputs["input_ids"].long(), attention_mask=inputs["input_mask"].long(), labels=labels)
    out.loss.backward()
    return out, labels != -100


def bertpre_step(dump, tmp, config_path, inputs, unpad):
    save_file(inputs, os.path.join(tmp, "batch.safetensors"))
    out = os.path.join(tmp, f"out-{unpad}.safetensors")
    p = subprocess.run([dump, "model", config_path, os.path.join(tmp, "weights.safetensors"),
                        os.path.join(tmp, "batch.safetensors"), out, f"unpad={unpad}"], capture_output=True, text=True)
    if p.returncode != 0:
        checks.expect(f"dump model ({unpad}) runs", False, p.stdout + p.stderr)
        return None
    return load_file(out)


def compare(dump, model, tmp, config_path, inputs, what):
    ref, masked = transformers_step(model, inputs)
    params = dict(model.named_parameters())
    for unpad in ("off", "auto"):
        ours = bertpre_step(dump, tmp, config_path, inputs, unpad)
        if ours is None:
            continue
        tag = f"{what}, {'padded' if unpad == 'off' else 'unpadded'}"
        expect(f"{tag}: loss", rel(ours["loss"][1:2], ref.loss.detach().reshape(1)))
        expect(f"{tag}: MLM logits at the masked positions", rel(ours["mlm_logits"], ref.logits[masked].detach()))
        grads = {k[5:]: v for k, v in ours.items() if k.startswith("grad.")}
        missing = [n for n in params if n not in grads]
        extra = [n for n in grads if n not in params]
        checks.expect(f"{tag}: bertpre's tensors are transformers' ({len(params)})", not missing and not extra,
                      f"missing {missing}, extra {extra}")
        errs = {n: rel(grads[n].reshape(p.shape), p.grad) for n, p in params.items() if n in grads}
        name = max(errs, key=errs.get)
        expect(f"{tag}: every gradient (worst: {name})", errs[name])
        # The [PAD] row alone: the tied decoder gives it a gradient, the lookup of the [PAD]
        # tokens none (nn.Embedding's padding_idx); a lookup gradient there would show.
        pad = model.config.pad_token_id
        table = "model.embeddings.tok_embeddings.weight"
        expect(f"{tag}: the [PAD] row's gradient (the decoder's only)", rel(grads[table][pad], params[table].grad[pad]))
    return ref.loss.item()


MODELS = [
    # (global every N, seed, extra config)
    (3, 0, {}),
    (3, 1, {"norm_bias": True, "attention_bias": True, "mlp_bias": True, "classifier_bias": True,
            "hidden_activation": "gelu_pytorch_tanh", "classifier_activation": "gelu_new"}),
    (2, 0, {"decoder_bias": False, "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 5000.0},
                                                       "sliding_attention": {"rope_type": "default",
                                                                             "rope_theta": 5000.0}}}),
    (2, 1, {"norm_eps": 1e-6}),
    (1, 0, {}),
    (1, 1, {"norm_bias": True, "mlp_bias": True}),
]


def main():
    dump, bertpre = sys.argv[1], sys.argv[2]
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    lengths, T = [20, 9, 3, 17, 8], 20
    chosen = [[1, 5, 10, 18], [2, 4, 7], [1], [1, 8, 15], [3, 6]]
    with tempfile.TemporaryDirectory() as tmp:
        for every, seed, extra in MODELS:
            torch.manual_seed(seed)
            kwargs = dict(vocab_size=93, hidden_size=32, intermediate_size=24, num_hidden_layers=3,
                          num_attention_heads=4, max_position_embeddings=64, local_attention=8,
                          pad_token_id=0, bos_token_id=1, cls_token_id=1, eos_token_id=2, sep_token_id=2,
                          initializer_range=0.2, attn_implementation="eager")
            layer_types = ["full_attention" if l % every == 0 else "sliding_attention" for l in range(3)]
            config = ModernBertConfig(**kwargs, layer_types=layer_types, **extra)
            model = ModernBertForMaskedLM(config).float()
            with torch.no_grad():  # non-trivial norms and biases (the init leaves them at 1 and 0)
                for name, p in model.named_parameters():
                    if p.dim() == 1:
                        p.add_(0.1 * torch.randn_like(p))
            model.train(False)
            config.save_pretrained(tmp)
            weights = {n: p.detach().clone().contiguous() for n, p in model.named_parameters()}
            save_file(weights, os.path.join(tmp, "weights.safetensors"))
            what = f"global every {every}, seed {seed}" + (f", {', '.join(sorted(extra))}" if extra else "")
            inputs = make_batch(config.vocab_size, lengths, T, chosen, config.pad_token_id, 10 + seed)
            compare(dump, model, tmp, os.path.join(tmp, "config.json"), inputs, what)

        # transformers 4's spelling of the last model's config reads as the same model.
        with open(os.path.join(tmp, "config.json")) as f:
            v5 = json.load(f)
        v4 = {k: v for k, v in v5.items() if k not in ("layer_types", "rope_parameters")}
        v4.update(global_attn_every_n_layers=1, global_rope_theta=v5["rope_parameters"]["full_attention"]["rope_theta"],
                  local_rope_theta=v5["rope_parameters"]["sliding_attention"]["rope_theta"])
        v4_path = os.path.join(tmp, "config-v4.json")
        with open(v4_path, "w") as f:
            json.dump(v4, f)
        a = bertpre_step(dump, tmp, os.path.join(tmp, "config.json"), inputs, "auto")
        b = bertpre_step(dump, tmp, v4_path, inputs, "auto")
        checks.expect("transformers 4's config spelling gives the same loss and gradients, bit for bit",
                      a is not None and b is not None and all(torch.equal(a[k], b[k]) for k in a))

        # The modernbert table's defaults are ModernBertConfig()'s.
        doc = subprocess.run([bertpre, "config-doc"], capture_output=True, text=True).stdout
        section = doc.split("\n## modernbert\n", 1)[1].split("\n## ", 1)[0]
        reference, diff = ModernBertConfig(), []
        for line in section.splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not line.startswith("| `") or len(cells) < 4:
                continue
            name, kind, default = cells[0].strip("`"), cells[1], cells[3]
            if kind not in ("integer", "number", "boolean", "choice") or not hasattr(reference, name):
                continue
            if name in ("model_type",):
                continue
            want = getattr(reference, name)
            same = (str(want).lower() == default if kind == "boolean" else str(want) == default if kind == "choice"
                    else float(want) == float(default))
            if not same:
                diff.append(f"{name}: doc {default}, ModernBertConfig {want}")
        rope = reference.rope_parameters
        if "160000" not in section or "10000" not in section or rope["full_attention"]["rope_theta"] != 160000:
            diff.append(f"rope thetas: ModernBertConfig {rope}")
        checks.expect("the modernbert defaults are transformers' ModernBertConfig() defaults", not diff, diff)
    print(f"largest relative error of all comparisons: {worst:.3e}")
    sys.exit(checks.exit_status())


if __name__ == "__main__":
    main()

"""Packed rows whose attention stays inside each document equal transformers on the documents
as separate rows: BERT (BertForMaskedLM) and ModernBERT (ModernBertForMaskedLM), FP32 CPU.

A batch of 4 rows of 24 tokens holds 1 to 4 documents each (batch_t.document_starts, the shard
dataset document_starts): lengths 7 + 5 + 9 (3 padding), 24, 3 + 10 + 11, 2 + 6 + 1 + 12 (3
padding), each document [CLS] ... [SEP] as prep --separate-documents writes them (the 1-token
one a lone [CLS]), masked positions in most documents. bertpre runs the rows with their starts
(`dump model`, padded and unpadded); transformers runs the 13 documents as 13 rows of their
own (padded to 24, attention_mask, position ids from 0 in each). Compared by relative error
||a - b|| / ||b||: the MLM loss (the mean over the same masked tokens), the logits at the
masked positions (the same order: rows, then positions), and every parameter's gradient.

ModernBERT: 3 layers, a global one and two local ones with local_attention 8 (a token sees 4
each side): documents shorter and longer than the window. RoPE makes a document's scores
depend only on distances within it, so restarting positions matters to BERT's learned position
table, not to ModernBERT: both are checked the same way.

Tolerances: 1e-5 (ModernBERT, as test_modernbert_parity) and 1e-4 (BERT, as test_hf_parity):
FP32 on both sides with other summation orders, ~1e-7 to 1e-6 seen over these layers; a token
that sees another document's keys, or a position that does not restart, moves them by 1e-2
or more. The same rows without their starts (one document per row, attention across them)
must differ from the reference by more than 1e-3, which shows the batch tells the two apart.
Also (BERT, seed 0) the same with a fifth row that is empty: such a micro-batch runs padded,
and the empty row holds no document.

Runs in .venv-hf5 (transformers 5 with torch 2, which has both models; tools/setup.sh makes it).

usage: test_doc_attention.py DUMP_EXECUTABLE
"""
import os
import subprocess
import sys
import tempfile

import checks

checks.run_in_hf5()

with checks.needs("torch 2, transformers with ModernBERT and safetensors (in .venv-hf5)"):
    import torch
    import transformers
    from transformers import BertConfig, BertForMaskedLM, ModernBertConfig, ModernBertForMaskedLM
    from safetensors.torch import load_file, save_file

torch.set_num_threads(1)  # the suite runs tests side by side on few cores

T = 24
ROWS = [[7, 5, 9], [24], [3, 10, 11], [2, 6, 1, 12]]  # document lengths per row
# Masked positions per document (within it, never its [CLS] at 0).
MASKED = {(0, 0): [2, 5], (0, 1): [1, 3], (0, 2): [4, 8], (1, 0): [1, 6, 13, 20], (2, 0): [1],
          (2, 1): [2, 7, 9], (2, 2): [1, 5, 10], (3, 1): [3, 4], (3, 3): [1, 6, 11]}
CLS, SEP, PAD = 1, 2, 0


def make_inputs(vocab, seed, rows=ROWS):
    """bertpre's packed rows and transformers' separate rows of the same documents."""
    g = torch.Generator().manual_seed(seed)
    docs, labels_of = [], []  # per document: its tokens, its (position, target) pairs
    for r, lengths in enumerate(rows):
        for d, n in enumerate(lengths):
            ids = torch.randint(5, vocab, (n,), generator=g, dtype=torch.int32)
            ids[0] = CLS
            if n > 1:
                ids[n - 1] = SEP
            docs.append(ids)
            labels_of.append([(p, int(torch.randint(5, vocab, (1,), generator=g))) for p in MASKED.get((r, d), [])])
    B, P = len(rows), max(sum(len(MASKED.get((r, d), [])) for d in range(len(ls))) for r, ls in enumerate(rows))
    packed = {"input_ids": torch.full((B, T), PAD, dtype=torch.int32), "input_mask": torch.zeros(B, T, dtype=torch.int32),
              "segment_ids": torch.zeros(B, T, dtype=torch.int32), "masked_lm_positions": torch.zeros(B, P, dtype=torch.int32),
              "masked_lm_ids": torch.zeros(B, P, dtype=torch.int32), "next_sentence_labels": torch.zeros(B, dtype=torch.int32),
              "document_starts": torch.zeros(B, T, dtype=torch.int32)}
    k = 0
    for r, lengths in enumerate(rows):
        at, slot = 0, 0
        for d, n in enumerate(lengths):
            packed["input_ids"][r, at:at + n] = docs[k]
            packed["document_starts"][r, d] = at
            for p, target in labels_of[k]:
                packed["masked_lm_positions"][r, slot] = at + p
                packed["masked_lm_ids"][r, slot] = target
                slot += 1
            at, k = at + n, k + 1
        packed["input_mask"][r, :at] = 1
    D = len(docs)
    sep_ids = torch.full((D, T), PAD, dtype=torch.long)
    sep_mask = torch.zeros(D, T, dtype=torch.long)
    sep_labels = torch.full((D, T), -100, dtype=torch.long)
    for k, ids in enumerate(docs):
        sep_ids[k, :len(ids)] = ids
        sep_mask[k, :len(ids)] = 1
        for p, target in labels_of[k]:
            sep_labels[k, p] = target
    return packed, (sep_ids, sep_mask, sep_labels)


def transformers_step(model, separate):
    ids, mask, labels = separate
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    return out.loss.detach(), out.logits[labels != -100].detach(), {n: p.grad for n, p in model.named_parameters()}


def bertpre_step(dump, tmp, model, packed, unpad, mlm):
    model.config.save_pretrained(tmp)
    save_file({n: p.detach().clone().contiguous() for n, p in model.named_parameters()},
              os.path.join(tmp, "weights.safetensors"))
    save_file(packed, os.path.join(tmp, "batch.safetensors"))
    out = os.path.join(tmp, "out.safetensors")
    p = subprocess.run([dump, "model", os.path.join(tmp, "config.json"), os.path.join(tmp, "weights.safetensors"),
                        os.path.join(tmp, "batch.safetensors"), out, f"unpad={unpad}"] + (["mlm"] if mlm else []),
                       capture_output=True, text=True)
    if p.returncode != 0:
        checks.expect(f"dump model (unpad={unpad}) runs", False, p.stdout + p.stderr)
        return None
    return load_file(out)


def compare(dump, model, what, tol, mlm, seed, rows=ROWS):
    packed, separate = make_inputs(model.config.vocab_size, seed, rows)
    loss, logits, grads = transformers_step(model, separate)
    with tempfile.TemporaryDirectory() as tmp:
        for unpad in ("off", "auto"):
            ours = bertpre_step(dump, tmp, model, packed, unpad, mlm)
            if ours is None:
                continue
            tag = f"{what}, train.unpad {unpad}"
            # dump model writes [loss, mlm loss, nsp loss]: the MLM part (BERT's MLM-only loss is it).
            for name, a, b in [("MLM loss", ours["loss"][1:2], loss.reshape(1)), ("MLM logits at the masked positions",
                                                                                ours["mlm_logits"], logits)]:
                err = rel(a, b)
                checks.expect(f"{tag}: {name:<36} rel error {err:.2e} (tolerance {tol:.0e})", err <= tol)
            ours_g = {k[5:]: v for k, v in ours.items() if k.startswith("grad.")}
            # BERT's key bias adds q.b_k to every score of a row, which softmax ignores: its true
            # gradient is 0 and both sides hold FP32 noise, which must be tiny next to the query
            # bias's gradient (1e-5; as test_hf_parity).
            zero = [n for n in grads if n.endswith("attention.self.key.bias")]
            for n in zero:
                scale = grads[n.replace("key", "query")].norm().item()
                worst = max(ours_g[n].norm().item(), grads[n].norm().item()) / scale
                checks.expect(f"{tag}: {n} is zero ({worst:.1e} of the query bias's, at most 1e-5)", worst <= 1e-5)
            errs = {n: rel(ours_g[n].reshape(g.shape), g) for n, g in grads.items() if n in ours_g and n not in zero}
            name = max(errs, key=errs.get)
            checks.expect(f"{tag}: {len(errs) + len(zero)} of {len(grads)} gradients, worst {name}: rel error "
                          f"{errs[name]:.2e} (tolerance {tol:.0e})",
                          len(errs) + len(zero) == len(grads) and all(n in ours_g for n in zero) and errs[name] <= tol)
        without = dict(packed, document_starts=torch.zeros_like(packed["document_starts"]))
        ours = bertpre_step(dump, tmp, model, without, "auto", mlm)
        if ours is not None:
            err = rel(ours["mlm_logits"], logits)
            checks.expect(f"{what}: the same rows without their starts differ (rel error {err:.2e} > 1e-3)", err > 1e-3)


rel = checks.rel_error


def main():
    dump = sys.argv[1]
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for seed in (0, 1):
        torch.manual_seed(seed)
        bert = BertForMaskedLM(BertConfig(vocab_size=61, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                                          intermediate_size=40, max_position_embeddings=32, type_vocab_size=2,
                                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                          initializer_range=0.2, pad_token_id=PAD)).float()
        modern = ModernBertForMaskedLM(ModernBertConfig(
            vocab_size=61, hidden_size=32, intermediate_size=24, num_hidden_layers=3, num_attention_heads=4,
            max_position_embeddings=64, local_attention=8, pad_token_id=PAD, bos_token_id=CLS, cls_token_id=CLS,
            eos_token_id=SEP, sep_token_id=SEP, initializer_range=0.2, attn_implementation="eager",
            layer_types=["full_attention", "sliding_attention", "sliding_attention"])).float()
        for model in (bert, modern):
            with torch.no_grad():  # non-trivial norms and biases (the init leaves them at 1 and 0)
                for _, p in model.named_parameters():
                    if p.dim() == 1:
                        p.add_(0.1 * torch.randn_like(p))
            model.train(False)
        compare(dump, bert, f"BERT, seed {seed}", 1e-4, True, 20 + seed)
        compare(dump, modern, f"ModernBERT, seed {seed}", 1e-5, False, 30 + seed)
        if seed == 0:  # one more row, empty (all padding): the micro-batch runs padded either way
            compare(dump, bert, "BERT with an empty row", 1e-4, True, 40, ROWS + [[]])
    sys.exit(checks.exit_status())


if __name__ == "__main__":
    main()

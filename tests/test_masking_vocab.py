"""Random replacements are drawn from the whole vocabulary, wherever its special tokens sit.

create_pretraining_data.py replaces 10% of the masked positions with a token drawn from the
whole vocabulary; bertpre draws uniformly from every id that is not one of the five special
tokens ([PAD], [UNK], [CLS], [SEP], [MASK]; data/masking.c). Two WordPiece vocabularies of
3,000 ids built here from linux-doc's words, the specials at ids 1500-1504 (in the middle)
and at 2995-2999 (last), go through `bertpre prep --dupe-factor 5` on the same text; the
replacements are read back from the shards with h5py (a masked position whose stored token is
neither [MASK] nor its label). For each vocabulary:
  - prep exits 0 (with the specials last it died of a division by zero before);
  - no replacement is a special token;
  - the share of replacements below id 1500 equals that of the ordinary ids (1500 / 2995 in the
    middle case, 1500 / 2995 of [0, 2995) last) within 5 binomial standard deviations: a draw
    from the ids above the specials alone (the former rule) gives 0 in the middle case;
and dynamic masking (train.dynamic_masking) trains 2 steps on the last-specials shards (it
died the same way).

usage: test_masking_vocab.py BERTPRE
"""
import collections
import json
import math
import os
import re
import sys
import tempfile

from data_fixtures import real_lines, require, run
import checks
from checks import expect

bertpre = os.path.abspath(sys.argv[1])
require(bertpre, "hdf5")
with checks.needs("h5py and numpy"):
    import h5py
    import numpy as np

V = 3000
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def vocabulary(lines, special_at):
    chars = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)] + list(".,;:()-'\"/_=*`")
    ordinary = chars + ["##" + c for c in chars]
    counts = collections.Counter(w for l in lines for w in re.findall(r"[a-z]+", l.lower()))
    for w, _ in counts.most_common():
        if len(ordinary) == V - len(SPECIALS):
            break
        if len(w) > 1:
            ordinary.append(w)
    assert len(ordinary) == V - len(SPECIALS)
    return ordinary[:special_at] + SPECIALS + ordinary[special_at:]


with tempfile.TemporaryDirectory() as tmp:
    lines = real_lines(600_000)
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w") as f:
        for i, line in enumerate(lines):
            f.write(line + ("\n\n" if i % 20 == 19 else "\n"))
    for where, special_at in (("in the middle", 1500), ("last", V - len(SPECIALS))):
        vocab_dir = os.path.join(tmp, f"vocab-{special_at}")
        os.makedirs(vocab_dir)
        vocab = os.path.join(vocab_dir, "vocab.txt")
        tokens = vocabulary(lines, special_at)
        with open(vocab, "w") as f:
            f.write("\n".join(tokens) + "\n")
        specials = {tokens.index(s) for s in SPECIALS}
        mask_id = tokens.index("[MASK]")
        shards = os.path.join(tmp, f"shards-{special_at}")
        p = run([bertpre, "prep", "--tokenizer", vocab, "--output", shards, "--format", "lines", "--seq-length", 128,
                 "--max-predictions", 20, "--dupe-factor", 5, "--shards", 1, "--no-progress", corpus], check=False)
        expect(f"specials {where} (ids {special_at}-{special_at + 4}): prep exits 0", p.returncode == 0,
               f"exit {p.returncode}\n{p.stderr[-2000:]}")
        if p.returncode != 0:
            continue
        drawn = []
        for path in sorted(os.listdir(shards)):
            with h5py.File(os.path.join(shards, path), "r") as h:
                ids, pos, labels = h["input_ids"][:], h["masked_lm_positions"][:], h["masked_lm_ids"][:]
            for r in range(len(ids)):
                for k in range(pos.shape[1]):
                    if pos[r, k] == 0:
                        break
                    t = int(ids[r, pos[r, k]])
                    if t != mask_id and t != int(labels[r, k]):
                        drawn.append(t)
        drawn = np.array(drawn)
        n = len(drawn)
        expect(f"specials {where}: {n} random replacements, none of them a special token",
               n > 1000 and not any(int(t) in specials for t in drawn), f"{n} drawn")
        share = float(np.mean(drawn < 1500)) if n else 0.0
        want = 1500 / (V - len(SPECIALS))
        tol = 5 * math.sqrt(want * (1 - want) / max(n, 1))
        expect(f"specials {where}: share of replacements below id 1500 {share:.4f} = {want:.4f} +- {tol:.4f} "
               "(5 binomial standard deviations)", abs(share - want) <= tol, f"{n} drawn, min {drawn.min()}, "
               f"max {drawn.max()}" if n else "none drawn")

    # Dynamic masking draws through the same rule.
    last = V - len(SPECIALS)
    cfg = os.path.join(tmp, "dynamic.json")
    with open(cfg, "w") as f:
        json.dump({"model": {"vocab_size": V, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                             "intermediate_size": 64, "max_position_embeddings": 128},
                   "train": {"data": os.path.join(tmp, f"shards-{last}"), "tokenizer": os.path.join(
                       tmp, f"vocab-{last}", "vocab.txt"), "micro_batch_size": 4, "seq_length": 128,
                       "max_predictions_per_seq": 20, "steps": 2, "dynamic_masking": 1, "log_every": 1}}, f)
    p = run([bertpre, "train", cfg], check=False)
    expect("dynamic masking with the specials last: 2 steps train (exit 0)", p.returncode == 0 and "step" in p.stdout,
           f"exit {p.returncode}\n{p.stdout[-1500:]}{p.stderr[-1500:]}")

sys.exit(checks.exit_status())

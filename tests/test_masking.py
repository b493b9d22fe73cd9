"""Dynamic masking at a chosen rate (train.mask_prob), against Google's rule written here.

create_pretraining_data.py masks num_to_predict = min(max_predictions_per_seq,
max(1, round(len(tokens) * masked_lm_prob))) positions of a row of len(tokens) tokens
([CLS] and [SEP] counted, never chosen; Python's round, half to even), each then replaced by
[MASK] with probability 0.8, by a random token with 0.1, kept with 0.1. Shards that `bertpre
prep` writes from linux-doc text at seq 128 with the default rate and 20 masked columns go
through the loader's dynamic masking (tests/dump.c loader, LOADER_DUMP_MASKING) at 0.3 into
38 columns, as `bertpre train` with train.mask_prob 0.3 reads them:
  - every row masks exactly the rule's count (38 at most: round(128 x 0.3) = 38), at distinct
    ascending positions inside the real tokens, none of them [CLS] or [SEP]; the stored
    20-column masks are undone first (the labels restore the text prep wrote);
  - the share of masked tokens over all rows is 0.3 up to the rounding of each row (within
    0.5 / mean row length);
  - [MASK] / random / kept shares 0.8 / 0.1 / 0.1 within 5 binomial standard deviations
    (a random draw equal to the original token counts as kept: 1 in ~500 here);
prep --eval-masking bert with --masked-lm-prob 0.3 --whole-word-mask: its eval shard equals, bitwise,
the eval shard of a prep at BERT's 15% token by token (same seed), its train rows masked at 0.3.
Whole-word masking (prep --whole-word-mask; train.whole_word_mask for dynamic masking), with a
SentencePiece model trained by bertpre (words: a piece with a leading U+2581 and the pieces
without one after it, read with the sentencepiece package) and a WordPiece vocab.txt built
here (words: a piece and its "##" pieces), words never spanning [CLS]/[SEP]; stored by prep at
0.15 and drawn by the loader at 0.3, each:
  - every word masked whole or not at all, and multi-piece words among the masked ones (a word
    of more pieces than the row's count counts as its pieces: Google's rule would never mask it);
  - the outcome is one Google's rule can give: its words shuffled and taken while they fit the
    count, so a row masks the count exactly or every word it left is longer than the room left
    (then there is an order of the words giving exactly this choice);
  - a word's chance to be masked does not depend on where it stands (words starting in the first
    and second half of their row, within 5 standard deviations of the difference);
  - the masked share within 0.03 below the rate (the rows that fall short of their count) and
    80/10/10 per token within 5 binomial standard deviations;
and the config rules, checked before any work: mask_prob without dynamic_masking, and
max_predictions_per_seq below round(seq_length x mask_prob), whole_word_mask without a
train.tokenizer, exit 1 naming the field and the count needed; mask_prob 0.3 with 38 columns trains on the 20-column shards and evaluates their
held-out rows with the stored masks; --resume with another mask_prob is refused naming it.

usage: test_masking.py BERTPRE DUMP
"""
import json
import math
import os
import subprocess
import sys
import tempfile

from data_fixtures import real_lines, require, run, train_tokenizer
import checks
from checks import expect

bertpre, driver = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
require(bertpre, "hdf5", "sentencepiece")
with checks.needs("h5py, numpy and sentencepiece"):
    import h5py
    import numpy as np
    import sentencepiece

S, P_STORED, RATE, P = 128, 20, 0.3, 38
CLS, SEP, MASK = 2, 3, 4  # bertpre's SentencePiece layout: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4


def google_count(n_tokens, rate, max_predictions):
    """num_to_predict of create_pretraining_data.py for a row of n_tokens tokens."""
    return min(max_predictions, max(1, int(round(n_tokens * rate))))


def dump(spec, masking, batches, vocab=500):
    env = dict(os.environ, LOADER_DUMP_MASKING=masking)
    p = subprocess.run([driver, "loader", spec, "16", str(vocab), str(batches), "1"], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        expect("dump loader exits 0", False, p.stderr[-2000:])
        sys.exit(checks.exit_status())
    rows = []
    for line in p.stdout.splitlines():
        ids, mask, _, pos, labels, _ = (list(map(int, part.split())) for part in line.split(" | "))
        rows.append((ids, mask, pos, labels))
    return rows


def words_of(ids, n, continues):
    """The candidate words of a row's first n tokens: a piece that continues a word joins the one
    before it; [CLS], [SEP] and padding are no candidates and end a word."""
    words, open_word = [], False
    for i in range(n):
        t = ids[i]
        if t in (0, CLS, SEP):
            open_word = False
            continue
        if open_word and continues(t):
            words[-1].append(i)
        else:
            words.append([i])
        open_word = True
    return words


def stored_rows(path):
    """(masked ids, input_mask, positions, labels) of every row of a shard, as `dump loader` prints them."""
    with h5py.File(path, "r") as h:
        return list(zip(h["input_ids"][:].tolist(), h["input_mask"][:].tolist(),
                        h["masked_lm_positions"][:].tolist(), h["masked_lm_ids"][:].tolist()))


def check_whole_words(what, rows, rate, max_predictions, continues):
    broken, invalid, counts = [], [], {"mask": 0, "random": 0, "kept": 0}
    masked = tokens = multi = 0
    halves = [[0, 0], [0, 0]]  # per half of the row: words, masked words
    for ids, mask, pos, labels in rows:
        n = sum(mask)
        chosen = [p for p in pos if p > 0]
        original = list(ids)
        for p, label in zip(chosen, labels):
            original[p] = label
            t = ids[p]
            counts["mask" if t == MASK else "kept" if t == label else "random"] += 1
        words = words_of(original, n, continues)
        want = min(max_predictions, max(1, int(round(n * rate))), sum(map(len, words)))
        # A word of more pieces than the row's count is its pieces, each a word (else never masked).
        words = [part for w in words for part in ([w] if len(w) <= want else [[p] for p in w])]
        taken = set(chosen)
        whole = [w for w in words if taken.issuperset(w)]
        broken += [(w, chosen) for w in words if taken & set(w) and not taken.issuperset(w)]
        multi += sum(len(w) > 1 for w in whole)
        left = [w for w in words if not taken & set(w)]
        if len(chosen) > want or (len(chosen) < want and any(len(w) <= want - len(chosen) for w in left)):
            invalid.append((n, want, len(chosen), [len(w) for w in left]))
        for w in words:
            half = halves[2 * w[0] >= n]
            half[0] += 1
            half[1] += taken.issuperset(w)
        masked += len(chosen)
        tokens += n
    expect(f"{what}: {len(rows)} rows, every word masked whole or not at all ({len(broken)} broken), {multi} "
           f"multi-piece words among the masked", rows and not broken and multi > 50, broken[:3])
    expect(f"{what}: every row's choice is one Google's rule gives: its count exactly, or every word left longer "
           f"than the room left ({len(invalid)} not)", not invalid, invalid[:3])
    (w1, m1), (w2, m2) = halves
    p1, p2, pooled = m1 / w1, m2 / w2, (m1 + m2) / (w1 + w2)
    sd = math.sqrt(pooled * (1 - pooled) * (1 / w1 + 1 / w2))
    expect(f"{what}: a word's chance to be masked, first half {p1:.4f} of {w1} vs second half {p2:.4f} of {w2}: "
           f"within 5 standard deviations ({5 * sd:.4f})", abs(p1 - p2) <= 5 * sd)
    share = masked / tokens
    expect(f"{what}: masked share {share:.4f} within 0.03 below the rate {rate}", rate - 0.03 <= share <= rate + 0.01)
    for kind, p in (("mask", 0.8), ("random", 0.1), ("kept", 0.1)):
        tol = 5 * math.sqrt(p * (1 - p) / masked)
        expect(f"{what}: {kind} {counts[kind] / masked:.4f} of {masked} masked tokens = {p} +- {tol:.4f}",
               abs(counts[kind] / masked - p) <= tol)


def wordpiece_vocab(lines, path):
    """A vocab.txt with the five specials first, characters, their ## forms and linux-doc's
    frequent words: rarer words split into ## pieces."""
    import collections
    import re
    chars = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)] + list(".,;:()-'\"/_=*`")
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + ["##" + c for c in chars]
    counts = collections.Counter(w for line in lines for w in re.findall(r"[a-z]+", line.lower()))
    tokens += [w for w, _ in counts.most_common(1500) if len(w) > 1][:1000]
    tokens += ["##" + w for w in ("ing", "ed", "er", "ly", "tion", "es", "al", "ic", "ent")]
    with open(path, "w") as f:
        f.write("\n".join(tokens) + "\n")
    return tokens


with tempfile.TemporaryDirectory() as tmp:
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w") as f:
        for i, line in enumerate(real_lines(300_000)):
            f.write(line + ("\n\n" if i % 20 == 19 else "\n"))
    spm = train_tokenizer(bertpre, os.path.join(tmp, "spm"), [corpus], 500, fmt="lines", pattern=None)
    shards = os.path.join(tmp, "shards")
    run([bertpre, "prep", "--tokenizer", spm, "--output", shards, "--format", "lines", "--seq-length", S,
         "--max-predictions", P_STORED, "--eval-fraction", 0.05, "--dupe-factor", 1, "--shards", 1, "--no-progress",
         corpus])
    train_shard = os.path.join(shards, "train-00000.hdf5")
    with h5py.File(train_shard, "r") as h:
        stored = {"ids": h["input_ids"][:], "pos": h["masked_lm_positions"][:], "labels": h["masked_lm_ids"][:]}
    originals = stored["ids"].copy()  # the text prep tokenized: its masks undone
    for r in range(len(originals)):
        for k in range(P_STORED):
            if stored["pos"][r, k] == 0:
                break
            originals[r, stored["pos"][r, k]] = stored["labels"][r, k]
    originals = {tuple(row) for row in originals.tolist()}

    rows = dump(train_shard, f"{spm}:{RATE}:{P}", 40)
    wrong_count, outside, special, unsorted, not_restored = [], [], [], [], []
    masked = tokens = n_mask = n_kept = n_random = 0
    for ids, mask, pos, labels in rows:
        n = sum(mask)
        chosen = [p for p in pos if p > 0]
        want = google_count(n, RATE, P)
        if len(chosen) != want or any(p != 0 for p in pos[len(chosen):]):
            wrong_count.append((n, len(chosen), want))
        if chosen != sorted(set(chosen)):
            unsorted.append(chosen)
        if any(p >= n for p in chosen):
            outside.append((n, chosen))
        restored = list(ids)
        for p, label in zip(chosen, labels):
            restored[p] = label
            if label in (CLS, SEP):
                special.append((p, label))
            if ids[p] == MASK:
                n_mask += 1
            elif ids[p] == label:
                n_kept += 1
            else:
                n_random += 1
        if tuple(restored) not in originals:
            not_restored.append(chosen)
        masked += len(chosen)
        tokens += n
    expect(f"{len(rows)} rows, each masking Google's count min({P}, max(1, round(tokens x {RATE}))) "
           f"({len(wrong_count)} differ)", len(rows) == 640 and not wrong_count, wrong_count[:5])
    expect("masked positions distinct, ascending, inside the real tokens, never [CLS] or [SEP]",
           not unsorted and not outside and not special, (unsorted[:2], outside[:2], special[:5]))
    expect("the labels restore the text prep wrote (the stored masks undone before remasking)", not not_restored,
           not_restored[:3])
    share, mean_len = masked / tokens, tokens / len(rows)
    expect(f"masked share {share:.4f} = {RATE} within the rounding of each row (0.5 / {mean_len:.1f} tokens)",
           abs(share - RATE) <= 0.5 / mean_len)
    for what, count, p in (("[MASK]", n_mask, 0.8), ("random", n_random, 0.1), ("kept", n_kept, 0.1)):
        tol = 5 * math.sqrt(p * (1 - p) / masked)
        expect(f"{what}: {count / masked:.4f} of {masked} masked positions = {p} +- {tol:.4f} (5 binomial standard "
               f"deviations)", abs(count / masked - p) <= tol)

    # Whole words: stored by prep at the default rate, drawn by the loader at 0.3.
    sp = sentencepiece.SentencePieceProcessor(model_file=spm)
    sp_continues = lambda t: t > MASK and not sp.id_to_piece(t).startswith("\u2581")  # noqa: E731
    vocab_dir = os.path.join(tmp, "wordpiece")
    os.makedirs(vocab_dir)
    vocab = os.path.join(vocab_dir, "vocab.txt")
    wp_tokens = wordpiece_vocab(real_lines(300_000), vocab)
    wp_continues = lambda t: wp_tokens[t].startswith("##")  # noqa: E731
    for name, tok, continues, size in (("SentencePiece", spm, sp_continues, 500),
                                       ("WordPiece", vocab, wp_continues, len(wp_tokens))):
        wwm = os.path.join(tmp, f"wwm-{name}")
        run([bertpre, "prep", "--tokenizer", tok, "--output", wwm, "--format", "lines", "--seq-length", S,
             "--max-predictions", P_STORED, "--whole-word-mask", "--dupe-factor", 1, "--shards", 1, "--no-progress",
             corpus])
        shard = os.path.join(wwm, "train-00000.hdf5")
        check_whole_words(f"{name}, prep --whole-word-mask", stored_rows(shard), 0.15, P_STORED, continues)
        check_whole_words(f"{name}, dynamic at {RATE}", dump(shard, f"{tok}:{RATE}:{P}:wwm", 40, size), RATE, P, continues)

    model = {"vocab_size": 512, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
             "intermediate_size": 64, "max_position_embeddings": S}
    train = {"data": os.path.join(shards, "train-*.hdf5"), "eval_data": os.path.join(shards, "eval-00000.hdf5"),
             "tokenizer": spm, "micro_batch_size": 8, "seq_length": S, "max_predictions_per_seq": P, "steps": 4,
             "log_every": 1, "dynamic_masking": 1, "mask_prob": RATE, "eval_batches": 2}
    cfg = os.path.join(tmp, "run.json")
    with open(cfg, "w") as f:
        json.dump({"model": model, "train": train}, f)
    for what, sets, words in (
            ("mask_prob 0.3 with dynamic_masking 0", ["train.dynamic_masking=0"],
             ["'mask_prob' = 0.3", "dynamic_masking"]),
            ("mask_prob 0.3 at seq 128 with max_predictions_per_seq 20", ["train.max_predictions_per_seq=20"],
             ["'max_predictions_per_seq' = 20", "38 positions", "raise it to 38"]),
            ("whole_word_mask without train.tokenizer", ["train.whole_word_mask=1", "train.tokenizer="],
             ["'whole_word_mask' = 1", "train.tokenizer"])):
        p = run([bertpre, "train", cfg, *sum((["--set", s] for s in sets), [])], check=False)
        expect(f"{what}: exit 1 naming the file, the field and the count, before any step",
               p.returncode == 1 and cfg in p.stderr and all(w in p.stderr for w in words) and "step" not in p.stdout,
               p.stderr)
    root = os.path.join(tmp, "ckpt")
    p = run([bertpre, "train", cfg, "--set", f"train.checkpoint_dir={root}", "--set", "train.checkpoint_every=2"],
            check=False)
    expect("mask_prob 0.3 into 38 columns on shards of 20 stored columns: trains (the stored 20 widened), its "
           "held-out rows evaluated with their stored masks", p.returncode == 0 and "step     4/4" in p.stdout and
           "eval | 16 sequences" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:])
    p = run([bertpre, "train", cfg, "--set", "train.whole_word_mask=1", "--set", "train.steps=2",
             "--set", "train.checkpoint_dir="], check=False)
    expect("whole_word_mask 1 with the tokenizer: 2 steps train", p.returncode == 0 and "step     2/2" in p.stdout,
           p.stdout[-1500:] + p.stderr[-1500:])
    p = run([bertpre, "train", cfg, "--resume", os.path.join(root, "step-000000002"),
             "--set", f"train.checkpoint_dir={root}", "--set", "train.mask_prob=0.25"], check=False)
    expect("--resume with another mask_prob: exit 1 naming train.mask_prob and both values",
           p.returncode == 1 and "train.mask_prob is 0.3 in the checkpoint and 0.25 in the config" in p.stderr,
           p.stderr)

    # prep --eval-masking bert: the held-out rows masked as BERT's whatever the train rows' masking,
    # so that runs masked otherwise are evaluated on the same rows with the same masks.
    both = {}
    for name, extra in (("plain", []), ("wwm30", ["--masked-lm-prob", 0.3, "--whole-word-mask", "--eval-masking",
                                                    "bert"])):
        out = os.path.join(tmp, f"eval-{name}")
        run([bertpre, "prep", "--tokenizer", spm, "--output", out, "--format", "lines", "--seq-length", S,
             "--max-predictions", P, "--eval-fraction", 0.05, "--dupe-factor", 1, "--no-progress", *extra, corpus])
        both[name] = {k: [stored_rows(os.path.join(out, f"{k}-00000.hdf5"))] for k in ("train", "eval")}
    same_eval = both["plain"]["eval"] == both["wwm30"]["eval"]
    share = lambda rows: sum(sum(1 for p in pos if p > 0) for _, _, pos, _ in rows) / sum(sum(m) for _, m, _, _ in rows)
    e, t = share(both["wwm30"]["eval"][0]), share(both["wwm30"]["train"][0])
    expect(f"prep --masked-lm-prob 0.3 --whole-word-mask --eval-masking bert: its eval shard bitwise the one of a "
           f"prep at BERT's 15% token by token (masked share {e:.3f}), its train shard masked at 0.3 ({t:.3f})",
           same_eval and abs(e - 0.15) < 0.02 and abs(t - 0.3) < 0.04, (e, t))

sys.exit(checks.exit_status())

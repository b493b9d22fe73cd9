#!/usr/bin/env python3
"""WordPiece encoding speed, side by side on one core: bertpre's (`bertpre bench tokenizer`)
and the Rust `tokenizers` library behind transformers' BertTokenizerFast, on the same lines
of text with the same vocab.txt. Each side encodes every line without [CLS]/[SEP], one pass
untimed, then REPEAT timed passes; the best pass's CPU seconds count (CPU time, so other
work on the machine inflates neither side). BertTokenizerFast runs its batch call
(encode_batch, as datasets.map uses it) with TOKENIZERS_PARALLELISM=false: serial, in the
calling thread, no Python call per line.

With --bpe, byte-level BPE instead (ModernBERT's kind of tokenizer.json): bertpre's against
the same library's Tokenizer loaded from the same tokenizer.json (--tokenizer-json, or one of
50,368 ids, ModernBERT's size, trained on the text with NFC, the ByteLevel pre-tokenizer and
[CLS]/[SEP]/[MASK] added), likewise.

usage: tools/bench_tokenizer.py BERTPRE [--vocab VOCAB_TXT [--cased] | --bpe [--tokenizer-json FILE]]
                                [--mb MB] [--repeat N]
Text: the first MB megabytes (default 10) of non-empty lines of linux-doc's .rst sources
(Debian's linux-doc-6.1), or --text FILE. Without --vocab, a 30,522-token uncased vocabulary
(bert-base's size) is trained on that text with the tokenizers library."""
import argparse
import glob
import gzip
import os
import re
import subprocess
import sys
import tempfile
import time

import common  # noqa: E402

common.need("bench_tokenizer", "transformers", "tokenizers")
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"
from transformers import BertTokenizerFast  # noqa: E402


def linux_doc_lines(mb):
    root = common.linux_doc()
    if root is None:
        sys.exit("bench_tokenizer: no linux-doc (tools/setup.sh installs linux-doc-6.1); pass --text FILE")
    lines, size = [], 0
    for path in sorted(glob.glob(os.path.join(root, "**", "*.rst.gz"), recursive=True)):
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if line:
                    lines.append(line)
                    size += len(line.encode()) + 1
        if size >= mb * 1e6:
            break
    return lines


def best_pass(encode, lines, repeat):
    """The best of `repeat` timed passes (one untimed first) in CPU seconds, and the tokens."""
    best, tokens = 1e30, 0
    for k in range(repeat + 1):
        t0 = time.process_time()
        enc = encode(lines)
        dt = time.process_time() - t0
        tokens = sum(len(e.ids) for e in enc)
        del enc
        if k > 0:
            best = min(best, dt)
    return best, tokens


def bench_bpe(a, tmp, text, lines, size):
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    path = a.tokenizer_json
    if not path:
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train([text], trainers.BpeTrainer(vocab_size=50368 - 5, show_progress=False,
                                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        tok.add_special_tokens(["[UNK]", "[CLS]", "[SEP]", "[PAD]", AddedToken("[MASK]", lstrip=True, normalized=False)])
        path = os.path.join(tmp, "tokenizer.json")
        tok.save(path)
    out = subprocess.run([a.bertpre, "bench", "tokenizer", "--model", path, "--repeat", str(a.repeat), text],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(out.stderr)
    print(out.stdout.strip())
    ours_s = float(re.search(r"([0-9.]+) CPU s = ([0-9.]+) MB/s", out.stdout).group(1))
    ours_tokens = int(re.search(r"MB, (\d+) tokens", out.stdout).group(1))
    fast = Tokenizer.from_file(path)
    best, tokens = best_pass(lambda ls: fast.encode_batch(ls, add_special_tokens=False), lines, a.repeat)
    print(f"bench tokenizer: tokenizers {__import__('tokenizers').__version__} (Rust, encode_batch, serial), "
          f"{len(lines)} lines, {size / 1e6:.2f} MB, {tokens} tokens: best of {a.repeat} passes {best:.3f} CPU s = "
          f"{size / 1e6 / best:.2f} MB/s, {tokens / best:.0f} tokens/s on one thread")
    print(f"bertpre / tokenizers: {best / ours_s:.2f}x the speed (tokens: {ours_tokens} vs {tokens})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bertpre")
    ap.add_argument("--vocab")
    ap.add_argument("--cased", action="store_true", help="the vocabulary is cased")
    ap.add_argument("--bpe", action="store_true", help="byte-level BPE (a tokenizer.json) instead of WordPiece")
    ap.add_argument("--tokenizer-json", help="--bpe: this tokenizer.json instead of one trained on the text")
    ap.add_argument("--text", help="a text file, one line a unit")
    ap.add_argument("--mb", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if a.text:
            with open(a.text, encoding="utf-8", errors="replace") as f:
                lines = [l.rstrip("\n") for l in f]
        else:
            lines = linux_doc_lines(a.mb)
        text = os.path.join(tmp, "text.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        size = os.path.getsize(text)
        if a.bpe:
            bench_bpe(a, tmp, text, lines, size)
            return
        vocab = a.vocab
        if not vocab:
            from tokenizers import BertWordPieceTokenizer
            trainer = BertWordPieceTokenizer(lowercase=True)
            trainer.train([text], vocab_size=30522, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                          show_progress=False)
            trainer.save_model(tmp)
            vocab = os.path.join(tmp, "vocab.txt")
        casing = ["--cased"] if a.cased else ["--lower-case"]
        out = subprocess.run([a.bertpre, "bench", "tokenizer", "--model", vocab, "--repeat", str(a.repeat), *casing,
                              text], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(out.stderr)
        print(out.stdout.strip())
        m = re.search(r"([0-9.]+) CPU s = ([0-9.]+) MB/s, (\d+) tokens/s", out.stdout)
        ours_s = float(m.group(1))
        ours_tokens = int(re.search(r"MB, (\d+) tokens", out.stdout).group(1))

        fast = BertTokenizerFast(vocab, do_lower_case=not a.cased)._tokenizer
        best, tokens = best_pass(lambda ls: fast.encode_batch(ls, add_special_tokens=False), lines, a.repeat)
        print(f"bench tokenizer: BertTokenizerFast (tokenizers, Rust, encode_batch, serial), {len(lines)} lines, "
              f"{size / 1e6:.2f} MB, {tokens} tokens: best of {a.repeat} passes {best:.3f} CPU s = "
              f"{size / 1e6 / best:.2f} MB/s, {tokens / best:.0f} tokens/s on one thread")
        print(f"bertpre / BertTokenizerFast: {best / ours_s:.2f}x the speed (tokens: {ours_tokens} vs {tokens})")


if __name__ == "__main__":
    main()

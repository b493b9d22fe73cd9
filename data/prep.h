// `bertpre prep`: raw text -> tokenizer -> documents -> NSP pairs -> masking -> HDF5 shards.
//
// Streaming: the text is read in chunks of about chunk_bytes of whole documents; a chunk is
// tokenized and turned into instances by one of `threads` workers while the reader fills
// the next chunks and one writer thread per output file appends finished chunks, in chunk
// order, to its shard (compressing in parallel with the other files). At most 2 x threads chunks are in memory, whatever the corpus size. The
// random-next segment of an NSP pair comes from another document of the same chunk.
//
// Instances follow google-research/bert's create_pretraining_data.py: segments of whole
// sentences filling max_seq_length - 3 tokens (with probability short_seq_prob a shorter
// random target), 50% random next (a chunk of one long sentence is split at a random
// token for the actual-next half instead of always taking a random next, which would skew
// the labels), truncation of the longer segment at a random end,
// masking per masking.h, dupe_factor passes with different masks. Each chunk's instances
// are shuffled and dealt round-robin to the shards, so shard sizes differ by at most one.
//
// Or, for the masked LM alone (packing PREP_FULL_SENTENCES / PREP_DOC_SENTENCES, RoBERTa's
// FULL-SENTENCES and DOC-SENTENCES), rows [CLS] text [SEP] of whole sentences in document
// order filling seq_length - 2 tokens: FULL-SENTENCES goes on with a row into the next document
// of the chunk with a [SEP] between the two, DOC-SENTENCES ends a row with its document (the
// last row of a document, or of a chunk, may be shorter). A sentence longer than a row is cut
// into rows of its consecutive pieces: no token is dropped. PREP_CONTIGUOUS fills every row
// to the brim from the same stream, cutting sentences where a row ends (Hugging Face
// run_mlm.py's group_texts, fairseq's break mode "none"; documents still joined by [SEP]). Segment ids and NSP labels are 0;
// the shards' "packing" attribute says what they hold (data/shard.h).
// With separate_documents (FULL-SENTENCES or contiguous, ModernBERT's packing) each document,
// or each piece of one that goes on in the next row, is its own [CLS] ... [SEP] inside the
// row: [CLS] d1 [SEP] [CLS] d2 [SEP] ..., a boundary of two tokens where the plain packings put
// one [SEP]. Contiguous rows start a new row rather than put [SEP] [CLS] with no room for a token
// after it (so a row may end up to two tokens short); FULL-SENTENCES still takes whole
// sentences. The shards get the dataset document_starts (seq_length / 3 columns): each row's
// piece starts, the position of their [CLS], so that training can keep attention inside each
// document; its presence is what marks such shards (the "packing" attribute is unchanged).
//
// Deterministic for a seed: every draw is keyed by (seed, chunk, document, pass), so the
// output does not depend on the thread count. Under mpirun, rank r of W (environment
// OMPI_COMM_WORLD_RANK/SIZE or PMI_RANK/SIZE) takes chunks r, r + W, ... and writes its own
// files PREFIX-{r*shards + k}.hdf5 and eval-{r}.hdf5.
#pragma once
#include <stdint.h>
#include "data/text.h"

// How instances are made; the names are the shards' "packing" attribute and prep's --packing.
typedef enum { PREP_PAIRS, PREP_FULL_SENTENCES, PREP_DOC_SENTENCES, PREP_CONTIGUOUS } prep_packing;
extern const char *const prep_packing_names[4];  // "pairs", "full-sentences", "doc-sentences", "contiguous"
// Why separate_documents does not go with `packing` (one line, naming --separate-documents and
// the packings it takes), or NULL when it does (full-sentences, contiguous).
const char *prep_separate_documents_refusal(prep_packing packing);

typedef struct {
    const char *tokenizer_model;  // SentencePiece FILE.model or WordPiece vocab.txt
    const char *tokenizer_sha256; // its file's SHA-256, written into every shard (NULL: none)
    int lower_case, strip_accents;  // WordPiece casing: -1 default, 0/1 (tokenizer_options)
    char *const *inputs;
    int n_inputs;
    const char *pattern;  // glob for files inside input directories (NULL: all)
    text_options text;
    const char *output_dir;
    const char *prefix;    // train shard file name prefix
    int shards;            // train shards per rank
    double eval_fraction;  // share of documents held out for eval-{rank}.hdf5 (0: none)
    int seq_length, max_predictions;
    double masked_lm_prob, short_seq_prob;
    int whole_word_mask;  // 1: mask whole words (create_pretraining_data.py's do_whole_word_mask)
    int eval_bert_masking;  // 1: the held-out rows masked as BERT's: 15% of tokens, token by token,
                            // whatever the train rows' masking (comparable held-out numbers)
    prep_packing packing; // NSP pairs, or MLM-only packed rows
    int separate_documents;  // packed rows: each document its own [CLS] ... [SEP], recorded (see above)
    int dupe_factor;
    uint64_t seed;
    int threads;
    int rank, world_size;
    long chunk_bytes;
    int gzip_level;
    int progress;  // 1: a progress bar on stderr
    int strict;    // 1: text that gives poor instances (see prep_run) is an error, not a warning
} prep_options;

typedef struct {
    long documents, eval_documents, sentences, tokens;
    long unknown_tokens;  // tokens that are the tokenizer's <unk>
    long single_sentence_documents;
    long cut_tokens;      // tokens beyond seq_length - 3 in sentences longer than that
    long cut_sentences;   // sentences longer than that
    long dropped_tokens;  // a document's tokens in no instance (truncated, or their pair left out), all passes
    long train_instances, eval_instances;
    double real_tokens;   // tokens of the rows written, [CLS] and [SEP] included (input_mask ones)
    double masked;        // their masked positions
    long unmasked_rows;   // rows without a masked position
    long skipped_lines;   // JSONL lines skipped as bad (text_options.skip_bad_lines)
    double text_bytes, seconds;
    int vocab_size;
} prep_stats;

// Text giving poor instances, mostly single-sentence documents or over 5% of the tokens in
// sentences longer than a sequence, is a warning on stderr naming the likely fix, or with
// `strict` an error that writes nothing.
prep_stats prep_run(const prep_options *options);

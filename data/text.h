// Raw text to documents of sentences, streaming, for `bertpre prep` and for training the
// tokenizer. Five input formats:
//   TEXT_SENTENCE_LINES  one sentence per line, a blank line between documents (the format
//                        of google-research/bert and NVIDIA's scripts);
//   TEXT_PLAIN           running text: paragraphs separated by blank lines, split into
//                        sentences here; a document is a whole file or each blank-line block;
//   TEXT_JSONL           one JSON object per line, a document each, its text in a string
//                        field (datasets' to_json, WikiExtractor --json), read as TEXT_PLAIN
//                        running text. A line that is not a JSON object with that string
//                        field is an error naming the file and line, or skipped with a
//                        warning (skip_bad_lines; the first five named, then a count).
//   TEXT_PARQUET         a Parquet file's rows, a document each, their text in a string
//                        column (text_field), read as TEXT_JSONL: through pyarrow, by
//                        tools/parquet_text.py, started for each file (BERTPRE_TOOLS_DIR, the
//                        environment variable or the build's source tree, says where), which
//                        streams the column a record batch at a time; a null value is a bad
//                        row, as skip_bad_lines says. The reader's error ends the reading.
//   TEXT_ARROW           Arrow IPC files (stream or file form) read as TEXT_PARQUET, by the
//                        same reader: what `datasets`' save_to_disk writes (a folder of
//                        data-NNNNN-of-NNNNN.arrow beside dataset_info.json and state.json).
// Files may be gzip- or zstd-compressed, told by their first bytes (gzip through zlib, which
// passes plain files through; zstd through libzstd where bertpre was built with it).
// A file also ends a document. Inputs are files or directories (walked recursively, in
// sorted order, keeping the names that match a glob pattern such as "*.rst.gz").
#pragma once
#include <stddef.h>

typedef enum { TEXT_SENTENCE_LINES, TEXT_PLAIN, TEXT_JSONL, TEXT_PARQUET, TEXT_ARROW } text_format;

typedef struct {
    text_format format;
    int doc_per_file;        // TEXT_PLAIN: 1 = one document per file, 0 = one per blank-line block
    const char *text_field;  // TEXT_JSONL, TEXT_PARQUET: the field (column) of the text (NULL: "text")
    int skip_bad_lines;      // TEXT_JSONL, TEXT_PARQUET: 1 = skip a bad line (row) with a warning, 0 = stop
    int strict;              // a binary, markup or non-UTF-8 file stops reading with an error instead
                             // of a warning (binary and markup files are otherwise left out, invalid
                             // bytes dropped)
    int keep_markup;         // 1: HTML, XML and RTF files are read as text, tags and all
} text_options;

// Sentences stored back to back, each NUL-terminated, starting at text + start[i].
typedef struct {
    char *text;
    size_t len, cap;
    size_t *start;
    int n, cap_n;
} text_document;

typedef struct text_reader text_reader;

// Exits with a message naming the input when it does not exist or matches no file.
text_reader *text_reader_open(char *const *inputs, int n_inputs, const char *pattern, text_options options);
// The next non-empty document into *doc (its buffers are reused); 0 at the end of input.
int text_reader_next(text_reader *r, text_document *doc);
void text_reader_close(text_reader *r);
int text_reader_file_count(const text_reader *r);
double text_reader_bytes_read(const text_reader *r);  // uncompressed bytes so far
double text_reader_progress(const text_reader *r);    // fraction of the input's bytes on disk
long text_reader_skipped_lines(const text_reader *r); // TEXT_JSONL lines skipped as bad

void text_document_clear(text_document *doc);
void text_document_free(text_document *doc);
void text_document_add(text_document *doc, const char *sentence, size_t len);
// Splits a paragraph of running text into sentences and adds them to doc: a sentence ends
// at . ! or ? (and closing quotes or brackets) followed by a space and an upper-case
// letter, digit, quote or bracket, unless the word is a single letter or a common
// abbreviation (e.g., i.e., Mr., Dr., etc., ...).
void text_split_sentences(text_document *doc, const char *paragraph, size_t len);

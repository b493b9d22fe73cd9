// Writes text as bertpre's text reader sees it, in the sentence-per-line format: one
// sentence per line, a blank line after each document (the input format of `prep --format
// lines` and of google-research/bert's and NVIDIA's create_pretraining_data.py). The
// sentences are those `bertpre prep --format text` encodes: data/text.c splits the running
// text, a document per file (--doc-per-block: per blank-line block). Used by
// tools/bench_nvidia_prep.sh so that both tools read the same sentences.
// Built by meson as build/tests/text_lines.
// usage: text_lines [--pattern GLOB] [--doc-per-block] INPUT... > OUT.txt
#include <stdio.h>
#include <string.h>
#include "data/text.h"

int main(int argc, char **argv) {
    const char *pattern = NULL;
    text_options options = {TEXT_PLAIN, 1, NULL, 0, 0, 0};
    int first = 1;
    for (; first < argc && strncmp(argv[first], "--", 2) == 0; first++) {
        if (strcmp(argv[first], "--pattern") == 0 && first + 1 < argc) {
            pattern = argv[++first];
        } else if (strcmp(argv[first], "--doc-per-block") == 0) {
            options.doc_per_file = 0;
        } else {
            fprintf(stderr, "text_lines: unknown option %s\n", argv[first]);
            return 2;
        }
    }
    if (first == argc) {
        fprintf(stderr, "usage: text_lines [--pattern GLOB] [--doc-per-block] INPUT... > OUT.txt\n");
        return 2;
    }
    text_reader *r = text_reader_open(argv + first, argc - first, pattern, options);
    text_document doc = {0};
    long documents = 0, sentences = 0;
    while (text_reader_next(r, &doc)) {
        for (int i = 0; i < doc.n; i++) {
            // A sentence may span input lines; on one output line its line breaks become spaces.
            for (char *c = doc.text + doc.start[i]; *c; c++) {
                if (*c == '\n' || *c == '\r') *c = ' ';
            }
            puts(doc.text + doc.start[i]);
        }
        putchar('\n');
        documents++;
        sentences += doc.n;
    }
    fprintf(stderr, "text_lines: %d files, %.1f MB of text, %ld documents, %ld sentences\n",
            text_reader_file_count(r), text_reader_bytes_read(r) / 1e6, documents, sentences);
    text_document_free(&doc);
    text_reader_close(r);
    return ferror(stdout) ? 1 : 0;
}

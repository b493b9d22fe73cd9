// Subcommands that live in their own files; main() dispatches to them. Each parses its own
// options, prints its usage on --help, and returns the process exit status.
#pragma once
#include <stddef.h>
#include <stdio.h>
#include "cli/options.h"
#include "data/text.h"

int cmd_tokenizer(int argc, char **argv);
int cmd_prep(int argc, char **argv);
int cmd_bench(int argc, char **argv);
// `bench model`: the roofline model of a training step (cmd_bench_model.c).
int cmd_bench_model(int argc, char **argv);
int cmd_bench_gemm(int argc, char **argv);  // cmd_bench_gemm.c
// Hugging Face interop: export writes a checkpoint as a directory that transformers loads
// with AutoModelForPreTraining and AutoTokenizer (cmd_export.c); import reads a BERT
// checkpoint in safetensors into a weights checkpoint to train from (cmd_import.c).
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);
// bertpre eval: MLM and NSP loss and accuracy of a checkpoint on shards (cmd_eval.c).
int cmd_eval(int argc, char **argv);
// An evaluation's numbers as a JSON object (eval --json, train --eval-json), written beside
// `path` and renamed over it, so that a failed command leaves the last result as it was. Only
// a new file or one holding an earlier result is replaced, never an input of the command
// (`inputs`: files, and directories whose files are inputs) nor a file holding anything else;
// a symbolic link is followed to its target; "-" is standard output, and a character device or
// a FIFO is written straight into. eval_json_probe makes those checks and makes and removes the
// temporary file before the command's work: a path that cannot be written stops it there.
struct eval_result;
struct run_config;
enum { EVAL_INPUTS = 8 };
typedef struct {
    const char *path[EVAL_INPUTS], *what[EVAL_INPUTS];  // up to the first NULL or empty path
} eval_inputs;
typedef enum { RESULT_FILE, RESULT_STDOUT, RESULT_STREAM } result_kind;
void eval_json_probe(const char *path, const char *option, const eval_inputs *inputs);
void eval_json_write(const char *path, const char *option, const eval_inputs *inputs, const struct eval_result *r,
                     const char *checkpoint, const char *data, const struct run_config *cfg);

// The config reference from engine/config.c's field tables (config_doc.c): the fields
// part of `train --help`, and `bertpre config-doc` (docs/CONFIG.md in Markdown).
void config_doc_text(FILE *out);
int cmd_config_doc(int argc, char **argv);

// The program as it was started (argv[0]), for the commands a summary prints: runnable as
// printed from the same directory ("bertpre" when it was found on the PATH).
extern const char *cli_program;

// rank and world size under mpirun (OMPI_COMM_WORLD_* or PMI_*); 0 and 1 otherwise.
void cli_mpi_rank(int *rank, int *world_size);
// The checkpoint directory `source` names: itself when it holds state.json, else the newest
// complete checkpoint under it (said on stdout, prefixed by `command`).
void cli_checkpoint_dir(const char *command, const char *source, char *dir, size_t size);

// WordPiece casing, the same options wherever a tokenizer is taken (tokenizer, prep,
// export): --lower-case / --cased and --strip-accents / --keep-accents, each pair exclusive.
typedef struct {
    int lower, cased, strip, keep;
} cli_casing;
#define CLI_CASING_OPTIONS(c)                                                                                        \
    {"--lower-case", CLI_FLAG, &(c).lower, NULL,                                                                     \
     .help = "a WordPiece vocab.txt: lower-case the text (BERT uncased)",                                             \
     .shown_default = "do_lower_case of a tokenizer_config.json beside the vocabulary, else lower-case"},          \
        {"--cased", CLI_FLAG, &(c).cased, NULL, .help = "a WordPiece vocab.txt: keep the case (BERT cased)"},          \
        {"--strip-accents", CLI_FLAG, &(c).strip, NULL,                                                              \
         .help = "a WordPiece vocab.txt: remove accents (NFD, marks dropped)", .shown_default = "when lower-casing"}, \
    {                                                                                                                \
        "--keep-accents", CLI_FLAG, &(c).keep, NULL, .help = "a WordPiece vocab.txt: keep accents"                   \
    }
// The tokenizer_options of the flags given (exits naming `command` on a contradiction).
void cli_tokenizer_options(const char *command, const cli_casing *c, int *lower_case, int *strip_accents);

// Text input, the same options wherever text is read (prep, tokenizer train): data/text.h's
// formats, the field of the text, markup files, bad JSONL lines, the glob inside directories.
typedef struct {
    int format, markup, bad_lines;
    const char *text_field, *pattern;
} cli_text_input;
#define CLI_TEXT_OPTIONS(t)                                                                                          \
    {"--format", CLI_CHOICE, &(t).format, NULL,                                                                      \
     .help = "lines: a sentence per line, blank line between documents; text: running text, split into sentences "   \
             "here; jsonl: a JSON object per line, a document each, its text (running text) in --text-field; "     \
             "parquet: a Parquet file's rows, a document each, their text in the column --text-field (via pyarrow); " \
             "arrow: the same of Arrow IPC files, as datasets' save_to_disk writes (a split's folder)",             \
     .choices = "lines|text|jsonl|parquet|arrow"},                                                                   \
        {"--text-field", CLI_STRING, &(t).text_field, "NAME", .help = "jsonl, parquet, arrow: the field (column) of the text", \
         .shown_default = "text"},                                                                                   \
        {"--markup", CLI_CHOICE, &(t).markup, NULL,                                                                  \
         .help = "an HTML, XML or RTF input file (by its opening, or a tenth of its text in tags) is left out with "  \
                 "a warning, or read as it is, tags and all",                                                        \
         .choices = "skip|keep"},                                                                                    \
        {"--bad-lines", CLI_CHOICE, &(t).bad_lines, NULL,                                                            \
         .help = "jsonl: a line that is not JSON or lacks the field (parquet, arrow: a row whose text is null) stops with " \
                 "an error naming file and line (row), or is skipped with a warning",                                 \
         .choices = "stop|skip"},                                                                                    \
    {                                                                                                                \
        "--pattern", CLI_STRING, &(t).pattern, "GLOB", .help = "files to take inside directories (e.g. '*.rst.gz')", \
        .shown_default = "all; *.parquet with --format parquet, *.arrow with --format arrow"                         \
    }
// The text_options of those flags (doc_per_file and strict as the command sets them); the
// pattern is --pattern, or *.parquet with --format parquet, *.arrow with --format arrow.
text_options cli_text_options(const cli_text_input *t, int doc_per_file, int strict, const char **pattern);

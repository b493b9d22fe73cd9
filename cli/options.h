// The option parser every subcommand shares: a command is described by a table of options
// (name, type, range or choices, help text), from which cli_parse reads argv and
// cli_print_usage writes --help. Every error names the command, the option and the value
// and exits 1.
#pragma once
#include <stdio.h>

typedef enum {
    CLI_FLAG,    // no value; dest: int, set to 1
    CLI_STRING,  // dest: const char *
    CLI_INT,     // dest: int, within [lo, hi]
    CLI_REAL,    // dest: double, within [lo, hi]
    CLI_CHOICE,  // dest: int, the index of the value in `choices` ("fp32|fp16")
    CLI_LIST,    // repeatable; dest: cli_list, each value appended
} cli_type;

typedef struct {
    const char **items;
    int n, max;
} cli_list;

typedef struct {
    const char *name;        // "--seq-length"; NULL ends a table
    cli_type type;
    void *dest;              // written only when the option is given; its value before is the default
    const char *value_name;  // "N", "DIR", ... (not for flags)
    const char *help;
    double lo, hi;           // CLI_INT, CLI_REAL
    const char *choices;     // CLI_CHOICE
    int required;
    const char *shown_default;  // the default in --help: NULL for dest's value, "" for none
} cli_option;

typedef struct {
    const char *command;   // "prep", "tokenizer train": named in errors and in --help
    const char *synopsis;  // usage lines after "usage: bertpre ", '\n'-separated
    const char *about;     // text between the usage and the options (may be NULL)
    const char *notes;     // text after the options (may be NULL)
    const cli_option *options;
    const char *operand;   // what the non-option arguments are ("CONFIG", "INPUT")
    int min_operands, max_operands;  // max -1: any number
} cli_command;

// Parses argv (the arguments after the command's words). Returns 1 when --help or -h was
// given: the usage was printed on stdout and nothing else was looked at; the caller
// returns 0. Otherwise fills the options' dest and operands[0..*n_operands) (room for argc
// entries) and returns 0. "--name=value" is taken like "--name value"; a lone "-" is an
// operand.
int cli_parse(const cli_command *c, int argc, char **argv, char **operands, int *n_operands);
void cli_print_usage(const cli_command *c, FILE *out);
// text from column `indent` (the cursor is there), broken between words before column
// `width`, and a newline.
void cli_print_wrapped(FILE *out, const char *text, int indent, int width);

// The k-th name of choices "a|b|c" into buf (returned).
const char *cli_choice_name(const char *choices, int k, char *buf, size_t size);
// Converts one value, checked: `what` names it in the error ("prep: option --seq-length").
int cli_int(const char *what, const char *value, long lo, long hi);
double cli_real(const char *what, const char *value, double lo, double hi);

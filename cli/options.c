// The table-driven option parser of cli/options.h and the --help it generates.
#include "cli/options.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/common/check.h"

int cli_int(const char *what, const char *value, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (end == value || *end) {
        (void)strtod(value, &end);
        fatal("%s: '%s' is not %s", what, value, end != value && !*end ? "a whole number" : "an integer");
    }
    if (errno == ERANGE || v < lo || v > hi) fatal("%s: %s is out of range [%ld, %ld]", what, value, lo, hi);
    return (int)v;
}

double cli_real(const char *what, const char *value, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (*end || end == value || isnan(v)) fatal("%s: '%s' is not a number", what, value);
    if (errno == ERANGE || !(v >= lo && v <= hi)) fatal("%s: %s is out of range [%g, %g]", what, value, lo, hi);
    return v;
}

// The index of `value` in "a|b|c", or -1.
static int choice_index(const char *choices, const char *value) {
    size_t len = strlen(value);
    int k = 0;
    for (const char *p = choices; p; k++) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && !strncmp(p, value, n)) return k;
        p = bar ? bar + 1 : NULL;
    }
    return -1;
}

const char *cli_choice_name(const char *choices, int k, char *buf, size_t size) {
    const char *p = choices;
    for (int i = 0; i < k && p; i++) p = strchr(p, '|'), p = p ? p + 1 : NULL;
    if (!p) return "";
    const char *bar = strchr(p, '|');
    snprintf(buf, size, "%.*s", (int)(bar ? (size_t)(bar - p) : strlen(p)), p);
    return buf;
}

static void set_value(const cli_command *c, const cli_option *o, const char *value) {
    char what[160];
    snprintf(what, sizeof what, "%s: option %s", c->command, o->name);
    switch (o->type) {
    case CLI_FLAG: *(int *)o->dest = 1; break;
    case CLI_STRING: *(const char **)o->dest = value; break;
    case CLI_INT: *(int *)o->dest = cli_int(what, value, (long)o->lo, (long)o->hi); break;
    case CLI_REAL: *(double *)o->dest = cli_real(what, value, o->lo, o->hi); break;
    case CLI_CHOICE: {
        int k = choice_index(o->choices, value);
        if (k < 0) fatal("%s: '%s' is not one of %s", what, value, o->choices);
        *(int *)o->dest = k;
        break;
    }
    case CLI_LIST: {
        cli_list *l = o->dest;
        if (l->n == l->max) fatal("%s: given more than %d times ('%s')", what, l->max, value);
        l->items[l->n++] = value;
        break;
    }
    }
}

static const cli_option *find_option(const cli_command *c, const char *arg, size_t len) {
    for (const cli_option *o = c->options; o && o->name; o++)
        if (strlen(o->name) == len && !strncmp(o->name, arg, len)) return o;
    fatal("%s: unknown option '%s'; 'bertpre %s --help' lists the options", c->command, arg, c->command);
}

static int is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

int cli_parse(const cli_command *c, int argc, char **argv, char **operands, int *n_operands) {
    for (int i = 0; i < argc; i++)
        if (is_help(argv[i])) {
            cli_print_usage(c, stdout);
            return 1;
        }
    int given[64] = {0}, n = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || !a[1]) {
            if (c->max_operands == 1 && n == 1)
                fatal("%s: more than one %s given ('%s' and '%s')", c->command, c->operand, operands[0], a);
            if (c->max_operands >= 0 && n == c->max_operands)
                fatal("%s: more than %d %s given ('%s')", c->command, c->max_operands, c->operand, a);
            operands[n++] = argv[i];
            continue;
        }
        const char *eq = strchr(a, '=');
        const cli_option *o = find_option(c, a, eq ? (size_t)(eq - a) : strlen(a));
        given[o - c->options < 64 ? o - c->options : 63] = 1;
        if (o->type == CLI_FLAG) {
            if (eq) fatal("%s: option %s takes no value ('%s')", c->command, o->name, a);
            set_value(c, o, NULL);
        } else if (eq) {
            set_value(c, o, eq + 1);
        } else {
            if (i + 1 >= argc) fatal("%s: option %s needs a value (%s)", c->command, o->name, o->value_name);
            set_value(c, o, argv[++i]);
        }
    }
    for (const cli_option *o = c->options; o && o->name; o++)
        if (o->required && !given[o - c->options])
            fatal("%s: option %s %s is required; 'bertpre %s --help' lists the options", c->command, o->name,
                  o->value_name, c->command);
    if (n < c->min_operands)
        fatal("%s: missing %s; 'bertpre %s --help' lists the options", c->command, c->operand, c->command);
    *n_operands = n;
    return 0;
}

// " (1..1048576; default 128)" and the like, from the table.
static void describe(const cli_option *o, char *buf, size_t size) {
    char range[96] = "", def[160] = "", tmp[64];
    if (o->type == CLI_INT) snprintf(range, sizeof range, "%ld..%ld", (long)o->lo, (long)o->hi);
    if (o->type == CLI_REAL) snprintf(range, sizeof range, "%g..%g", o->lo, o->hi);
    if (o->type == CLI_LIST) snprintf(range, sizeof range, "repeatable");
    if (o->required) snprintf(def, sizeof def, "required");
    else if (o->shown_default) snprintf(def, sizeof def, "%s%s", o->shown_default[0] ? "default " : "", o->shown_default);
    else if (o->type == CLI_INT) snprintf(def, sizeof def, "default %d", *(int *)o->dest);
    else if (o->type == CLI_REAL) snprintf(def, sizeof def, "default %g", *(double *)o->dest);
    else if (o->type == CLI_CHOICE)
        snprintf(def, sizeof def, "default %s", cli_choice_name(o->choices, *(int *)o->dest, tmp, sizeof tmp));
    else if (o->type == CLI_STRING && *(const char **)o->dest)
        snprintf(def, sizeof def, "default %s", *(const char **)o->dest);
    snprintf(buf, size, range[0] || def[0] ? " (%s%s%s)" : "", range, range[0] && def[0] ? "; " : "", def);
}

void cli_print_wrapped(FILE *out, const char *text, int indent, int width) {
    int col = indent;
    while (*text) {
        size_t word = strcspn(text, " ");
        if (col > indent && col + 1 + (int)word > width) {
            fprintf(out, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', out);
            col++;
        }
        fprintf(out, "%.*s", (int)word, text);
        col += (int)word;
        text += word;
        while (*text == ' ') text++;
    }
    fputc('\n', out);
}

void cli_print_usage(const cli_command *c, FILE *out) {
    const char *line = c->synopsis;
    for (int first = 1; line && *line; first = 0) {
        const char *nl = strchr(line, '\n');
        int len = nl ? (int)(nl - line) : (int)strlen(line);
        fprintf(out, "%s bertpre %.*s\n", first ? "usage:" : "      ", len, line);
        line = nl ? nl + 1 : NULL;
    }
    if (c->about) fprintf(out, "\n%s", c->about);
    fprintf(out, "\noptions:\n");
    for (const cli_option *o = c->options; o && o->name; o++) {
        char left[64], extra[256], text[1024];
        const char *value = o->type == CLI_CHOICE ? o->choices : o->value_name;
        snprintf(left, sizeof left, "%s%s%s", o->name, value ? " " : "", value ? value : "");
        describe(o, extra, sizeof extra);
        snprintf(text, sizeof text, "%s%s", o->help, extra);
        fprintf(out, "  %-26s", left);
        if (strlen(left) > 24) fprintf(out, "\n%28s", "");
        cli_print_wrapped(out, text, 28, 100);
    }
    fprintf(out, "  %-26s%s\n", "-h, --help", "this text");
    if (c->notes) fprintf(out, "\n%s", c->notes);
}

// Raw text to documents of sentences (see text.h): zlib reads plain and gzip files alike;
// the sentence splitter is a small rule set, enough for English prose and documentation.
#include "data/text.h"
#include <ctype.h>
#include <dirent.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>
#include "kernels/common/check.h"

struct text_reader {
    text_options opt;
    char **files;
    double *sizes;
    int n_files, cap_files, next_file;
    double done_bytes, total_bytes, bytes_read;
    gzFile gz;
    double current_size;
    char *line;
    size_t line_cap;
    char *para;
    size_t para_len, para_cap;
};

static int compare_strings(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void add_file(text_reader *r, const char *path, double size) {
    if (r->n_files == r->cap_files) {
        r->cap_files = r->cap_files ? 2 * r->cap_files : 64;
        r->files = realloc(r->files, sizeof(char *) * (size_t)r->cap_files);
        check_alloc(r->files, sizeof(char *) * (size_t)r->cap_files);
    }
    r->files[r->n_files++] = strdup(path);
    r->total_bytes += size;
}

static void walk(text_reader *r, const char *path, const char *pattern, int top) {
    struct stat st;
    check_file(stat(path, &st) == 0, path, "reading input");
    if (S_ISDIR(st.st_mode)) {
        DIR *dir = opendir(path);
        check_file(dir, path, "opendir");
        char **names = NULL;
        int n = 0, cap = 0;
        for (struct dirent *e; (e = readdir(dir));) {
            if (e->d_name[0] == '.') continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                names = realloc(names, sizeof(char *) * (size_t)cap);
                check_alloc(names, sizeof(char *) * (size_t)cap);
            }
            names[n++] = strdup(e->d_name);
        }
        closedir(dir);
        qsort(names, (size_t)n, sizeof(char *), compare_strings);
        for (int i = 0; i < n; i++) {
            char full[4096];
            snprintf(full, sizeof full, "%s/%s", path, names[i]);
            walk(r, full, pattern, 0);
            free(names[i]);
        }
        free(names);
    } else if (S_ISREG(st.st_mode)) {
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        if (top || !pattern || fnmatch(pattern, base, 0) == 0) add_file(r, path, (double)st.st_size);
    }
}

text_reader *text_reader_open(char *const *inputs, int n_inputs, const char *pattern, text_options options) {
    text_reader *r = xcalloc(1, sizeof *r);
    r->opt = options;
    for (int i = 0; i < n_inputs; i++) {
        int before = r->n_files;
        walk(r, inputs[i], pattern, 1);
        if (r->n_files == before) fatal("%s: no input file matches '%s'", inputs[i], pattern ? pattern : "*");
    }
    if (r->n_files == 0) fatal("no input text given");
    return r;
}

static void close_current(text_reader *r) {
    if (!r->gz) return;
    gzclose(r->gz);
    r->gz = NULL;
    r->done_bytes += r->current_size;
}

// One line without its newline into r->line; returns its length, or -1 at the end of the file.
static long read_line(text_reader *r) {
    size_t len = 0;
    for (;;) {
        if (r->line_cap - len < 2) {
            r->line_cap = r->line_cap ? 2 * r->line_cap : 4096;
            r->line = realloc(r->line, r->line_cap);
            check_alloc(r->line, r->line_cap);
        }
        if (!gzgets(r->gz, r->line + len, (int)(r->line_cap - len))) {
            int err;
            const char *msg = gzerror(r->gz, &err);
            if (err != Z_OK && err != Z_STREAM_END)
                fatal("%s: cannot read: %s", r->files[r->next_file - 1], msg);
            if (len == 0) return -1;
            break;
        }
        len += strlen(r->line + len);
        if (len > 0 && r->line[len - 1] == '\n') break;
    }
    r->bytes_read += (double)len;
    while (len > 0 && (r->line[len - 1] == '\n' || r->line[len - 1] == '\r')) len--;
    r->line[len] = '\0';
    return (long)len;
}

static int is_blank(const char *s, long len) {
    for (long i = 0; i < len; i++)
        if (!isspace((unsigned char)s[i])) return 0;
    return 1;
}

// Appends a line to the paragraph buffer, collapsing runs of white space to one space.
static void para_append(text_reader *r, const char *s, long len) {
    if (r->para_cap < r->para_len + (size_t)len + 2) {
        r->para_cap = 2 * (r->para_len + (size_t)len + 2);
        r->para = realloc(r->para, r->para_cap);
        check_alloc(r->para, r->para_cap);
    }
    for (long i = 0; i < len; i++) {
        char c = isspace((unsigned char)s[i]) ? ' ' : s[i];
        if (c == ' ' && (r->para_len == 0 || r->para[r->para_len - 1] == ' ')) continue;
        r->para[r->para_len++] = c;
    }
    if (r->para_len > 0 && r->para[r->para_len - 1] != ' ') r->para[r->para_len++] = ' ';
}

static void para_flush(text_reader *r, text_document *doc) {
    if (r->para_len > 0) text_split_sentences(doc, r->para, r->para_len);
    r->para_len = 0;
}

int text_reader_next(text_reader *r, text_document *doc) {
    text_document_clear(doc);
    for (;;) {
        if (!r->gz) {
            if (r->next_file == r->n_files) return 0;
            const char *path = r->files[r->next_file++];
            struct stat st;
            r->current_size = stat(path, &st) == 0 ? (double)st.st_size : 0.0;
            r->gz = gzopen(path, "rb");
            check_file(r->gz, path, "opening input text");
            gzbuffer(r->gz, 1 << 17);
        }
        long len = read_line(r);
        if (len < 0) {
            close_current(r);
            para_flush(r, doc);
            if (doc->n > 0) return 1;
            continue;
        }
        const char *s = r->line;
        if (r->opt.format == TEXT_SENTENCE_LINES) {
            if (is_blank(s, len)) {
                if (doc->n > 0) return 1;
                continue;
            }
            while (len > 0 && isspace((unsigned char)s[len - 1])) len--;
            while (isspace((unsigned char)*s)) s++, len--;
            text_document_add(doc, s, (size_t)len);
        } else if (is_blank(s, len)) {
            para_flush(r, doc);
            if (!r->opt.doc_per_file && doc->n > 0) return 1;
        } else {
            para_append(r, s, len);
        }
    }
}

void text_reader_close(text_reader *r) {
    close_current(r);
    for (int i = 0; i < r->n_files; i++) free(r->files[i]);
    free(r->files);
    free(r->line);
    free(r->para);
    free(r);
}

int text_reader_file_count(const text_reader *r) { return r->n_files; }
double text_reader_bytes_read(const text_reader *r) { return r->bytes_read; }

double text_reader_progress(const text_reader *r) {
    double at = r->done_bytes + (r->gz ? (double)gzoffset(r->gz) : 0.0);
    return r->total_bytes > 0 ? at / r->total_bytes : 1.0;
}

void text_document_clear(text_document *doc) {
    doc->len = 0;
    doc->n = 0;
}

void text_document_free(text_document *doc) {
    free(doc->text);
    free(doc->start);
    memset(doc, 0, sizeof *doc);
}

void text_document_add(text_document *doc, const char *sentence, size_t len) {
    if (len == 0) return;
    if (doc->cap < doc->len + len + 1) {
        doc->cap = 2 * (doc->len + len + 1);
        doc->text = realloc(doc->text, doc->cap);
        check_alloc(doc->text, doc->cap);
    }
    if (doc->n == doc->cap_n) {
        doc->cap_n = doc->cap_n ? 2 * doc->cap_n : 64;
        doc->start = realloc(doc->start, sizeof(size_t) * (size_t)doc->cap_n);
        check_alloc(doc->start, sizeof(size_t) * (size_t)doc->cap_n);
    }
    doc->start[doc->n++] = doc->len;
    memcpy(doc->text + doc->len, sentence, len);
    doc->len += len;
    doc->text[doc->len++] = '\0';
}

static int is_abbreviation(const char *word, size_t len) {
    static const char *const list[] = {"mr", "mrs", "ms", "dr", "prof", "st", "vs", "etc", "e.g", "i.e",
                                       "fig", "no", "jr", "sr", "cf", "approx", "incl", "resp", "al", NULL};
    while (len > 0 && (word[0] == '(' || word[0] == '"' || word[0] == '\'')) word++, len--;
    if (len <= 1) return 1;  // an initial: "J. Smith"
    for (int i = 0; list[i]; i++)
        if (strlen(list[i]) == len && strncasecmp(list[i], word, len) == 0) return 1;
    return 0;
}

void text_split_sentences(text_document *doc, const char *p, size_t len) {
    size_t begin = 0, word = 0;
    while (begin < len && p[begin] == ' ') begin++;
    word = begin;
    for (size_t i = begin; i < len; i++) {
        if (p[i] == ' ') {
            word = i + 1;
            continue;
        }
        if (p[i] != '.' && p[i] != '!' && p[i] != '?') continue;
        size_t end = i + 1;
        while (end < len && strchr("\"')]", p[end])) end++;
        if (end + 1 >= len || p[end] != ' ') continue;
        unsigned char next = (unsigned char)p[end + 1];
        if (!(isupper(next) || isdigit(next) || next == '"' || next == '(' || next == '\'' || next >= 0x80)) continue;
        if (p[i] == '.' && is_abbreviation(p + word, i - word)) continue;
        text_document_add(doc, p + begin, end - begin);
        begin = end + 1;
        word = begin;
        i = end;
    }
    size_t stop = len;
    while (stop > begin && p[stop - 1] == ' ') stop--;
    if (stop > begin) text_document_add(doc, p + begin, stop - begin);
}

// Raw text to documents of sentences (see text.h): zlib reads plain and gzip files alike,
// libzstd zstd files; the sentence splitter is a small rule set, enough for English prose
// and documentation.
#include "data/text.h"
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <glob.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#if BERTPRE_HAVE_ZSTD
#include <zstd.h>
#endif
#include "kernels/common/check.h"
#include "kernels/common/json_any.h"

// A file or folder by its identity: a folder given twice, a folder and a file in it, or a
// link to either, is read once.
typedef struct {
    dev_t dev;
    ino_t ino;
    int file;  // index in files[] (-1: a folder; SEEN_EMPTY: a free slot of the table)
} seen_entry;
enum { SEEN_EMPTY = -2 };

struct text_reader {
    text_options opt;
    char **files;
    double *sizes;
    int n_files, cap_files, next_file;
    seen_entry *seen;
    int n_seen, cap_seen;
    int repeats;  // files named again (by another input, a link, a second path) and not read twice
    double done_bytes, total_bytes, bytes_read;
    gzFile gz;
#if BERTPRE_HAVE_ZSTD
    FILE *zf;  // a zstd file, read through zd instead of gz
    ZSTD_DCtx *zd;
    ZSTD_inBuffer zin;
    unsigned char *zin_buf;
    char *zout;
    size_t zout_len, zout_pos;
    int zeof;
    size_t zlast;  // ZSTD_decompressStream's last return: 0 where a frame has ended
#endif
    pid_t parquet_reader;  // TEXT_PARQUET, TEXT_ARROW: tools/parquet_text.py for the current file (0: none)
    long line_no;  // of the current file
    long skipped;  // TEXT_JSONL lines skipped
    int binary_files, markup_files, non_utf8_files;
    long markup_docs;  // TEXT_JSONL, TEXT_PARQUET and TEXT_ARROW documents left out as markup
    unsigned char *sample, *sample_in;  // sniff_text's first 64 KB of each file (and its zstd input)
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

// The entry for st when it was seen before (NULL: the first time, and it is recorded): an
// open-addressing table keyed by device and inode, kept at most half full.
static const seen_entry *seen_before(text_reader *r, const struct stat *st, int file) {
    if (2 * (r->n_seen + 1) > r->cap_seen) {
        seen_entry *old = r->seen;
        int old_cap = r->cap_seen;
        r->cap_seen = old_cap ? 2 * old_cap : 256;
        r->seen = xcalloc((size_t)r->cap_seen, sizeof *r->seen);
        for (int i = 0; i < r->cap_seen; i++) r->seen[i].file = SEEN_EMPTY;
        r->n_seen = 0;
        for (int i = 0; i < old_cap; i++)
            if (old[i].file != SEEN_EMPTY) {
                struct stat key = {.st_dev = old[i].dev, .st_ino = old[i].ino};
                seen_before(r, &key, old[i].file);
            }
        free(old);
    }
    uint64_t h = ((uint64_t)st->st_dev * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)st->st_ino * 0xC2B2AE3D27D4EB4Full);
    for (size_t i = (size_t)(h ^ (h >> 29)) & (size_t)(r->cap_seen - 1);; i = (i + 1) & (size_t)(r->cap_seen - 1)) {
        seen_entry *e = &r->seen[i];
        if (e->file == SEEN_EMPTY) {
            *e = (seen_entry){st->st_dev, st->st_ino, file};
            r->n_seen++;
            return NULL;
        }
        if (e->dev == st->st_dev && e->ino == st->st_ino) return e;
    }
}

static void walk(text_reader *r, const char *path, const char *pattern, int top) {
    struct stat st;
    check_file(stat(path, &st) == 0, path, "reading input");
    if (S_ISDIR(st.st_mode)) {
        if (seen_before(r, &st, -1)) {  // its files are taken, or being taken (a link to a parent)
            if (++r->repeats <= 5)
                fprintf(stderr, "bertpre: warning: %s: a folder already read through another input or link: read "
                                "once\n", path);
            return;
        }
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
        if (top || !pattern || fnmatch(pattern, base, 0) == 0) {
            const seen_entry *again = seen_before(r, &st, r->n_files);
            if (!again) {
                add_file(r, path, (double)st.st_size);
            } else if (++r->repeats <= 5) {
                const char *first = again->file >= 0 ? r->files[again->file] : path;
                fprintf(stderr, "bertpre: warning: %s: %s%s (inputs that overlap): read once\n", path,
                        strcmp(first, path) ? "the file read as " : "named twice", strcmp(first, path) ? first : "");
            }
        }
    }
}

static int has_file(const char *dir, const char *name) {
    char path[4200];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) return 0;
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

// A folder `datasets` wrote: save_to_disk of a Dataset (state.json beside its .arrow files) or
// of a DatasetDict (dataset_dict.json, a folder per split). Read as --format arrow, one split at
// a time: a DatasetDict's folder is refused naming its splits, before anything is read.
static void check_datasets_folder(const char *input, text_format format) {
    if (format == TEXT_ARROW && has_file(input, "dataset_dict.json")) {
        char splits[1024] = "";
        DIR *dir = opendir(input);
        for (struct dirent *e; dir && (e = readdir(dir));) {
            char sub[4200];
            if ((size_t)snprintf(sub, sizeof sub, "%s/%s", input, e->d_name) >= sizeof sub) continue;
            if (e->d_name[0] != '.' && has_file(sub, "state.json")) {
                size_t n = strlen(splits);
                snprintf(splits + n, sizeof splits - n, "%s%s", n ? ", " : "", e->d_name);
            }
        }
        if (dir) closedir(dir);
        fatal("%s: a DatasetDict that datasets' save_to_disk wrote (dataset_dict.json; splits: %s): give the folder of "
              "the split to read, e.g. %s/train", input, splits[0] ? splits : "none found", input);
    }
}

// Why nothing in `input` matched: a datasets folder read with another format says which reads it.
static const char *no_match_hint(const char *input, text_format format) {
    if (format == TEXT_ARROW) return "";
    if (has_file(input, "state.json") || has_file(input, "dataset_info.json") || has_file(input, "dataset_dict.json"))
        return " (a folder that datasets' save_to_disk wrote, its rows in .arrow files: --format arrow reads them; "
               "or write Parquet with the dataset's to_parquet)";
    return "";
}

text_reader *text_reader_open(char *const *inputs, int n_inputs, const char *pattern, text_options options) {
    text_reader *r = xcalloc(1, sizeof *r);
    r->opt = options;
    for (int i = 0; i < n_inputs; i++) check_datasets_folder(inputs[i], options.format);
    for (int i = 0; i < n_inputs; i++) {
        int before = r->n_files, repeats = r->repeats;
        struct stat st;
        // A quoted glob that names no path ('shards/*.txt.gz') expands here, as train.data's do:
        // its matches in sorted order, each read as if named.
        if (stat(inputs[i], &st) != 0 && strpbrk(inputs[i], "*?[")) {
            glob_t g;
            int rc = glob(inputs[i], 0, NULL, &g);
            if (rc != 0 || g.gl_pathc == 0) fatal("%s: no file or folder matches this pattern", inputs[i]);
            for (size_t k = 0; k < g.gl_pathc; k++) walk(r, g.gl_pathv[k], pattern, 1);
            globfree(&g);
        } else {
            walk(r, inputs[i], pattern, 1);
        }
        if (r->n_files == before && r->repeats == repeats)
            fatal("%s: no input file matches '%s'%s", inputs[i], pattern ? pattern : "*",
                  no_match_hint(inputs[i], options.format));
    }
    if (r->repeats > 5)
        fprintf(stderr, "bertpre: warning: %d files and folders named more than once in all, each read once (the "
                        "first 5 named above)\n", r->repeats);
    if (r->n_files == 0) fatal("no input text given");
    return r;
}

static int file_open(const text_reader *r) {
#if BERTPRE_HAVE_ZSTD
    if (r->zf) return 1;
#endif
    return r->gz != NULL;
}

static void close_current(text_reader *r) {
    if (!file_open(r)) return;
    if (r->gz) gzclose(r->gz);
    r->gz = NULL;
    if (r->parquet_reader > 0) {
        // The file's rows are all read only when its reader ended well.
        int status = 0;
        pid_t pid = r->parquet_reader;
        r->parquet_reader = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fatal("%s: reading the %s file failed (tools/parquet_text.py %s %d; its message is above)",
                  r->files[r->next_file - 1], r->opt.format == TEXT_ARROW ? "Arrow" : "Parquet",
                  WIFEXITED(status) ? "exited" : "was ended by signal",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
#if BERTPRE_HAVE_ZSTD
    if (r->zf) fclose(r->zf);
    r->zf = NULL;
#endif
    r->done_bytes += r->current_size;
}

static const unsigned char zstd_magic[4] = {0x28, 0xb5, 0x2f, 0xfd};

// The first invalid UTF-8 sequence in s[0..n): its offset, or -1. A sequence cut by the end
// of s is not counted (the sample may end inside a character).
static long first_invalid_utf8(const unsigned char *s, long n) {
    for (long i = 0; i < n;) {
        unsigned char c = s[i];
        int need = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 && c >= 0xC2 ? 1 : (c & 0xF0) == 0xE0 ? 2
                 : (c & 0xF8) == 0xF0 && c <= 0xF4 ? 3 : -1;
        if (need < 0) return i;
        if (i + need >= n) return -1;
        for (int k = 1; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] >= 0xA0) || (c == 0xF0 && s[i + 1] < 0x90) ||
            (c == 0xF4 && s[i + 1] >= 0x90))
            return i;  // overlong, surrogate or beyond U+10FFFF
        i += need + 1;
    }
    return -1;
}

// HTML, XML or RTF by the opening of a document's text, or by its share of tags: "<" and a
// letter, "/", "!" or "?" up to the next ">" on the same line, making up a tenth of the bytes in
// at least 20 closing tags of at least 3 names (prose, reStructuredText and Markdown hold a few at
// most; a README's badge links close one or two names, </a> and </p>, a page many). NULL for text.
static const char *markup_kind(const unsigned char *s, long n) {
    long i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
    if (i + 5 <= n && !memcmp(s + i, "{\\rtf", 5)) return "an RTF document";
    if (i + 5 <= n && !memcmp(s + i, "<?xml", 5)) return "an XML document";
    if (i + 9 <= n && !strncasecmp((const char *)s + i, "<!doctype", 9)) return "an HTML document";
    if (i + 5 <= n && !strncasecmp((const char *)s + i, "<html", 5)) return "an HTML document";
    long closing = 0, tag_bytes = 0;
    char names[3][16] = {"", "", ""};  // the first three names of closing tags seen
    int n_names = 0;
    for (long k = 0; k < n; k++) {
        if (s[k] != '<' || k + 1 >= n) continue;
        unsigned char c = s[k + 1];
        if (!((c | 32) >= 'a' && (c | 32) <= 'z') && c != '/' && c != '!' && c != '?') continue;
        long e = k + 1;
        while (e < n && e - k < 1000 && s[e] != '>' && s[e] != '<' && s[e] != '\n') e++;
        if (e < n && s[e] == '>') {
            // </name>: a closing tag, which reStructuredText's <target> links and Markdown's
            // <autolinks> never are
            long q = k + 2;
            while (q < e && (((s[q] | 32) >= 'a' && (s[q] | 32) <= 'z') || (s[q] >= '0' && s[q] <= '9'))) q++;
            if (c == '/' && q == e && q > k + 2) {
                closing++;
                int len = (int)(q - k - 2), known = 0;
                for (int j = 0; j < n_names; j++)
                    known |= (int)strlen(names[j]) == len && !strncasecmp(names[j], (const char *)s + k + 2, (size_t)len);
                if (!known && n_names < 3 && len < 16) snprintf(names[n_names++], 16, "%.*s", len, s + k + 2);
            }
            tag_bytes += e - k + 1;
            k = e;
        }
    }
    if (closing >= 20 && n_names >= 3 && 10 * tag_bytes >= n) return "markup (tags make up a tenth of its text)";
    return NULL;
}

// What the first 64 KB of a file's text are: a NUL byte makes it binary (as grep and git
// tell binary files), else markup_kind may find markup, else an invalid UTF-8 sequence makes
// it not UTF-8. Returns 1 when the file is to be read, 0 when it is left out (binary, or
// markup without keep_markup); an error instead under strict.
static int sniff_text(text_reader *r, const char *path, const unsigned char *sample, long n) {
    const char *strict = r->opt.strict ? " (--strict)" : "";
    if (memchr(sample, '\0', (size_t)n)) {
        // A Parquet file (its magic "PAR1") read as text by mistake: the option that reads it named.
        const char *hint = n >= 4 && !memcmp(sample, "PAR1", 4) ? " (a Parquet file: --format parquet reads its "
                                                                   "text column)" : "";
        if (r->opt.strict) fatal("%s: a binary file (a NUL byte in its first 64 KB), not text%s%s", path, hint, strict);
        if (++r->binary_files <= 5)
            fprintf(stderr, "bertpre: warning: %s: a binary file (a NUL byte in its first 64 KB), not text%s: left "
                            "out\n", path, hint);
        return 0;
    }
    // JSONL and Parquet: each document is judged (jsonl_document), not the file.
    const char *markup = r->opt.keep_markup || r->opt.format == TEXT_JSONL ? NULL : markup_kind(sample, n);
    if (markup) {
        if (r->opt.strict)
            fatal("%s: %s, not prose: its tags would be trained on as words (leave it out, or strip the markup into "
                  "text first; --markup keep reads it as it is)%s", path, markup, strict);
        if (++r->markup_files <= 5)
            fprintf(stderr, "bertpre: warning: %s: %s, not prose: left out (its tags would be trained on as words; "
                    "strip the markup into text first, or give --markup keep to read it as it is)\n", path, markup);
        return 0;
    }
    long bad = first_invalid_utf8(sample, n);
    if (bad >= 0) {
        if (r->opt.strict)
            fatal("%s: not UTF-8 (byte 0x%02x at offset %ld; Latin-1 or another encoding?): convert it (iconv -f "
                  "latin1 -t utf-8)%s", path, sample[bad], bad, strict);
        if (++r->non_utf8_files <= 5)
            fprintf(stderr,
                    "bertpre: warning: %s: not UTF-8 (byte 0x%02x at offset %ld; Latin-1 or another encoding?): its "
                    "invalid bytes are dropped; convert it (iconv -f latin1 -t utf-8) to keep its text\n",
                    path, sample[bad], bad);
    }
    return 1;
}

// A Parquet (or Arrow IPC) file: its text column as JSON lines from tools/parquet_text.py, read
// through zlib (which passes plain text through) from the pipe.
static void open_parquet(text_reader *r, const char *path) {
    const char *tools = getenv("BERTPRE_TOOLS_DIR");
    const int arrow = r->opt.format == TEXT_ARROW;
    char helper[4096];
    snprintf(helper, sizeof helper, "%s/parquet_text.py", tools && tools[0] ? tools : BERTPRE_TOOLS_DIR);
    if (access(helper, R_OK) != 0)
        fatal("%s: --format %s reads it through %s, which is not there (set BERTPRE_TOOLS_DIR to the tools folder of "
              "bertpre's source)", path, arrow ? "arrow" : "parquet", helper);
    int fd[2];
    check_file(pipe(fd) == 0, path, "starting the Parquet reader (pipe)");
    fflush(NULL);
    pid_t pid = fork();
    check_file(pid >= 0, path, "starting the Parquet reader (fork)");
    if (pid == 0) {
        dup2(fd[1], STDOUT_FILENO);
        close(fd[0]);
        close(fd[1]);
        const char *field = r->opt.text_field ? r->opt.text_field : "text";
        execlp("python3", "python3", helper, path, "--column", field, "--bad-rows",
               r->opt.skip_bad_lines ? "skip" : "stop", arrow ? "--arrow" : (char *)NULL, (char *)NULL);
        fprintf(stderr, "bertpre: error: %s: cannot start python3 for the Parquet reader %s: %s\n", path, helper,
                strerror(errno));
        _exit(127);
    }
    close(fd[1]);
    r->parquet_reader = pid;
    r->gz = gzdopen(fd[0], "rb");
    check_file(r->gz, path, "reading the Parquet reader's output");
    gzbuffer(r->gz, 1 << 17);
}

// Opens the next file: zstd by its magic number, anything else through zlib.
static void open_file(text_reader *r, const char *path) {
    struct stat st;
    r->current_size = stat(path, &st) == 0 ? (double)st.st_size : 0.0;
    r->line_no = 0;
    if (r->opt.format >= TEXT_PARQUET) {
        open_parquet(r, path);
        return;
    }
    FILE *f = fopen(path, "rb");
    check_file(f, path, "opening input text");
    unsigned char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    enum { SAMPLE = 1 << 16, SAMPLE_IN = 1 << 17 };
    if (!r->sample) r->sample = xmalloc(SAMPLE), r->sample_in = xmalloc(SAMPLE_IN);
    unsigned char *sample = r->sample;
    if (got == 4 && !memcmp(magic, zstd_magic, 4)) {
#if BERTPRE_HAVE_ZSTD
        // The first 64 KB of text, from a context of its own (errors and cuts are the reader's
        // to report, below).
        rewind(f);
        size_t in_len = fread(r->sample_in, 1, SAMPLE_IN, f);
        ZSTD_DCtx *probe = ZSTD_createDCtx();
        ZSTD_inBuffer pin = {r->sample_in, in_len, 0};
        ZSTD_outBuffer pout = {sample, SAMPLE, 0};
        while (pin.pos < pin.size && pout.pos < pout.size)
            if (ZSTD_isError(ZSTD_decompressStream(probe, &pout, &pin))) break;
        ZSTD_freeDCtx(probe);
        if (!sniff_text(r, path, sample, (long)pout.pos)) {
            fclose(f);
            r->done_bytes += r->current_size;
            return;
        }
        rewind(f);
        r->zf = f;
        if (!r->zd) {
            r->zd = ZSTD_createDCtx();
            r->zin_buf = xmalloc(ZSTD_DStreamInSize());
            r->zout = xmalloc(ZSTD_DStreamOutSize());
        }
        ZSTD_DCtx_reset(r->zd, ZSTD_reset_session_only);
        r->zin = (ZSTD_inBuffer){r->zin_buf, 0, 0};
        r->zout_len = r->zout_pos = 0;
        r->zeof = 0;
        r->zlast = 1;  // no frame decoded yet
        return;
#else
        fatal("%s: zstd-compressed, and this bertpre was built without libzstd (install libzstd-dev and rebuild, "
              "or decompress it with 'zstd -d')", path);
#endif
    }
    fclose(f);
    r->gz = gzopen(path, "rb");
    check_file(r->gz, path, "opening input text");
    gzbuffer(r->gz, 1 << 17);
    int n = gzread(r->gz, sample, SAMPLE);  // errors are the reader's to report, below
    if (!sniff_text(r, path, sample, n > 0 ? n : 0)) {
        gzclose(r->gz);
        r->gz = NULL;
        r->done_bytes += r->current_size;
        return;
    }
    gzrewind(r->gz);
}

#if BERTPRE_HAVE_ZSTD
// gzgets for the zstd file: up to size - 1 bytes, through the first newline; NULL at the end.
static char *zstd_gets(text_reader *r, char *buf, int size) {
    int n = 0;
    while (n < size - 1) {
        if (r->zout_pos == r->zout_len) {
            r->zout_pos = r->zout_len = 0;
            ZSTD_outBuffer out = {r->zout, ZSTD_DStreamOutSize(), 0};
            while (out.pos == 0) {
                if (r->zin.pos == r->zin.size) {
                    if (r->zeof) break;
                    r->zin.size = fread(r->zin_buf, 1, ZSTD_DStreamInSize(), r->zf);
                    r->zin.pos = 0;
                    if (ferror(r->zf)) fatal("%s: cannot read", r->files[r->next_file - 1]);
                    if (r->zin.size == 0) {
                        // The file ends: a stream that ends inside a frame was cut (zstd -t:
                        // "premature end"), whatever was decoded from it so far.
                        if (r->zlast != 0)
                            fatal("%s: the zstd data ends inside a frame: the file is cut short (truncated by a "
                                  "copy or download?); 'zstd -t' says the same", r->files[r->next_file - 1]);
                        r->zeof = 1;
                        break;
                    }
                }
                size_t ret = ZSTD_decompressStream(r->zd, &out, &r->zin);
                if (ZSTD_isError(ret))
                    fatal("%s: not valid zstd data: %s", r->files[r->next_file - 1], ZSTD_getErrorName(ret));
                r->zlast = ret;
            }
            r->zout_len = out.pos;
            if (r->zout_len == 0) break;
        }
        char c = r->zout[r->zout_pos++];
        buf[n++] = c;
        if (c == '\n') break;
    }
    if (n == 0) return NULL;
    buf[n] = '\0';
    return buf;
}
#endif

// One line without its newline into r->line; returns its length, or -1 at the end of the file.
static long read_line(text_reader *r) {
    size_t len = 0;
    for (;;) {
        if (r->line_cap - len < 2) {
            r->line_cap = r->line_cap ? 2 * r->line_cap : 4096;
            r->line = realloc(r->line, r->line_cap);
            check_alloc(r->line, r->line_cap);
        }
#if BERTPRE_HAVE_ZSTD
        if (r->zf) {
            if (!zstd_gets(r, r->line + len, (int)(r->line_cap - len))) {
                if (len == 0) return -1;
                break;
            }
            len += strlen(r->line + len);
            if (len > 0 && r->line[len - 1] == '\n') break;
            continue;
        }
#endif
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
    r->line_no++;
    while (len > 0 && (r->line[len - 1] == '\n' || r->line[len - 1] == '\r')) len--;
    r->line[len] = '\0';
    // A byte-order mark opening a file (editors on Windows write one) is no text: dropped, as
    // Python's utf-8-sig drops it, so that a JSONL file's first line is JSON.
    if (r->line_no == 1 && len >= 3 && !memcmp(r->line, "\xef\xbb\xbf", 3)) {
        memmove(r->line, r->line + 3, len - 2);
        len -= 3;
    }
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
        if (!s[i]) continue;  // a NUL (JSON "\u0000"), dropped as BERT drops it
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

// A TEXT_JSONL line: the document of its text field into doc; 0 for a bad line (an error,
// or a warning and skipped, per skip_bad_lines).
static int jsonl_document(text_reader *r, const char *s, long len, text_document *doc) {
    const char *field = r->opt.text_field ? r->opt.text_field : "text";
    json_error_t err;
    json_t *obj = json_any_loadb(s, (size_t)len, JSON_ALLOW_NUL, &err);
    json_t *v = json_is_object(obj) ? json_object_get(obj, field) : NULL;
    if (!json_is_string(v)) {
        char why[400];
        if (!obj) snprintf(why, sizeof why, "not JSON (%s, column %d)", err.text, err.column);
        else if (!json_is_object(obj)) snprintf(why, sizeof why, "a JSON value that is not an object");
        else if (!v) snprintf(why, sizeof why, "no field \"%s\" (--text-field names the field of the text)", field);
        else snprintf(why, sizeof why, "field \"%s\" is not a string", field);
        json_decref(obj);
        const char *path = r->files[r->next_file - 1];
        if (!r->opt.skip_bad_lines)
            fatal("%s:%ld: %s (--bad-lines skip passes over such lines)", path, r->line_no, why);
        if (++r->skipped <= 5)
            fprintf(stderr, "bertpre: warning: %s:%ld: %s: line skipped%s\n", path, r->line_no, why,
                    r->skipped == 5 ? " (further skipped lines are only counted)" : "");
        return 0;
    }
    const char *t = json_string_value(v);
    size_t n = json_string_length(v);
    // Markup per document, by the rule a file of text is judged by: one HTML page among the
    // rows leaves that row out, not the file.
    const char *markup = r->opt.keep_markup ? NULL : markup_kind((const unsigned char *)t, (long)n);
    if (markup) {
        const char *path = r->files[r->next_file - 1];
        char where[64];
        snprintf(where, sizeof where, r->opt.format >= TEXT_PARQUET ? ": document %ld" : ":%ld", r->line_no);
        json_decref(obj);
        if (r->opt.strict)
            fatal("%s%s: %s, not prose: its tags would be trained on as words (leave it out, or strip the markup "
                  "into text first; --markup keep reads it as it is) (--strict)", path, where, markup);
        if (++r->markup_docs <= 5)
            fprintf(stderr, "bertpre: warning: %s%s: %s, not prose: this document left out (--markup keep reads it "
                    "as it is)\n", path, where, markup);
        return 0;
    }
    for (size_t at = 0; at < n;) {
        const char *nl = memchr(t + at, '\n', n - at);
        size_t end = nl ? (size_t)(nl - t) : n;
        if (is_blank(t + at, (long)(end - at))) para_flush(r, doc);
        else para_append(r, t + at, (long)(end - at));
        at = end + 1;
    }
    para_flush(r, doc);
    json_decref(obj);
    return 1;
}

int text_reader_next(text_reader *r, text_document *doc) {
    text_document_clear(doc);
    for (;;) {
        if (!file_open(r)) {
            if (r->next_file == r->n_files) return 0;
            open_file(r, r->files[r->next_file++]);
            continue;  // left out (binary), or open now
        }
        long len = read_line(r);
        if (len < 0) {
            close_current(r);
            para_flush(r, doc);
            if (doc->n > 0) return 1;
            continue;
        }
        const char *s = r->line;
        if (r->opt.format == TEXT_JSONL || r->opt.format >= TEXT_PARQUET) {
            if (is_blank(s, len)) continue;
            jsonl_document(r, s, len, doc);
            if (doc->n > 0) return 1;
        } else if (r->opt.format == TEXT_SENTENCE_LINES) {
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
    if (r->binary_files > 5)
        fprintf(stderr, "bertpre: warning: %d binary files left out in all (the first 5 named above)\n", r->binary_files);
    if (r->markup_files > 5)
        fprintf(stderr, "bertpre: warning: %d markup files left out in all (the first 5 named above)\n", r->markup_files);
    if (r->markup_docs > 5)
        fprintf(stderr, "bertpre: warning: %ld markup documents left out in all (the first 5 named above)\n",
                r->markup_docs);
    if (r->non_utf8_files > 5)
        fprintf(stderr, "bertpre: warning: %d files not UTF-8 in all (the first 5 named above)\n", r->non_utf8_files);
#if BERTPRE_HAVE_ZSTD
    ZSTD_freeDCtx(r->zd);
    free(r->zin_buf);
    free(r->zout);
#endif
    for (int i = 0; i < r->n_files; i++) free(r->files[i]);
    free(r->files);
    free(r->seen);
    free(r->line);
    free(r->para);
    free(r->sample);
    free(r->sample_in);
    free(r);
}

int text_reader_file_count(const text_reader *r) { return r->n_files; }
double text_reader_bytes_read(const text_reader *r) { return r->bytes_read; }

long text_reader_skipped_lines(const text_reader *r) { return r->skipped; }

double text_reader_progress(const text_reader *r) {
    double at = r->done_bytes + (r->gz ? (double)gzoffset(r->gz) : 0.0);
#if BERTPRE_HAVE_ZSTD
    if (r->zf) at += (double)ftell(r->zf);
#endif
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

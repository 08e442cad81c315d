// prepare.c — turns text files, directory trees and JSON Lines records into byte-level train/val shards for
// build/train.
//
//   build/prepare --out DIR [--val-frac F] [--doc-per file|dir] [--seed S] [--shard-tokens N] [--text-field FIELD]
//                 [--files-from LIST] [--keep-duplicates] [--force] PATH...
//
// Tokenizer (vocab 257): token = byte value 0..255; token 256 = end-of-document, written BEFORE each
// document, so the stream of a split is  256 doc0-bytes 256 doc1-bytes ...  Shards are llm.c uint16
// shards (see data/shards.h): DIR/train_000000.bin, DIR/train_000001.bin, ... each holding at most
// --shard-tokens tokens (documents may continue in the next shard), and likewise DIR/val_000000.bin, ...
//
// Documents: --doc-per file (default): every text file is one document. --doc-per dir: every directory
// PATH becomes one document, the concatenation of all its text files in walk order (e.g. a whole
// codebase is one document); a file PATH is one document either way. With --text-field FIELD, files named
// *.jsonl, *.ndjson, *.json.gz, *.jsonl.gz, *.ndjson.gz are JSON Lines (data/jsonl.h; gzip or plain): each record's
// FIELD is one document, whatever --doc-per says. --files-from LIST adds LIST's paths (one a line) as PATHs.
// Walk: depth-first, the entries of each directory sorted bytewise by name. Skipped: symlinks inside a
// walked directory, non-regular files, hidden directories (.git, ...), empty files and binary files
// (a NUL byte in the first 8 KiB). Hidden regular files are kept. Duplicates are skipped and counted: the same
// file reached twice (by inode), then a document of the same bytes as an earlier one (skip_duplicates; not with
// --keep-duplicates).
// Split: a document goes to val iff u(seed, key) < F, with u a 64-bit hash mapped to [0, 1) and key the
// document's name relative to its PATH's parent: "<basename of PATH>/<path inside PATH>" for a file of a
// walked directory, "<basename of PATH>" for a file PATH or a whole-directory document; documents that share that
// name (globbed files of one basename) are named by their canonical path below the deepest directory holding them
// all (unique_keys). A JSON Lines record is named "<its file's key>:<line number>" (the key without a final ".gz":
// a compressed copy splits alike). So the split does not depend on
// where the corpus lives. With 0 < F < 1 and >= 2 documents each split gets at least one (the train document with
// the lowest u moves to val, or the val one with the highest u to train).
#include "data/pack.h"
#include "eval/doclen.h"
#include "common/files.h"
#include "common/util.h"
#include "data/shards.h"
#include "data/jsonl.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BOS_TOKEN 256                    // end-of-document marker, placed before each document
#define SNIFF_BYTES 8192                 // binary = a NUL byte within the first SNIFF_BYTES
#define DEFAULT_SHARD_TOKENS 100000000LL

static const char* USAGE =
"usage: build/prepare --out DIR [options] PATH...\n"
"\n"
"Turns text files and directory trees into byte-level llm.c shards for build/train.\n"
"Tokens: each byte is a token (0..255); token 256 marks a document boundary and is written before every\n"
"document (vocab size 257). Shards are uint16 llm.c shards: DIR/train_000000.bin, ... and\n"
"DIR/val_000000.bin, ...; train on them with the patterns DIR/train_*.bin and DIR/val_*.bin.\n"
"DIR/meta.json describes them (tokenizer \"bytes\", vocab_size 257, eod_id 256, counts, this command):\n"
"build/train and build/eval take vocab_size and eod from it and refuse values that contradict it.\n"
"\n"
"PATH is a file or a directory. Directories are walked recursively, depth-first, the entries of each\n"
"directory in bytewise name order. Skipped: symlinks inside walked directories, non-regular files,\n"
"hidden directories (.git, ...), empty files and binary files (a NUL byte in the first 8 KiB), and duplicates\n"
"(counted): the same file reached twice (a path given twice, a symlinked directory, a hard link), and a document\n"
"of the same bytes as an earlier one (copies; --keep-duplicates keeps them); the first one is kept.\n"
"\n"
"options:\n"
"  --out DIR           output directory (created if missing; required)\n"
"  --val-frac F        fraction of documents for validation, 0..1 (default 0.05). A document goes to val\n"
"                      by a hash of (seed, its name relative to the PATH's parent; documents that share that\n"
"                      name, e.g. globbed files of one basename, are named by their path below the deepest\n"
"                      directory holding them all; a JSON Lines record by its file's name, less a final .gz,\n"
"                      and line number).\n"
"                      With 0 < F < 1 and at least 2 documents, each split gets at least one document.\n"
"  --doc-per file|dir  file (default): every text file is one document. dir: every directory PATH is one\n"
"                      document, all of its text files concatenated in walk order (a whole codebase is one\n"
"                      document); a file PATH is one document either way.\n"
"  --text-field FIELD files named *.jsonl, *.ndjson, *.json.gz, *.jsonl.gz or *.ndjson.gz are JSON Lines (gzip\n"
"                      or plain, read as a stream): one JSON object a line, its string field FIELD one document\n"
"                      (null or \"\": skipped and counted). A bad line, a missing or non-string FIELD, or a\n"
"                      corrupt gzip file is an error naming FILE:LINE. Other text files stay documents as above\n"
"  --files-from LIST   also take the paths listed in LIST, one a line (empty lines passed over; '-': standard\n"
"                      input), as PATHs after the PATH arguments (lists in the order given)\n"
"  --doc-lengths W     afterwards, print the training documents' length distribution (log2 buckets, shares of\n"
"                      documents and tokens) and how many fit a training window of W tokens (0: no window);\n"
"                      build/eval --doc_lengths writes it as CSV and SVG too\n"
"  --seed S            seed of the train/val assignment, an unsigned integer (default 0)\n"
"  --shard-tokens N    tokens per shard, 1..2147483647 (default 100000000); the last shard may be shorter\n"
"  --keep-duplicates   keep documents of the same bytes as an earlier one (repeated text on purpose); the same\n"
"                      file reached twice is still read once\n"
"  --force             replace existing DIR/train_*.bin, DIR/val_*.bin and DIR/meta.json (otherwise they are\n"
"                      an error). The new ones are written and verified first (in DIR/.prepare-PID.tmp: the disk\n"
"                      needs room for both), then swapped in; the old ones are removed only after that, and stay\n"
"                      as they were when anything fails\n"
"  -h, --help          this text\n"
"\n"
"Prints a line of totals (and of duplicates, JSON Lines records and shared names, when there are any) and, per\n"
"split, a line with documents, tokens and shards, then the shard paths.\n"
"Errors: one line on stderr, exit status 1.\n";

// ----------------------------------------------------------------------------------------------------
// errors: one line on stderr, remove the shards this run created, exit 1

typedef struct { char** v; int n, cap; } StrList;
static StrList g_created;                // shards written by this run, removed on failure
static char* g_staging;                  // the directory they are written in (removed on failure when empty)
static int g_swapping;                   // swap_in under way (its messages say what became of the old files)

static void die(const char* fmt, ...) {
    char msg[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    for (char* c = msg; *c; c++) if (*c == '\n' || *c == '\r') *c = ' ';
    fprintf(stderr, "prepare: %s%s\n", msg, g_staging && !g_swapping ? "; the output directory is as it was" : "");
    for (int i = 0; i < g_created.n; i++) unlink(g_created.v[i]);
    if (g_staging) rmdir(g_staging);
    exit(1);
}

static void* xrealloc(void* p, size_t n) {
    p = realloc(p, n);
    if (!p) die("out of memory");
    return p;
}

static char* xstrdup(const char* s) {
    char* d = strdup(s);
    if (!d) die("out of memory");
    return d;
}

static void strs_add(StrList* l, const char* s) {
    if (l->n == l->cap) { l->cap = l->cap ? 2 * l->cap : 64; l->v = xrealloc(l->v, l->cap * sizeof(char*)); }
    l->v[l->n++] = xstrdup(s);
}

static void strs_free(StrList* l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof(*l));
}

static char* join(const char* a, const char* b) {           // "a/b" without doubling a trailing '/'
    size_t n = strlen(a);
    char* s = xrealloc(NULL, n + strlen(b) + 2);
    sprintf(s, (n > 0 && a[n - 1] == '/') ? "%s%s" : "%s/%s", a, b);
    return s;
}

// ----------------------------------------------------------------------------------------------------
// options

typedef struct {
    const char* out;
    double val_frac;
    int doc_per_dir;
    uint64_t seed;
    int64_t shard_tokens;
    int force;
    int64_t doc_lengths;                 // --doc-lengths W: print the training documents' length distribution (-1: no)
    const char* text_field;             // --text-field FIELD: JSON Lines files are read, a record's FIELD a document
    int keep_copies;                     // --keep-duplicates: documents of the same bytes as an earlier one stay
    StrList paths;                       // the PATH arguments and the paths of --files-from lists, in order
    StrList origins;                     // per path: "" (an argument) or "LIST:LINE" (a --files-from list's line)
} Options;

static double parse_frac(const char* s) {
    char* end;
    errno = 0;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || errno || !(v >= 0.0 && v <= 1.0))
        die("--val-frac expects a number in [0, 1], got '%s'", s);
    return v;
}

static uint64_t parse_seed(const char* s) {
    char* end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s < '0' || *s > '9' || *end != '\0' || errno) die("--seed expects an unsigned integer, got '%s'", s);
    return (uint64_t)v;
}

static int64_t parse_shard_tokens(const char* s) {
    char* end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*s < '0' || *s > '9' || *end != '\0' || errno || v < 1 || v > INT32_MAX)
        die("--shard-tokens expects an integer in [1, %d], got '%s'", INT32_MAX, s);
    return v;
}

// "--opt value" or "--opt=value"; returns the value and advances *i
static const char* opt_value(int argc, char** argv, int* i, const char* name) {
    const char* a = argv[*i];
    size_t n = strlen(name);
    if (a[n] == '=') return a + n + 1;
    if (*i + 1 >= argc) die("%s needs a value (see --help)", name);
    return argv[++*i];
}

static int is_opt(const char* a, const char* name) {
    size_t n = strlen(name);
    return strncmp(a, name, n) == 0 && (a[n] == '\0' || a[n] == '=');
}

// --files-from LIST: one path a line ('-': standard input); empty lines are passed over, a trailing '\r' dropped
static void read_list(Options* o, const char* list) {
    FILE* f = strcmp(list, "-") ? fopen(list, "r") : stdin;
    if (!f) die("--files-from: cannot read '%s': %s", list, strerror(errno));
    char* line = NULL;
    size_t cap = 0;
    ssize_t n;
    int lineno = 0;
    char origin[4200];
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (memchr(line, 0, (size_t)n)) die("--files-from '%s': line %d holds a NUL byte: not a list of paths, one a line", list, lineno);
        if (n == 0) continue;
        snprintf(origin, sizeof origin, "%s:%d", list, lineno);
        strs_add(&o->paths, line);
        strs_add(&o->origins, origin);
    }
    int err = ferror(f);
    free(line);
    if (f != stdin) fclose(f);
    if (err) die("--files-from: cannot read '%s': read error", list);
}

static Options parse_args(int argc, char** argv) {
    Options o = {.val_frac = 0.05, .shard_tokens = DEFAULT_SHARD_TOKENS, .doc_lengths = -1};
    int only_paths = 0;
    StrList lists = {0};                 // --files-from LIST: its paths come after the PATH arguments
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (only_paths || a[0] != '-' || a[1] == '\0') { strs_add(&o.paths, a); strs_add(&o.origins, ""); continue; }
        if (!strcmp(a, "--")) only_paths = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(USAGE, stdout); exit(0); }
        else if (!strcmp(a, "--force")) o.force = 1;
        else if (!strcmp(a, "--keep-duplicates")) o.keep_copies = 1;
        else if (is_opt(a, "--out")) o.out = opt_value(argc, argv, &i, "--out");
        else if (is_opt(a, "--val-frac")) o.val_frac = parse_frac(opt_value(argc, argv, &i, "--val-frac"));
        else if (is_opt(a, "--seed")) o.seed = parse_seed(opt_value(argc, argv, &i, "--seed"));
        else if (is_opt(a, "--shard-tokens"))
            o.shard_tokens = parse_shard_tokens(opt_value(argc, argv, &i, "--shard-tokens"));
        else if (is_opt(a, "--text-field")) {
            o.text_field = opt_value(argc, argv, &i, "--text-field");
            if (!*o.text_field) die("--text-field expects the name of the records' text field (e.g. text), got ''");
        } else if (is_opt(a, "--files-from")) { strs_add(&lists, opt_value(argc, argv, &i, "--files-from")); }
        else if (is_opt(a, "--doc-lengths")) {
            const char* v = opt_value(argc, argv, &i, "--doc-lengths");
            char* end;
            long long w = strtoll(v, &end, 10);
            if (*v < '0' || *v > '9' || *end || w < 0 || w > INT32_MAX) die("--doc-lengths expects a window of 0..%d tokens (0: none), got '%s'", INT32_MAX, v);
            o.doc_lengths = w;
        } else if (is_opt(a, "--doc-per")) {
            const char* v = opt_value(argc, argv, &i, "--doc-per");
            if (!strcmp(v, "dir")) o.doc_per_dir = 1;
            else if (strcmp(v, "file")) die("--doc-per expects 'file' or 'dir', got '%s'", v);
        } else die("unknown option '%s' (see --help)", a);
    }
    if (!o.out || !*o.out) die("--out DIR is required (see --help)");
    for (int i = 0; i < lists.n; i++) read_list(&o, lists.v[i]);
    if (o.paths.n == 0) die(lists.n ? "the --files-from list names no path" : "no input PATH given (see --help)");
    strs_free(&lists);
    return o;
}

// ----------------------------------------------------------------------------------------------------
// collecting documents: files[] (every text and JSON Lines file, in walk order), docs[] (the documents and the JSON
// Lines files, each naming its files by index into files[])

typedef struct {
    char* key;                           // the split's name of the document (see "Split" at the top)
    char* real;                          // its canonical path (the file, or the directory of a --doc-per dir document)
    int* fidx; int n_files, cap_files;   // its files (indices into Corpus.files), in walk order
    int jsonl;                           // 1: a JSON Lines file (fidx[0]): each record is a document
    int64_t n_rec;                       // JSONL: records (documents), counted by assign()
    uint8_t* valbits;                    // JSONL: per record, 1 = val
    int val; double u;                   // a text document: its split and hash
} Doc;

typedef struct {
    StrList files;                       // every text and JSON Lines file, in document order
    Doc* docs; int n_docs, cap_docs;
    int skip_binary, skip_empty, skip_symlink, skip_hidden, skip_other, skip_output;
    int dup_file, dup_content;           // skipped: the same file as an earlier one (inode), the same bytes
    char dup_example[2200];              // the first of them, for the summary
    int n_jsonl, renamed;                // JSON Lines files; documents whose name was shared (see unique_keys)
    char renamed_example[2200];
    int64_t empty_records, lone_surrogates;
    const char* field;                   // --text-field (NULL: no JSON Lines)
} Corpus;

// the output directory (when it exists already): its own data files are never input (a --force run over a
// directory that holds DIR would otherwise read the meta.json and shards it replaces)
static struct stat g_out;
static int g_out_known;
static int is_output_file(const char* dir, const char* name) {
    struct stat st;
    if (!g_out_known || (strcmp(name, "meta.json") && fnmatch("train_*.bin", name, 0) && fnmatch("val_*.bin", name, 0)))
        return 0;
    return !stat(dir, &st) && st.st_dev == g_out.st_dev && st.st_ino == g_out.st_ino;
}

static int doc_new(Corpus* c, const char* key, const char* real) {
    if (c->n_docs == c->cap_docs) {
        c->cap_docs = c->cap_docs ? 2 * c->cap_docs : 64;
        c->docs = xrealloc(c->docs, c->cap_docs * sizeof(Doc));
    }
    c->docs[c->n_docs] = (Doc){.key = xstrdup(key), .real = xstrdup(real)};
    return c->n_docs++;
}

static void doc_add_file(Corpus* c, int d, const char* path) {
    Doc* x = &c->docs[d];
    if (x->n_files == x->cap_files) {
        x->cap_files = x->cap_files ? 2 * x->cap_files : 4;
        x->fidx = xrealloc(x->fidx, x->cap_files * sizeof(int));
    }
    x->fidx[x->n_files++] = c->files.n;
    strs_add(&c->files, path);
}

static void corpus_free(Corpus* c) {
    for (int i = 0; i < c->n_docs; i++) { free(c->docs[i].key); free(c->docs[i].real); free(c->docs[i].fidx); free(c->docs[i].valbits); }
    free(c->docs);
    strs_free(&c->files);
}

// 1 = text, 0 = empty or binary (counted as skipped)
static int is_text_file(Corpus* c, const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) die("cannot read '%s': %s", path, strerror(errno));
    unsigned char buf[SNIFF_BYTES];
    size_t n = fread(buf, 1, sizeof(buf), f);
    int err = ferror(f);
    fclose(f);
    if (err) die("cannot read '%s': read error", path);
    if (n == 0) { c->skip_empty++; return 0; }
    if (memchr(buf, 0, n)) { c->skip_binary++; return 0; }
    return 1;
}

// a regular file found (name: its last component): a JSON Lines file (with --text-field) becomes a Doc of its own;
// a text file a document of its own (doc < 0) or a file of the open document doc
static void add_file(Corpus* c, const char* path, const char* name, const char* key, const char* real, int doc) {
    if (c->field && jsonl_name(name)) {
        struct stat st;
        if (stat(path, &st) != 0) die("cannot read '%s': %s", path, strerror(errno));
        if (st.st_size == 0) { c->skip_empty++; return; }
        int d = doc_new(c, key, real);
        c->docs[d].jsonl = 1;
        doc_add_file(c, d, path);
        c->n_jsonl++;
        return;
    }
    if (!is_text_file(c, path)) return;
    doc_add_file(c, doc >= 0 ? doc : doc_new(c, key, real), path);
}

// depth-first walk of dir (canonical path real); key = dir's key; doc: the open --doc-per dir document, or -1
static void walk(Corpus* c, const char* dir, const char* key, const char* real, int doc) {
    DIR* d = opendir(dir);
    if (!d) die("cannot open directory '%s': %s", dir, strerror(errno));
    StrList names = {0};
    struct dirent* e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) strs_add(&names, e->d_name);
    closedir(d);
    if (names.n > 1) qsort(names.v, (size_t)names.n, sizeof(char*), cmp_str);
    for (int i = 0; i < names.n; i++) {
        char* path = join(dir, names.v[i]);
        char* sub = join(key, names.v[i]);
        char* rsub = join(real, names.v[i]);
        struct stat st;
        if (lstat(path, &st) != 0) die("cannot read '%s': %s", path, strerror(errno));
        if (S_ISLNK(st.st_mode)) c->skip_symlink++;
        else if (S_ISREG(st.st_mode) && is_output_file(dir, names.v[i])) c->skip_output++;
        else if (S_ISDIR(st.st_mode)) {
            if (names.v[i][0] == '.') c->skip_hidden++;
            else walk(c, path, sub, rsub, doc);
        } else if (!S_ISREG(st.st_mode)) c->skip_other++;
        else add_file(c, path, names.v[i], sub, rsub, doc);
        free(path); free(sub); free(rsub); free(names.v[i]);
    }
    free(names.v);
}

static void collect(Corpus* c, const Options* o) {
    for (int i = 0; i < o->paths.n; i++) {
        const char* p = o->paths.v[i];
        const char* from = o->origins.v[i];
        char where[4300] = "";
        if (*from) snprintf(where, sizeof where, "--files-from %s: ", from);
        struct stat st;
        if (stat(p, &st) != 0) die("%scannot read '%s': %s", where, p, strerror(errno));
        char* real = realpath(p, NULL);                      // the root of the PATH's keys: its canonical basename
        if (!real) die("%scannot read '%s': %s", where, p, strerror(errno));
        char* slash = strrchr(real, '/');
        char* key = xstrdup(slash && slash[1] ? slash + 1 : real);
        char* pdir = xstrdup(p);
        char* ps = strrchr(pdir, '/');
        if (ps) *ps = 0;
        if (S_ISREG(st.st_mode) && is_output_file(ps ? (*pdir ? pdir : "/") : ".", ps ? ps + 1 : p))
            die("'%s' is one of the output directory's own files, which this run replaces: give the text to prepare", p);
        free(pdir);
        if (S_ISREG(st.st_mode)) {
            const char* name = strrchr(p, '/');
            add_file(c, p, name ? name + 1 : p, key, real, -1);
        } else if (S_ISDIR(st.st_mode))
            walk(c, p, key, real, o->doc_per_dir ? doc_new(c, key, real) : -1);
        else die("%s'%s' is not a regular file or a directory", where, p);
        free(key);
        free(real);
    }
}

// ----------------------------------------------------------------------------------------------------
// duplicates, skipped and counted (the first in document order is kept): the same file reached twice (a PATH given
// twice, a directory and a path inside it, a symlinked directory, a hard link), and then a document of the same
// bytes as an earlier one (its files, in order, byte for byte: copies of a file or of a whole tree). A document left
// without files is dropped. (Files of the same bytes inside different --doc-per dir documents are parts of their
// trees, and kept.)

typedef struct { dev_t dev; ino_t ino; int idx; } FileId;
static int cmp_inode(const void* a, const void* b) {
    const FileId *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    return x->idx - y->idx;
}

typedef struct { int jsonl, n_files; int64_t size; uint64_t hash; int idx; } DocId;
static int cmp_docid(const void* a, const void* b) {
    const DocId *x = a, *y = b;
    if (x->jsonl != y->jsonl) return x->jsonl - y->jsonl;
    if (x->n_files != y->n_files) return x->n_files - y->n_files;
    if (x->size != y->size) return x->size < y->size ? -1 : 1;
    if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
    return x->idx - y->idx;
}

#define READ_BLOCK (1 << 20)
static uint64_t file_hash(const char* path, uint64_t h) {   // a 64-bit hash of the bytes, continuing h
    FILE* f = fopen(path, "rb");
    if (!f) die("cannot read '%s': %s", path, strerror(errno));
    static unsigned char buf[READ_BLOCK];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        for (size_t i = 0; i < n; i += 8) {
            uint64_t w = 0;
            memcpy(&w, buf + i, n - i < 8 ? n - i : 8);
            h = mix64(h ^ w);
        }
    int err = ferror(f);
    fclose(f);
    if (err) die("cannot read '%s': read error", path);
    return mix64(h);
}

static int same_bytes(const char* a, const char* b) {
    FILE* f = fopen(a, "rb");
    FILE* g = fopen(b, "rb");
    if (!f || !g) die("cannot read '%s': %s", f ? b : a, strerror(errno));
    static unsigned char x[READ_BLOCK], y[READ_BLOCK];
    int same = 1;
    for (;;) {
        size_t n = fread(x, 1, sizeof x, f), m = fread(y, 1, sizeof y, g);
        if (n != m || memcmp(x, y, n)) { same = 0; break; }
        if (n == 0) break;
    }
    int err = ferror(f) || ferror(g);
    fclose(f); fclose(g);
    if (err) die("cannot read '%s' or '%s': read error", a, b);
    return same;
}

static int same_doc(const Corpus* c, const off_t* size, const Doc* a, const Doc* b) {
    for (int j = 0; j < a->n_files; j++)
        if (size[a->fidx[j]] != size[b->fidx[j]]) return 0;
    for (int j = 0; j < a->n_files; j++)
        if (!same_bytes(c->files.v[a->fidx[j]], c->files.v[b->fidx[j]])) return 0;
    return 1;
}

static const char* doc_name(const Corpus* c, const Doc* d) { return d->n_files == 1 ? c->files.v[d->fidx[0]] : d->real; }

static void skip_duplicates(Corpus* c, int keep_copies) {
    int n = c->files.n;
    FileId* id = xrealloc(NULL, (size_t)(n ? n : 1) * sizeof(FileId));
    off_t* size = xrealloc(NULL, (size_t)(n ? n : 1) * sizeof(off_t));
    char* dup = xrealloc(NULL, (size_t)(n ? n : 1));         // per file: 1 = the same file as an earlier one
    memset(dup, 0, (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(c->files.v[i], &st) != 0) die("cannot read '%s': %s", c->files.v[i], strerror(errno));
        id[i] = (FileId){st.st_dev, st.st_ino, i};
        size[i] = st.st_size;
    }
    qsort(id, (size_t)n, sizeof(FileId), cmp_inode);
    for (int i = 1; i < n; i++)
        if (id[i].dev == id[i - 1].dev && id[i].ino == id[i - 1].ino) {
            int k = i - 1;
            while (k > 0 && id[k - 1].dev == id[i].dev && id[k - 1].ino == id[i].ino) k--;   // the first: kept
            dup[id[i].idx] = 1;
            c->dup_file++;
            if (!c->dup_example[0])
                snprintf(c->dup_example, sizeof c->dup_example, "'%s' is the same file as '%s'", c->files.v[id[i].idx],
                         c->files.v[id[k].idx]);
        }
    int kept = 0;                                            // drop the skipped files, then documents left empty
    for (int d = 0; d < c->n_docs; d++) {
        Doc* x = &c->docs[d];
        int k = 0;
        for (int j = 0; j < x->n_files; j++) if (!dup[x->fidx[j]]) x->fidx[k++] = x->fidx[j];
        x->n_files = k;
        if (k == 0) { free(x->key); free(x->real); free(x->fidx); continue; }
        c->docs[kept++] = *x;
    }
    c->n_docs = kept;
    if (keep_copies) { free(id); free(size); free(dup); return; }

    // documents of the same bytes: candidates by (kind, files, size), hashed only where those agree, then compared
    DocId* di = xrealloc(NULL, (size_t)(kept ? kept : 1) * sizeof(DocId));
    char* drop = xrealloc(NULL, (size_t)(kept ? kept : 1));
    memset(drop, 0, (size_t)(kept ? kept : 1));
    for (int d = 0; d < kept; d++) {
        int64_t total = 0;
        for (int j = 0; j < c->docs[d].n_files; j++) total += size[c->docs[d].fidx[j]];
        di[d] = (DocId){c->docs[d].jsonl, c->docs[d].n_files, total, 0, d};
    }
    qsort(di, (size_t)kept, sizeof(DocId), cmp_docid);
    for (int i = 0; i < kept;) {
        int j = i + 1;
        while (j < kept && di[j].jsonl == di[i].jsonl && di[j].n_files == di[i].n_files && di[j].size == di[i].size) j++;
        if (j - i > 1) {
            for (int k = i; k < j; k++) {
                uint64_t h = 0x243F6A8885A308D3ULL;
                for (int f = 0; f < di[k].n_files; f++) h = file_hash(c->files.v[c->docs[di[k].idx].fidx[f]], h);
                di[k].hash = h;
            }
            qsort(di + i, (size_t)(j - i), sizeof(DocId), cmp_docid);
            for (int k = i + 1; k < j; k++)
                for (int q = i; q < k; q++) {
                    if (drop[di[q].idx] || di[q].hash != di[k].hash) continue;
                    const Doc *a = &c->docs[di[q].idx], *b = &c->docs[di[k].idx];
                    if (!same_doc(c, size, a, b)) continue;
                    drop[di[k].idx] = 1;
                    c->dup_content++;
                    break;
                }
        }
        i = j;
    }
    int first = -1, of = -1;                                 // the first dropped document (in document order), for the summary
    for (int i = 0; i < kept && first < 0; i++) if (drop[i]) first = i;
    if (first >= 0) {
        for (int i = 0; i < first && of < 0; i++)
            if (!drop[i] && c->docs[i].jsonl == c->docs[first].jsonl && c->docs[i].n_files == c->docs[first].n_files &&
                same_doc(c, size, &c->docs[i], &c->docs[first])) of = i;
        if (!c->dup_file && of >= 0)
            snprintf(c->dup_example, sizeof c->dup_example, "'%s' has the same bytes as '%s'", doc_name(c, &c->docs[first]),
                     doc_name(c, &c->docs[of]));
    }
    int m = 0;
    for (int d = 0; d < kept; d++) {
        Doc* x = &c->docs[d];
        if (drop[d]) { free(x->key); free(x->real); free(x->fidx); continue; }
        c->docs[m++] = *x;
    }
    c->n_docs = m;
    free(di); free(drop);
    free(id); free(size); free(dup);
}

// ----------------------------------------------------------------------------------------------------
// unique split names. A document's name is first its name relative to its PATH's parent (see "Split" at the top).
// Documents that share one (files of the same basename given as PATHs, e.g. /usr/share/doc/*/copyright, or the same
// tree under two roots) would all land on one side: each of them is named instead by its canonical path relative to
// the deepest directory that holds all of their PATHs' parents ("acl/copyright" for /usr/share/doc/acl/copyright).
// Names still shared after that (rare) become the canonical paths. So names that were unique stay as they were, and
// the split still does not depend on where the corpus lives.

static int cmp_key_idx(const void* a, const void* b, void* ctx) {
    const Doc* d = ctx;
    int x = *(const int*)a, y = *(const int*)b;
    int r = strcmp(d[x].key, d[y].key);
    return r ? r : x - y;
}

// length of the deepest common directory of the parents of the docs' canonical paths
static size_t common_dir(const Doc* docs, const int* idx, int n) {
    const char* a = docs[idx[0]].real;
    size_t len = (size_t)(strrchr(a, '/') - a);              // a's parent
    for (int k = 1; k < n; k++) {
        const char* b = docs[idx[k]].real;
        size_t pb = (size_t)(strrchr(b, '/') - b), i = 0;
        while (i < len && i < pb && a[i] == b[i]) i++;
        if (!(i == len && (pb == len || b[len] == '/')) && !(i == pb && a[pb] == '/')) while (i > 0 && a[i] != '/') i--;
        len = i;
    }
    return len;
}

static int rename_shared(Corpus* c, int pass) {               // 1 when some names were shared
    int n = c->n_docs, shared = 0;
    int* idx = xrealloc(NULL, (size_t)(n ? n : 1) * sizeof(int));
    for (int i = 0; i < n; i++) idx[i] = i;
    qsort_r(idx, (size_t)n, sizeof(int), cmp_key_idx, c->docs);
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && !strcmp(c->docs[idx[j]].key, c->docs[idx[i]].key)) j++;
        if (j - i > 1) {
            shared = 1;
            size_t root = pass == 0 ? common_dir(c->docs, idx + i, j - i) : 0;
            for (int k = i; k < j; k++) {
                Doc* d = &c->docs[idx[k]];
                const char* name = d->real + root + (pass == 0 && d->real[root] == '/');
                if (pass == 0 && !c->renamed_example[0])
                    snprintf(c->renamed_example, sizeof c->renamed_example, "'%s' is named '%s'", d->key, name);
                char* key = xstrdup(name);
                free(d->key);
                d->key = key;
                if (pass == 0) c->renamed++;
            }
        }
        i = j;
    }
    free(idx);
    return shared;
}

static void unique_keys(Corpus* c) {
    if (rename_shared(c, 0)) rename_shared(c, 1);
}

// ----------------------------------------------------------------------------------------------------
// train/val assignment: a text document, or a record of a JSON Lines file (named KEY:LINE), goes to val iff
// u(seed, name) < F; with 0 < F < 1 and >= 2 documents each split gets at least one (the train document with the
// lowest u moves to val, or the val one with the highest u to train)

static double doc_u(uint64_t seed, const char* key) {         // FNV-1a of the key, mixed with the seed -> [0, 1)
    return (double)(mix64(fnv1a64(key) ^ mix64(seed)) >> 11) * 0x1.0p-53;
}

// a record's name: its file's key without a final ".gz" (compressing a file keeps its split), ":", its line number
static double record_u(uint64_t seed, const char* key, int64_t line) {
    size_t k = strlen(key), n = k + 24;
    if (k > 3 && !strcmp(key + k - 3, ".gz")) k -= 3;
    char* name = xrealloc(NULL, n);
    snprintf(name, n, "%.*s:%lld", (int)k, key, (long long)line);
    double u = doc_u(seed, name);
    free(name);
    return u;
}

// the records of a JSON Lines file, one at a time: fn(ctx, record index, line, text, len) for each non-empty record
typedef void (*RecordFn)(void* ctx, int64_t rec, int64_t line, const unsigned char* text, size_t len);
static void each_record(Corpus* c, const Doc* d, RecordFn fn, void* ctx, int count) {
    char err[4400];
    JsonlReader* r;
    if (jsonl_open(&r, c->files.v[d->fidx[0]], c->field, err, sizeof err)) die("%s", err);
    const unsigned char* text;
    size_t len;
    int64_t line, rec = 0;
    int rc;
    while ((rc = jsonl_next(r, &text, &len, &line, err, sizeof err)) > 0) {
        if (len == 0) { if (count) c->empty_records++; continue; }
        fn(ctx, rec++, line, text, len);
    }
    if (rc < 0) die("%s", err);
    if (count) c->lone_surrogates += jsonl_lone_surrogates(r);
    jsonl_close(r);
}

typedef struct {
    uint64_t seed; double frac;
    int64_t n_units, n_val;              // documents (text documents and records) so far, and those in val
    double lo, hi; int lo_d, hi_d; int64_t lo_r, hi_r;   // the documents of the lowest and the highest u (rec -1: text)
    Doc* d; int di; int64_t bytes;       // the JSON Lines file being read, and its valbits' size
} Assign;

static void see_unit(Assign* a, int di, int64_t rec, double u, int val) {
    if (a->n_units == 0 || u < a->lo) { a->lo = u; a->lo_d = di; a->lo_r = rec; }
    if (a->n_units == 0 || u > a->hi) { a->hi = u; a->hi_d = di; a->hi_r = rec; }
    a->n_units++;
    a->n_val += val;
}

static void set_val(Doc* d, int64_t rec, int val) {
    if (rec < 0) { d->val = val; return; }
    if (val) d->valbits[rec / 8] |= (uint8_t)(1u << (rec % 8));
    else d->valbits[rec / 8] &= (uint8_t)~(1u << (rec % 8));
}

static int get_val(const Doc* d, int64_t rec) { return rec < 0 ? d->val : (d->valbits[rec / 8] >> (rec % 8)) & 1; }

static void assign_record(void* ctx, int64_t rec, int64_t line, const unsigned char* text, size_t len) {
    (void)text; (void)len;
    Assign* a = ctx;
    Doc* d = a->d;
    if (rec / 8 >= a->bytes) {
        int64_t bytes = a->bytes ? 2 * a->bytes : 4096;
        d->valbits = xrealloc(d->valbits, (size_t)bytes);
        memset(d->valbits + a->bytes, 0, (size_t)(bytes - a->bytes));
        a->bytes = bytes;
    }
    double u = record_u(a->seed, d->key, line);
    set_val(d, rec, u < a->frac);
    d->n_rec = rec + 1;
    see_unit(a, a->di, rec, u, u < a->frac);
}

// returns the number of documents (text documents + records)
static int64_t assign(Corpus* c, double frac, uint64_t seed) {
    Assign a = {.seed = seed, .frac = frac};
    for (int i = 0; i < c->n_docs; i++) {
        Doc* d = &c->docs[i];
        if (d->jsonl) {
            a.d = d; a.di = i; a.bytes = 0;
            each_record(c, d, assign_record, &a, 1);
            continue;
        }
        d->u = doc_u(seed, d->key);
        d->val = d->u < frac;
        see_unit(&a, i, -1, d->u, d->val);
    }
    if (a.n_units == 1) set_val(&c->docs[a.lo_d], a.lo_r, frac >= 1.0);
    if (a.n_units < 2 || frac <= 0.0 || frac >= 1.0) return a.n_units;
    if (a.n_val == 0) set_val(&c->docs[a.lo_d], a.lo_r, 1);                // the document closest to the other side
    if (a.n_val == a.n_units) set_val(&c->docs[a.hi_d], a.hi_r, 0);
    return a.n_units;
}

// ----------------------------------------------------------------------------------------------------
// output directory: mkdir -p, then refuse (or with --force delete) existing train_*.bin / val_*.bin

static void make_out_dir(const char* dir) {
    char err[4200];
    if (make_dirs("output directory", dir, err, sizeof err)) die("%s", err);
    if (access(dir, W_OK | X_OK) != 0) die("output directory '%s' is not writable: %s", dir, strerror(errno));
}

// the shards and meta.json an earlier run left in dir (names), refused unless --force
static StrList list_old(const char* dir, int force) {
    DIR* d = opendir(dir);
    if (!d) die("cannot open output directory '%s': %s", dir, strerror(errno));
    StrList old = {0};
    struct dirent* e;
    while ((e = readdir(d)))
        if (!fnmatch("train_*.bin", e->d_name, 0) || !fnmatch("val_*.bin", e->d_name, 0)) strs_add(&old, e->d_name);
    closedir(d);
    if (old.n > 1) qsort(old.v, (size_t)old.n, sizeof(char*), cmp_str);
    char* meta = join(dir, "meta.json");                     // last: an error names a shard first
    if (access(meta, F_OK) == 0) strs_add(&old, "meta.json");
    free(meta);
    if (old.n && !force) {
        char* path = join(dir, old.v[0]);
        die("'%s' already exists (use --force to replace the shards in '%s')", path, dir);
    }
    return old;
}

// rename from/NAME to to/NAME for names[0..n); 0, or the index that failed (errno set) + 1
static int move_names(const char* from, const char* to, char** names, int n) {
    for (int i = 0; i < n; i++) {
        char* a = join(from, names[i]);
        char* b = join(to, names[i]);
        int rc = rename(a, b);
        free(a); free(b);
        if (rc) return i + 1;
    }
    return 0;
}

// The new files (names `neu`, in the staging directory) take the place of the old ones (names `old`, in dir):
// the old ones move into DIR/.prepare-PID.old, the new ones into dir, and only then are the old ones deleted.
// Any failure on the way moves everything back (the old files as they were) and stops with one line.
static void swap_in(const char* dir, const char* staging, StrList* old, StrList* neu) {
    char aside_name[64];
    snprintf(aside_name, sizeof(aside_name), ".prepare-%d.old", (int)getpid());
    char* aside = join(dir, aside_name);
    g_swapping = 1;
    if (old->n && mkdir(aside, 0755) != 0) die("cannot create '%s': %s", aside, strerror(errno));
    int k = old->n ? move_names(dir, aside, old->v, old->n) : 0;
    if (k) {
        int e = errno;
        move_names(aside, dir, old->v, k - 1);
        rmdir(aside);
        die("cannot move '%s/%s' aside: %s; the existing files are as they were", dir, old->v[k - 1], strerror(e));
    }
    k = move_names(staging, dir, neu->v, neu->n);
    if (k) {
        int e = errno;
        move_names(dir, staging, neu->v, k - 1);
        int back = move_names(aside, dir, old->v, old->n);
        if (!back) rmdir(aside);
        die("cannot move the new '%s' into '%s': %s; %s", neu->v[k - 1], dir, strerror(e), back ? "the old files are in "
            "the directory named in this message's first path with .prepare-*.old (move them back by hand)" :
            "the existing files are as they were");
    }
    g_created.n = 0;                                         // (the new files are in place: never removed now)
    fsync_path(dir);
    for (int i = 0; i < old->n; i++) {                       // the old files, replaced as --force asked
        char* p = join(aside, old->v[i]);
        if (unlink(p) != 0) fprintf(stderr, "prepare: note: cannot remove the replaced '%s': %s\n", p, strerror(errno));
        free(p);
    }
    if (old->n) rmdir(aside);
    free(aside);
}

// ----------------------------------------------------------------------------------------------------
// streaming shard writer: header placeholder, uint16 tokens, header rewritten with the count on close

#define WBUF 65536

typedef struct {
    const char* dir; const char* split; int64_t max_tokens;
    FILE* f; char* path;
    int64_t n_shard;                     // tokens in the open shard
    int n_shards; int64_t n_tokens; int64_t n_docs;
    uint16_t buf[WBUF]; int nbuf;
} Writer;

static void w_init(Writer* w, const char* dir, const char* split, int64_t max_tokens) {
    memset(w, 0, sizeof(*w));
    w->dir = dir; w->split = split; w->max_tokens = max_tokens;
}

static void w_flush(Writer* w) {
    if (w->nbuf && fwrite(w->buf, 2, (size_t)w->nbuf, w->f) != (size_t)w->nbuf)
        die("cannot write '%s': %s", w->path, strerror(errno));
    w->nbuf = 0;
}

static void w_close_shard(Writer* w) {
    if (!w->f) return;
    w_flush(w);
    int32_t header[SHARD_HEADER_INTS] = {SHARD_MAGIC_U16, SHARD_VERSION, (int32_t)w->n_shard};
    if (fseek(w->f, 0, SEEK_SET) != 0 || fwrite(header, sizeof(header), 1, w->f) != 1 || fflush(w->f) != 0 ||
        fsync(fileno(w->f)) != 0)
        die("cannot write '%s': %s", w->path, strerror(errno));
    if (fclose(w->f) != 0) { w->f = NULL; die("cannot write '%s': %s", w->path, strerror(errno)); }
    w->f = NULL;
}

// read back every shard the writer wrote: header, token count and file size as written
static void w_verify(const Writer* w, StrList* names) {
    int64_t total = 0;
    for (int i = 0; i < w->n_shards; i++) {
        char name[64];
        snprintf(name, sizeof(name), "%s_%06d.bin", w->split, i);
        char* path = join(w->dir, name);
        int32_t header[SHARD_HEADER_INTS];
        struct stat st;
        FILE* f = fopen(path, "rb");
        int ok = f && fread(header, sizeof(header), 1, f) == 1 && fstat(fileno(f), &st) == 0 &&
                 header[0] == SHARD_MAGIC_U16 && header[1] == SHARD_VERSION && header[2] > 0 &&
                 (int64_t)st.st_size == (int64_t)sizeof(header) + 2 * (int64_t)header[2];
        if (f) fclose(f);
        if (!ok) die("'%s' does not read back as written (a file system error?)", path);
        total += header[2];
        strs_add(names, name);
        free(path);
    }
    if (total != w->n_tokens) die("the %s shards in '%s' read back %lld tokens, %lld were written", w->split, w->dir,
                                  (long long)total, (long long)w->n_tokens);
}

static void w_open_shard(Writer* w) {
    char name[64];
    snprintf(name, sizeof(name), "%s_%06d.bin", w->split, w->n_shards);
    free(w->path);
    w->path = join(w->dir, name);
    w->f = fopen(w->path, "wb");
    if (!w->f) die("cannot create '%s': %s", w->path, strerror(errno));
    strs_add(&g_created, w->path);
    static const int32_t zeros[SHARD_HEADER_INTS];
    if (fwrite(zeros, sizeof(zeros), 1, w->f) != 1) die("cannot write '%s': %s", w->path, strerror(errno));
    w->n_shards++;
    w->n_shard = 0;
}

static void w_put(Writer* w, uint16_t t) {
    if (!w->f || w->n_shard == w->max_tokens) { w_close_shard(w); w_open_shard(w); }
    w->buf[w->nbuf++] = t;
    w->n_shard++;
    w->n_tokens++;
    if (w->nbuf == WBUF) w_flush(w);
}

static void w_append_file(Writer* w, const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) die("cannot read '%s': %s", path, strerror(errno));
    static unsigned char buf[1 << 20];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        for (size_t i = 0; i < n; i++) w_put(w, buf[i]);
    int err = ferror(f);
    fclose(f);
    if (err) die("cannot read '%s': read error", path);
}

typedef struct { const Doc* d; Writer* w[2]; } WriteCtx;
static void write_record(void* ctx, int64_t rec, int64_t line, const unsigned char* text, size_t len) {
    (void)line;
    WriteCtx* x = ctx;
    Writer* w = x->w[get_val(x->d, rec)];
    w_put(w, BOS_TOKEN);
    for (size_t i = 0; i < len; i++) w_put(w, text[i]);
    w->n_docs++;
}

// every document into the shards of its split (w[0] train, w[1] val), in document order
static void write_splits(Writer* w[2], Corpus* c) {
    for (int i = 0; i < c->n_docs; i++) {
        const Doc* d = &c->docs[i];
        if (d->jsonl) {
            WriteCtx x = {d, {w[0], w[1]}};
            each_record(c, d, write_record, &x, 0);
            continue;
        }
        Writer* wd = w[d->val];
        w_put(wd, BOS_TOKEN);
        for (int j = 0; j < d->n_files; j++) w_append_file(wd, c->files.v[d->fidx[j]]);
        wd->n_docs++;
    }
    w_close_shard(w[0]);
    w_close_shard(w[1]);
}

static void print_split(const Writer* w, const char* dir) {
    printf("%s: %lld document%s, %lld tokens, %d shard%s", w->split, (long long)w->n_docs, w->n_docs == 1 ? "" : "s",
           (long long)w->n_tokens, w->n_shards, w->n_shards == 1 ? "" : "s");
    if (w->n_shards == 0) { printf(" (none written)\n"); return; }
    char pat[64];
    snprintf(pat, sizeof(pat), "%s_*.bin", w->split);
    char* glob = join(dir, pat);
    printf(" (%s)\n", glob);
    free(glob);
    for (int i = 0; i < w->n_shards; i++) {
        char name[64];
        snprintf(name, sizeof(name), "%s_%06d.bin", w->split, i);
        char* path = join(dir, name);
        printf("  %s\n", path);
        free(path);
    }
}

// ----------------------------------------------------------------------------------------------------
// DIR/meta.json: what build/train and build/eval take as defaults (vocab_size, eod), and where the data came from

static void json_str(FILE* f, const char* s) {
    fputc('"', f);
    for (const unsigned char* p = (const unsigned char*)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static void write_meta(const char* dir, const Writer* tr, const Writer* va, int argc, char** argv) {
    char* path = join(dir, "meta.json");
    char* tmp = join(dir, ".meta.json.tmp");
    FILE* f = fopen(tmp, "w");
    if (!f) die("cannot create '%s': %s", tmp, strerror(errno));
    strs_add(&g_created, tmp);
    fprintf(f, "{\n  \"format\": \"ringlm-data-1\",\n  \"tokenizer\": \"bytes\",\n  \"tokenizer_sha256\": null,\n"
               "  \"vocab_size\": 257,\n  \"eod_id\": %d,\n  \"bos_id\": null,\n  \"dtype\": \"uint16\",\n"
               "  \"documents\": {\"train\": %lld, \"val\": %lld},\n  \"tokens\": {\"train\": %lld, \"val\": %lld},\n"
               "  \"shards\": {\"train\": %d, \"val\": %d},\n  \"command\": ",
            BOS_TOKEN, (long long)tr->n_docs, (long long)va->n_docs, (long long)tr->n_tokens, (long long)va->n_tokens, tr->n_shards, va->n_shards);
    size_t n = 1;
    for (int i = 0; i < argc; i++) n += strlen(argv[i]) * 4 + 3;
    char* cmd = xrealloc(NULL, n);
    char* q = cmd;
    for (int i = 0; i < argc; i++) {                          // shell-quoted where needed
        const char* a = argv[i];
        int plain = *a != 0;
        for (const char* c = a; *c; c++) if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=,:+@%", *c)) plain = 0;
        if (i) *q++ = ' ';
        if (plain) { strcpy(q, a); q += strlen(a); continue; }
        *q++ = '\'';
        for (const char* c = a; *c; c++) { if (*c == '\'') { strcpy(q, "'\\''"); q += 4; } else *q++ = *c; }
        *q++ = '\'';
    }
    *q = 0;
    json_str(f, cmd);
    free(cmd);
    fprintf(f, "\n}\n");
    if (fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0 || fclose(f) != 0) die("cannot write '%s': %s", tmp, strerror(errno));
    if (rename(tmp, path) != 0) die("cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    strs_add(&g_created, path);
    free(tmp);
    free(path);
}

// ----------------------------------------------------------------------------------------------------

// --doc-lengths: the written training shards' documents (each starts at token 256), through eval/doclen.h
static void print_doc_lengths(const char* out, int n_shards, int64_t window) {
    if (n_shards == 0) { printf("document lengths: no training documents\n"); return; }
    char* pat = join(out, "train_*.bin");
    Loader ld;
    int64_t* lens = NULL;
    int64_t n = 0;
    char e[1400] = "";
    if (loader_open(&ld, pat, 1, 257, 0, 0)) die("%s", ld.err);
    if (pack_doc_lengths(ld.n_tokens, 256, loader_read_fn, &ld, &lens, &n, e, sizeof e)) die("%s", ld.err[0] ? ld.err : e);
    loader_close(&ld);
    if (doclen_report(stdout, lens, n, window, "training documents", NULL, NULL, e, sizeof e)) die("%s", e);
    free(lens);
    free(pat);
}

#define VAL_FEW_DOCS 8   // a held-out split of fewer documents gets a warning
// .prepare-PID.tmp / .prepare-PID.old in dir left by a build/prepare that no longer runs (killed): named on stderr,
// never deleted (this run did not write them)
static void note_leftovers(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return;
    struct dirent* e;
    while ((e = readdir(d))) {
        int pid = 0, n = 0;
        char kind[8] = "";
        if (sscanf(e->d_name, ".prepare-%d.%3[a-z]%n", &pid, kind, &n) != 2 || e->d_name[n] || pid <= 0 || pid == (int)getpid() ||
            (strcmp(kind, "tmp") && strcmp(kind, "old")))
            continue;
        if (kill(pid, 0) == 0 || errno != ESRCH) continue;   // its prepare still runs
        char* p = join(dir, e->d_name);
        long long bytes = 0;
        DIR* sd = opendir(p);
        struct dirent* f;
        while (sd && (f = readdir(sd))) {
            struct stat st;
            char* q = join(p, f->d_name);
            if (!lstat(q, &st) && S_ISREG(st.st_mode)) bytes += st.st_size;
            free(q);
        }
        if (sd) closedir(sd);
        if (!strcmp(kind, "tmp"))
            fprintf(stderr, "prepare: note: '%s' is left from a build/prepare that was killed (pid %d no longer runs): "
                    "%.1f MiB of unfinished shards; remove it (rm -r)\n", p, pid, bytes / 1048576.0);
        else
            fprintf(stderr, "prepare: note: '%s' holds the files a killed build/prepare --force (pid %d) had set aside "
                    "(%.1f MiB): move them back into '%s' if it lacks its shards or meta.json, else remove it (rm -r)\n",
                    p, pid, bytes / 1048576.0, dir);
        free(p);
    }
    closedir(d);
}

int main(int argc, char** argv) {
    stdout_lines();   // each line appears when printed, also into a file or pipe
    Options o = parse_args(argc, argv);
    Corpus c = {0};
    g_out_known = stat(o.out, &g_out) == 0 && S_ISDIR(g_out.st_mode);
    if (g_out_known) note_leftovers(o.out);
    c.field = o.text_field;
    collect(&c, &o);
    skip_duplicates(&c, o.keep_copies);
    if (c.n_docs == 0)
        die("no documents found in the given paths (empty and binary files, symlinks and hidden directories are skipped%s%s)",
            c.skip_output ? ", and the output directory's own meta.json and shards are never input" : "",
            c.dup_file + c.dup_content ? ", and duplicates" : "");
    unique_keys(&c);
    int64_t n_units = assign(&c, o.val_frac, o.seed);
    make_out_dir(o.out);
    StrList old = list_old(o.out, o.force);

    // everything is written into a staging directory beside the old files, read back, and only then swapped in
    char staging_name[64];
    snprintf(staging_name, sizeof(staging_name), ".prepare-%d.tmp", (int)getpid());
    char* staging = join(o.out, staging_name);
    if (mkdir(staging, 0755) != 0) die("cannot create '%s': %s", staging, strerror(errno));
    g_staging = staging;
    static Writer train, val;                                // static: each holds a 128 KiB buffer
    w_init(&train, staging, "train", o.shard_tokens);
    w_init(&val, staging, "val", o.shard_tokens);
    Writer* w[2] = {&train, &val};
    write_splits(w, &c);
    write_meta(staging, &train, &val, argc, argv);
    StrList neu = {0};
    w_verify(&train, &neu);
    w_verify(&val, &neu);
    strs_add(&neu, "meta.json");                             // last: the description comes with the shards
    fsync_path(staging);
    swap_in(o.out, staging, &old, &neu);
    if (rmdir(staging) == 0) g_staging = NULL;

    int n_files = 0;
    for (int i = 0; i < c.n_docs; i++) n_files += c.docs[i].n_files;
    printf("prepare: %lld documents from %d files (skipped: binary %d, empty %d, symlinks %d, hidden dirs %d, "
           "other %d", (long long)n_units, n_files, c.skip_binary, c.skip_empty, c.skip_symlink, c.skip_hidden, c.skip_other);
    if (c.skip_output) printf(", the output directory's own meta.json and shards %d", c.skip_output);
    if (c.dup_file + c.dup_content)
        printf(", duplicates %d: the same file %d, the same bytes %d; e.g. %s", c.dup_file + c.dup_content, c.dup_file,
               c.dup_content, c.dup_example);
    printf(")\n");
    if (c.n_jsonl)
        printf("jsonl: %lld records with text from %d JSON Lines file%s (field '%s'; skipped: empty or null %lld)\n",
               (long long)(n_units - (c.n_docs - c.n_jsonl)), c.n_jsonl, c.n_jsonl == 1 ? "" : "s", c.field,
               (long long)c.empty_records);
    if (c.lone_surrogates)
        printf("jsonl: %lld \\u escapes of lone UTF-16 surrogates (no character) were replaced by U+FFFD\n",
               (long long)c.lone_surrogates);
    if (c.renamed)
        printf("split: %d documents shared their name with another (e.g. files of one basename from several "
               "directories): each is split by its path below the directory that holds them all, e.g. %s\n",
               c.renamed, c.renamed_example);
    print_split(&train, o.out);
    print_split(&val, o.out);
    if (o.val_frac > 0 && val.n_docs < VAL_FEW_DOCS) {  // asked for a held-out split, got one too small to compare with
        double expect = o.val_frac * (double)n_units;
        char why[512];
        if (expect < VAL_FEW_DOCS)
            snprintf(why, sizeof why, "%g x %lld documents is %.1f%s", o.val_frac, (long long)n_units, expect,
                     o.doc_per_dir ? "; --doc-per dir makes each directory PATH one document" : "");
        else
            snprintf(why, sizeof why, "about %.0f were expected (%g x %lld documents): the seeded hash of the documents' "
                     "names gave fewer by chance, another --seed gives another draw", expect, o.val_frac, (long long)n_units);
        printf("WARNING: the held-out split has only %lld document%s (%s): a validation loss or a "
               "perplexity by position over so few documents is noisy, and differences between settings may not show; "
               "give more documents (more paths%s) or a larger --val-frac\n", (long long)val.n_docs,
               val.n_docs == 1 ? "" : "s", why, o.doc_per_dir ? ", or --doc-per file" : "");
    }
    if (o.doc_lengths >= 0) print_doc_lengths(o.out, train.n_shards, o.doc_lengths);
    free(train.path); free(val.path);
    corpus_free(&c);
    strs_free(&g_created);
    strs_free(&old); strs_free(&neu);
    free(staging);
    strs_free(&o.paths); strs_free(&o.origins);
    return fflush(stdout) == 0 ? 0 : 1;
}

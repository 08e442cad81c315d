// tool_detok.c — data/tokenizer.h's decoding on its own, for tests/test_corpora.sh to compare with the tokenizers
// library's decode: the ids on standard input (separated by commas, spaces or newlines) decoded through TOKENIZER,
// their bytes concatenated on standard output; with --lines each input line is a sequence of ids and each output line
// the hex digits of its bytes; --sha256 FILE prints sha256_file's digest instead.
//   build/tests/tool_detok TOKENIZER [--lines] < ids        build/tests/tool_detok --sha256 FILE
// Errors: one line on stderr, exit status 1.
#include "data/tokenizer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
    char err[1400];
    if (argc == 3 && !strcmp(argv[1], "--sha256")) {
        char hex[65];
        if (sha256_file(argv[2], hex, err, sizeof err)) { fprintf(stderr, "tool_detok: %s\n", err); return 1; }
        printf("%s\n", hex);
        return 0;
    }
    int lines = argc == 3 && !strcmp(argv[2], "--lines");
    if (argc != 2 && !lines) { fprintf(stderr, "usage: tool_detok TOKENIZER [--lines] < ids | tool_detok --sha256 FILE\n"); return 1; }
    TokDecoder t;
    if (tokdec_load(&t, argv[1], err, sizeof err)) { fprintf(stderr, "tool_detok: %s\n", err); return 1; }
    int c, have = 0;
    long id = 0;
    for (;;) {
        c = getchar();
        if (c >= '0' && c <= '9') { id = id * 10 + (c - '0'); have = 1; continue; }
        if (have) {
            size_t n;
            const unsigned char* b = tokdec_bytes(&t, (int)id, &n);
            if (lines) for (size_t i = 0; i < n; i++) printf("%02x", b[i]);
            else fwrite(b, 1, n, stdout);
        }
        have = 0;
        id = 0;
        if (lines && c == '\n') putchar('\n');
        if (c == EOF) break;
        if (c != ',' && c != ' ' && c != '\n') { fprintf(stderr, "tool_detok: ids are numbers separated by commas, spaces or newlines\n"); return 1; }
    }
    tokdec_free(&t);
    return fflush(stdout) ? 1 : 0;
}

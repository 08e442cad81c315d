// passkey.c — passkey-retrieval documents (see passkey.h).
#include "common/util.h"
#include "eval/passkey.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char FILLER[] = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";


static int put_str(int* t, const char* s) {   // bytes of s as tokens; returns the count
    int n = 0;
    for (; *s; s++) t[n++] = (unsigned char)*s;
    return n;
}

// the last n tokens of the endless filler repetition (ends with the end of a full FILLER)
static void put_filler_tail(int* t, int n) {
    int fl = (int)sizeof(FILLER) - 1;
    int start = ((fl - n % fl) % fl);          // offset in FILLER of the first token
    for (int i = 0; i < n; i++) t[i] = (unsigned char)FILLER[(start + i) % fl];
}

int passkey_make(uint64_t seed, int len, double depth, int* tokens, char key[PASSKEY_DIGITS + 1], int* needle_pos) {
    if (len < PASSKEY_MIN_LEN || !(depth >= 0.0 && depth <= 1.0)) return 1;
    char k[PASSKEY_DIGITS + 1], needle[128], question[96];
    snprintf(k, sizeof k, "%05d", (int)(10000 + mix64(seed) % 90000));
    int nl = snprintf(needle, sizeof needle, "The pass key is %s. Remember it. %s is the pass key. ", k, k);
    int ql = snprintf(question, sizeof question, "What is the pass key? The pass key is %s", k);
    if (nl != PASSKEY_NEEDLE_LEN || ql != PASSKEY_QUESTION_LEN) return 1;   // layout constants out of sync
    int free_len = len - 1 - nl - ql;
    int a = (int)floor(depth * free_len + 0.5), b = free_len - a;
    int p = 0;
    tokens[p++] = 256;
    put_filler_tail(tokens + p, a); p += a;
    int np = p;
    p += put_str(tokens + p, needle);
    put_filler_tail(tokens + p, b); p += b;
    p += put_str(tokens + p, question);
    if (key) memcpy(key, k, sizeof k);
    if (needle_pos) *needle_pos = np;
    return p == len ? 0 : 1;
}

// doclen.c — the document length distribution of a data set (see doclen.h).
#include "eval/doclen.h"
#include "eval/report.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NB 48   // log2 buckets [2^k, 2^(k+1)), k < NB

static int cmp_i64(const void* a, const void* b) {
    int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
    return x < y ? -1 : x > y;
}

static int bucket(int64_t len) { int k = 0; while (k + 1 < NB && ((int64_t)1 << (k + 1)) <= len) k++; return k; }

static int dl_fail(char* err, size_t n, const char* path) {
    if (err) snprintf(err, n, "cannot write '%s': %s", path, strerror(errno));
    return 1;
}

static int write_csv(const char* path, const int64_t* docs, const double* toks, int64_t n, double total, char* err, size_t errlen) {
    FILE* f = fopen(path, "w");
    if (!f) return dl_fail(err, errlen, path);
    fprintf(f, "bucket_lo,bucket_hi,documents,tokens,frac_documents,frac_tokens\n");
    for (int k = 0; k < NB; k++)
        if (docs[k]) fprintf(f, "%lld,%lld,%lld,%.0f,%.10g,%.10g\n", 1LL << k, 1LL << (k + 1), (long long)docs[k], toks[k],
                             (double)docs[k] / (double)n, toks[k] / total);
    int bad = ferror(f);
    if (fclose(f) || bad) return dl_fail(err, errlen, path);
    return 0;
}

// two bars per bucket: the share of documents and the share of tokens
static int write_svg(const char* path, const int64_t* docs, const double* toks, int64_t n, double total, int k0, int k1,
                     const char* title, int64_t window, char* err, size_t errlen) {
    FILE* f = fopen(path, "w");
    if (!f) return dl_fail(err, errlen, path);
    const int Wd = 760, H = 420, L = 60, R = 20, Tp = 40, B = 60;
    int nb = k1 - k0 + 1;
    double ymax = 0;
    for (int k = k0; k <= k1; k++) {
        double a = (double)docs[k] / (double)n, b = toks[k] / total;
        if (a > ymax) ymax = a;
        if (b > ymax) ymax = b;
    }
    ymax = ymax > 0 ? ymax * 1.1 : 1;
    double bw = (double)(Wd - L - R) / nb;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            Wd, H, Wd, H);
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"14\">", L);
    report_xml_text(f, title);
    fprintf(f, "</text>\n");
    for (int t = 0; t <= 4; t++) {   // y grid
        double v = ymax * t / 4, y = H - B - (H - B - Tp) * (v / ymax);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n<text x=\"%d\" y=\"%.1f\" "
                "text-anchor=\"end\">%.0f%%</text>\n", L, y, Wd - R, y, L - 6, y + 4, 100 * v);
    }
    for (int k = k0; k <= k1; k++) {
        double x = L + (k - k0) * bw, a = (double)docs[k] / (double)n, b = toks[k] / total;
        double ha = (H - B - Tp) * a / ymax, hb = (H - B - Tp) * b / ymax;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#1f77b4\"/>\n", x + bw * 0.1, H - B - ha, bw * 0.38, ha);
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#ff7f0e\"/>\n", x + bw * 0.5, H - B - hb, bw * 0.38, hb);
        long long lo = 1LL << k;
        char lab[32];
        if (lo >= 1 << 20) snprintf(lab, sizeof lab, "%lldM", lo >> 20);
        else if (lo >= 1024) snprintf(lab, sizeof lab, "%lldk", lo >> 10);
        else snprintf(lab, sizeof lab, "%lld", lo);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x + bw / 2, H - B + 14, lab);
    }
    if (window > 0) {   // the window: the bucket holding window + 1 slots, marked where it falls
        double k = 0; int64_t w = window + 1;
        while (((int64_t)1 << ((int)k + 1)) <= w) k++;
        double frac = (double)(w - ((int64_t)1 << (int)k)) / (double)((int64_t)1 << (int)k);
        double x = L + (k + frac - k0) * bw;
        if (k >= k0 && k <= k1)
            fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#d62728\" stroke-dasharray=\"4,3\"/>\n"
                    "<text x=\"%.1f\" y=\"%d\" fill=\"#d62728\">window %lld</text>\n", x, Tp, x, H - B, x + 3, Tp + 10, (long long)window);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">document length (tokens; bucket [2^k, 2^(k+1)))</text>\n",
            (L + Wd - R) / 2, H - B + 34);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"#1f77b4\"/><text x=\"%d\" y=\"%d\">share of documents</text>\n"
            "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"#ff7f0e\"/><text x=\"%d\" y=\"%d\">share of tokens</text>\n",
            L, H - 16, L + 14, H - 7, L + 160, H - 16, L + 174, H - 7);
    fprintf(f, "</svg>\n");
    int bad = ferror(f);
    if (fclose(f) || bad) return dl_fail(err, errlen, path);
    return 0;
}

int doclen_report(FILE* f, const int64_t* lens, int64_t n, int64_t window, const char* title, const char* csv,
                  const char* svg, char* err, size_t errlen) {
    if (n <= 0) { if (err) snprintf(err, errlen, "no documents"); return 1; }
    int64_t docs[NB] = {0};
    double toks[NB] = {0}, total = 0;
    int64_t* s = malloc((size_t)n * sizeof(int64_t));
    if (!s) { if (err) snprintf(err, errlen, "out of memory"); return 1; }
    memcpy(s, lens, (size_t)n * sizeof(int64_t));
    qsort(s, (size_t)n, sizeof(int64_t), cmp_i64);
    int k0 = NB, k1 = 0;
    for (int64_t i = 0; i < n; i++) {
        int k = bucket(s[i] > 0 ? s[i] : 1);
        docs[k]++; toks[k] += (double)s[i]; total += (double)s[i];
        if (k < k0) k0 = k;
        if (k > k1) k1 = k;
    }
    fprintf(f, "%s: %lld documents, %.0f tokens; length median %lld, 90th percentile %lld, longest %lld\n", title,
            (long long)n, total, (long long)s[(n - 1) / 2], (long long)s[(int64_t)((n - 1) * 0.9)], (long long)s[n - 1]);
    if (window > 0) {   // a document of L tokens fits a window of window + 1 slots when L <= window + 1
        int64_t fit = 0;
        double fit_tok = 0, whole = 0;
        for (int64_t i = 0; i < n; i++)
            if (s[i] <= window + 1) { fit++; fit_tok += (double)s[i]; whole += (double)(window + 1 - s[i]) / (double)window; }
        fprintf(f, "window %lld: %lld documents (%.1f%%, %.1f%% of the tokens) fit one window; a stream window holds such a "
                "document whole with probability (W - L) / W, %.1f%% of them on average (pack = best_fit: all)\n",
                (long long)window, (long long)fit, 100.0 * fit / n, 100.0 * fit_tok / total, fit ? 100.0 * whole / fit : 0.0);
    }
    fprintf(f, "%-20s %10s %8s %14s %8s %8s\n", "length", "documents", "%", "tokens", "%", "cum. %");
    double cum = 0;
    for (int k = k0; k <= k1; k++) {
        char r[48];
        snprintf(r, sizeof r, "[%lld, %lld)", 1LL << k, 1LL << (k + 1));
        cum += toks[k];
        fprintf(f, "%-20s %10lld %8.2f %14.0f %8.2f %8.2f\n", r, (long long)docs[k], 100.0 * docs[k] / n, toks[k],
                100.0 * toks[k] / total, 100.0 * cum / total);
    }
    free(s);
    if (csv && write_csv(csv, docs, toks, n, total, err, errlen)) return 1;
    if (svg && write_svg(svg, docs, toks, n, total, k0, k1, title, window, err, errlen)) return 1;
    return 0;
}

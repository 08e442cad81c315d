// report.c — position buckets, perplexity, and the report writers of build/eval (see report.h).
//
// SVG layout (pixels): a plot area of PLOT_W x PLOT_H at (MARGIN_L, MARGIN_T), the title centred above it,
// tick labels and axis names below / left of it, the legend to its right. All coordinates are printed
// with one decimal. Axis mapping is affine in the (possibly log) value: see Axis below.
#include "eval/report.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// ----------------------------------------------------------------------------------------------------
// buckets

static int buckets_alloc(Buckets* b, int n) {
    b->n = n;
    b->lo = (long long*)malloc((size_t)n * sizeof(long long));
    b->hi = (long long*)malloc((size_t)n * sizeof(long long));
    if (!b->lo || !b->hi) { buckets_free(b); return 1; }
    return 0;
}

int buckets_fixed(Buckets* b, long long ctx, long long width) {
    memset(b, 0, sizeof(*b));
    if (width <= 0 || width > ctx) return 1;
    long long n = (ctx + width - 1) / width;
    if (n > 0x7fffffff || buckets_alloc(b, (int)n)) return 1;
    for (int i = 0; i < b->n; i++) {
        b->lo[i] = (long long)i * width;
        b->hi[i] = b->lo[i] + width < ctx ? b->lo[i] + width : ctx;
    }
    return 0;
}

int buckets_log(Buckets* b, long long ctx) {
    memset(b, 0, sizeof(*b));
    if (ctx <= 0) return 1;
    int n = 1;                                  // [0,1), then one bucket per power of two below ctx
    for (long long p = 1; p < ctx; p *= 2) n++;
    if (buckets_alloc(b, n)) return 1;
    b->lo[0] = 0; b->hi[0] = 1;
    long long p = 1;
    for (int i = 1; i < n; i++, p *= 2) {
        b->lo[i] = p;
        b->hi[i] = 2 * p < ctx ? 2 * p : ctx;
    }
    return 0;
}

int bucket_of(const Buckets* b, long long pos) {
    if (b->n <= 0 || pos < b->lo[0]) return -1;
    int lo = 0, hi = b->n - 1;                  // last bucket with lo[i] <= pos
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (b->lo[mid] <= pos) lo = mid; else hi = mid - 1;
    }
    return pos < b->hi[lo] ? lo : -1;
}

void buckets_free(Buckets* b) {
    free(b->lo); free(b->hi);
    b->lo = b->hi = NULL; b->n = 0;
}

// ----------------------------------------------------------------------------------------------------
// series

int series_init(Series* s, const Buckets* b, const char* label) {
    memset(s, 0, sizeof(*s));
    snprintf(s->label, sizeof(s->label), "%s", label ? label : "");
    size_t n = b->n > 0 ? (size_t)b->n : 1;
    s->nll_sum = (double*)calloc(n, sizeof(double));
    s->count = (long long*)calloc(n, sizeof(long long));
    s->units = (long long*)calloc(n, sizeof(long long));
    s->u_ss = (double*)calloc(n, sizeof(double));
    s->u_sc = (double*)calloc(n, sizeof(double));
    s->u_cc = (double*)calloc(n, sizeof(double));
    if (!s->nll_sum || !s->count || !s->units || !s->u_ss || !s->u_sc || !s->u_cc) { series_free(s); return 1; }
    return 0;
}

void series_add(Series* s, const Buckets* b, long long pos, double nll, long long n) {
    int i = bucket_of(b, pos);
    if (i < 0) return;
    s->nll_sum[i] += nll;
    s->count[i] += n;
}

void series_add_unit(Series* s, int i, double nll, double n) {
    if (n == 0) return;
    s->units[i]++;
    s->u_ss[i] += nll * nll;
    s->u_sc[i] += nll * n;
    s->u_cc[i] += n * n;
}

void series_free(Series* s) {
    free(s->nll_sum); free(s->count); free(s->units); free(s->u_ss); free(s->u_sc); free(s->u_cc);
    s->nll_sum = NULL; s->count = NULL; s->units = NULL; s->u_ss = s->u_sc = s->u_cc = NULL;
}

double bucket_ppl(const Series* s, int i) {
    if (s->count[i] == 0) return NAN;
    return exp(s->nll_sum[i] / (double)s->count[i]);
}

double bucket_se(const Series* s, int i) {
    long long U = s->units ? s->units[i] : 0;
    if (U < 2 || s->count[i] == 0) return NAN;
    double N = (double)s->count[i], m = s->nll_sum[i] / N;
    double ss = s->u_ss[i] - 2 * m * s->u_sc[i] + m * m * s->u_cc[i];   // sum_u (s_u - m n_u)^2
    if (ss < 0) ss = 0;                                                 // rounding
    return sqrt((double)U / (double)(U - 1) * ss) / N;
}

static void series_total(const Series* s, int nb, double* sum, long long* count) {
    *sum = 0; *count = 0;
    for (int i = 0; i < nb; i++) { *sum += s->nll_sum[i]; *count += s->count[i]; }
}

// ----------------------------------------------------------------------------------------------------
// file helpers

static void set_err(char* err, size_t errlen, const char* path, int e) {
    if (err && errlen) snprintf(err, errlen, "cannot write '%s': %s", path, strerror(e));
}

static FILE* open_out(const char* path, char* err, size_t errlen) {
    FILE* f = fopen(path, "w");
    if (!f) set_err(err, errlen, path, errno);
    return f;
}

// close and report a write error (disk full etc.) that stdio kept until now
static int close_out(FILE* f, const char* path, char* err, size_t errlen) {
    int bad = ferror(f);
    int e = bad ? (errno ? errno : EIO) : 0;
    if (fclose(f) != 0 && !bad) { bad = 1; e = errno ? errno : EIO; }
    if (bad) { set_err(err, errlen, path, e); return 1; }
    return 0;
}

// a CSV field: quoted (with "" for ") when it holds a comma, quote or line break
static void csv_field(FILE* f, const char* s) {
    if (!strpbrk(s, ",\"\r\n")) { fputs(s, f); return; }
    fputc('"', f);
    for (; *s; s++) { if (*s == '"') fputc('"', f); fputc(*s, f); }
    fputc('"', f);
}

// length of a valid UTF-8 sequence at s (1..4), 0 when invalid
static int utf8_len(const unsigned char* s) {
    int n = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 && s[0] < 0xE0 ? 2 : 0;
    for (int k = 1; k < n; k++) if ((s[k] & 0xC0) != 0x80) return 0;
    if (n == 3 && s[0] == 0xE0 && s[1] < 0xA0) return 0;           // overlong
    if (n == 3 && s[0] == 0xED && s[1] >= 0xA0) return 0;          // surrogates
    if (n == 4 && s[0] == 0xF0 && s[1] < 0x90) return 0;           // overlong
    if (n == 4 && s[0] == 0xF4 && s[1] >= 0x90) return 0;          // above U+10FFFF
    return n;
}

// XML text / attribute content: & < > " ' escaped; control bytes and invalid UTF-8 become '?'
static void xml_text(FILE* f, const char* str);
void report_xml_text(FILE* f, const char* str) { xml_text(f, str); }
static void xml_text(FILE* f, const char* str) {
    const unsigned char* s = (const unsigned char*)str;
    while (*s) {
        unsigned char c = *s;
        if (c == '&') fputs("&amp;", f);
        else if (c == '<') fputs("&lt;", f);
        else if (c == '>') fputs("&gt;", f);
        else if (c == '"') fputs("&quot;", f);
        else if (c == '\'') fputs("&apos;", f);
        else if (c < 0x20 || c == 0x7F) fputc(c == '\t' ? ' ' : '?', f);
        else if (c < 0x80) fputc(c, f);
        else {
            int n = utf8_len(s);
            if (n == 0) { fputc('?', f); s++; continue; }
            fwrite(s, 1, (size_t)n, f);
            s += n;
            continue;
        }
        s++;
    }
}

// a position / length for tick labels: 4096 → "4k", 1048576 → "1M", 1000 → "1000"
static void fmt_pos(char* buf, size_t n, double v) {
    long long x = llround(v);
    if (fabs(v - (double)x) > 1e-9 * fmax(1.0, fabs(v))) snprintf(buf, n, "%g", v);
    else if (x != 0 && x % 1048576 == 0) snprintf(buf, n, "%lldM", x / 1048576);
    else if (x != 0 && x % 1024 == 0) snprintf(buf, n, "%lldk", x / 1024);
    else snprintf(buf, n, "%lld", x);
}

// ----------------------------------------------------------------------------------------------------
// text table and CSV

static void fmt_ppl(char* buf, size_t n, double p) {
    if (isnan(p)) snprintf(buf, n, "-");
    else if (p < 1e6) snprintf(buf, n, "%.4f", p);
    else snprintf(buf, n, "%.4e", p);
}

// one series' three columns: tokens, mean loss, ppl, right-aligned in a group of width gw
static void table_cells(FILE* f, int gw, long long count, double sum) {
    char loss[32], ppl[32];
    if (count == 0) { snprintf(loss, sizeof loss, "-"); snprintf(ppl, sizeof ppl, "-"); }
    else { snprintf(loss, sizeof loss, "%.5f", sum / (double)count); fmt_ppl(ppl, sizeof ppl, exp(sum / (double)count)); }
    fprintf(f, " | %*lld %10s %12s", gw - 24, count, loss, ppl);
}

void report_rope_text(const char* rope, const char* trained, char* out, size_t n) {
    if (!rope || !rope[0]) { if (n) out[0] = 0; return; }
    if (!trained || !strcmp(rope, trained)) snprintf(out, n, "%s (as trained)", rope);
    else snprintf(out, n, "%s (override; trained %s)", rope, trained);
}

static int any_rope(const Series* s, int ns) {
    for (int j = 0; j < ns; j++) if (s[j].rope[0]) return 1;
    return 0;
}

void report_table(FILE* f, const Buckets* b, const Series* s, int ns) {
    int pw = (int)strlen("all positions");
    char range[64];
    for (int i = 0; i < b->n; i++) {
        int k = snprintf(range, sizeof range, "[%lld, %lld)", b->lo[i], b->hi[i]);
        if (k > pw) pw = k;
    }
    int* gw = (int*)malloc((size_t)(ns > 0 ? ns : 1) * sizeof(int));   // group width per series
    if (!gw) return;
    int ropes = any_rope(s, ns);
    char rope[160];
    for (int j = 0; j < ns; j++) {
        int l = (int)strlen(s[j].label);
        report_rope_text(s[j].rope, s[j].rope_trained, rope, sizeof rope);
        if ((int)strlen(rope) > l) l = (int)strlen(rope);
        gw[j] = l > 34 ? l : 34;
    }
    // header: labels over their groups, then the RoPE of each series, then the column names
    fprintf(f, "%-*s", pw, "position");
    for (int j = 0; j < ns; j++) fprintf(f, " | %-*s", j + 1 < ns ? gw[j] : 0, s[j].label);   // no trailing blanks
    if (ropes) {
        fprintf(f, "\n%-*s", pw, "RoPE");
        for (int j = 0; j < ns; j++) {
            report_rope_text(s[j].rope, s[j].rope_trained, rope, sizeof rope);
            fprintf(f, " | %-*s", j + 1 < ns ? gw[j] : 0, rope);
        }
    }
    fprintf(f, "\n%-*s", pw, "");
    for (int j = 0; j < ns; j++) fprintf(f, " | %*s %10s %12s", gw[j] - 24, "tokens", "mean loss", "ppl");
    fprintf(f, "\n");
    for (int i = 0; i < b->n; i++) {
        snprintf(range, sizeof range, "[%lld, %lld)", b->lo[i], b->hi[i]);
        fprintf(f, "%-*s", pw, range);
        for (int j = 0; j < ns; j++) table_cells(f, gw[j], s[j].count[i], s[j].nll_sum[i]);
        fprintf(f, "\n");
    }
    fprintf(f, "%-*s", pw, "all positions");
    for (int j = 0; j < ns; j++) {
        double sum; long long count;
        series_total(&s[j], b->n, &sum, &count);
        table_cells(f, gw[j], count, sum);
    }
    fprintf(f, "\n");
    free(gw);
}

int report_csv(const char* path, const Buckets* b, const Series* s, int ns, char* err, size_t errlen) {
    FILE* f = open_out(path, err, errlen);
    if (!f) return 1;
    int ropes = any_rope(s, ns);
    fprintf(f, "series,bucket_lo,bucket_hi,tokens,mean_nll,ppl,docs,se_nll,ppl_lo,ppl_hi%s\n", ropes ? ",rope,rope_trained" : "");
    for (int j = 0; j < ns; j++) {
        for (int i = 0; i < b->n; i++) {
            csv_field(f, s[j].label);
            fprintf(f, ",%lld,%lld,%lld,", b->lo[i], b->hi[i], s[j].count[i]);
            double m = NAN;
            if (s[j].count[i] > 0) {
                m = s[j].nll_sum[i] / (double)s[j].count[i];
                fprintf(f, "%.10g,%.10g", m, exp(m));
            } else {
                fprintf(f, ",");
            }
            double se = bucket_se(&s[j], i);
            fprintf(f, ",%lld,", s[j].units ? s[j].units[i] : 0);
            if (!isnan(se)) fprintf(f, "%.10g,%.10g,%.10g", se, exp(m - se), exp(m + se));
            else fprintf(f, ",,");
            if (ropes) {
                fprintf(f, ",");
                csv_field(f, s[j].rope);
                fprintf(f, ",");
                csv_field(f, s[j].rope_trained);
            }
            fprintf(f, "\n");
        }
    }
    return close_out(f, path, err, errlen);
}

// ----------------------------------------------------------------------------------------------------
// axes: value → pixel, affine in v (linear) or log10(v) (log); ticks chosen per scale

typedef struct {
    int log;             // 1: map log10(v)
    double d0, d1;       // domain, in mapped units (v or log10 v)
    double p0, p1;       // pixels of d0 and d1
} Axis;

static double ax_map(const Axis* a, double v) {
    double t = a->log ? log10(v) : v;
    return a->p0 + (t - a->d0) / (a->d1 - a->d0) * (a->p1 - a->p0);
}

static int ax_inside(const Axis* a, double v) {
    if (a->log && !(v > 0)) return 0;
    double t = a->log ? log10(v) : v;
    double lo = fmin(a->d0, a->d1), hi = fmax(a->d0, a->d1), eps = 1e-9 * (hi - lo);
    return t >= lo - eps && t <= hi + eps;
}

// a "nice" step (1, 2 or 5 x 10^k) near range / target
static double nice_step(double range, int target) {
    double raw = range / target, mag = pow(10, floor(log10(raw))), r = raw / mag;
    return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
}

#define MAX_TICKS 64

// linear ticks: multiples of a nice step inside [lo, hi]
static int ticks_linear(double lo, double hi, int target, double* t) {
    double step = nice_step(hi - lo, target);
    int n = 0;
    for (double v = ceil(lo / step - 1e-9) * step; v <= hi + 1e-9 * step && n < MAX_TICKS; v += step)
        t[n++] = fabs(v) < 1e-12 * step ? 0 : v;
    return n;
}

// log10 ticks inside [10^lo, 10^hi]: 1-2-5 per decade when the span is short, else every k-th decade
static int ticks_log10(double lo, double hi, double* t) {
    int n = 0;
    double span = hi - lo;
    if (span <= 3) {
        static const double m[3] = {1, 2, 5};
        for (int e = (int)floor(lo); e <= (int)ceil(hi) && n < MAX_TICKS; e++)
            for (int k = 0; k < 3 && n < MAX_TICKS; k++) {
                double v = m[k] * pow(10, e), lv = log10(v);
                if (lv >= lo - 1e-9 && lv <= hi + 1e-9) t[n++] = v;
            }
    } else {
        int step = (int)ceil(span / 8);
        for (int e = (int)ceil(lo - 1e-9); e <= hi + 1e-9 && n < MAX_TICKS; e += step) t[n++] = pow(10, e);
    }
    return n;
}

// log ticks at powers of two inside [10^lo, 10^hi] (at most ~10)
static int ticks_pow2(double lo, double hi, double* t) {
    double l2 = lo / log10(2), h2 = hi / log10(2);
    int e0 = (int)ceil(l2 - 1e-9), e1 = (int)floor(h2 + 1e-9);
    int step = e1 - e0 + 1 > 10 ? (e1 - e0 + 10) / 10 : 1, n = 0;
    for (int e = e0; e <= e1 && n < MAX_TICKS; e += step) t[n++] = ldexp(1.0, e);
    return n;
}

static void fmt_num(char* buf, size_t n, double v) { snprintf(buf, n, "%g", v); }

// ----------------------------------------------------------------------------------------------------
// SVG pieces

static const char* PALETTE[10] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

static void svg_begin(FILE* f, double w, double h) {
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", w, h, w, h);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", w, h);
}

static void svg_text(FILE* f, double x, double y, const char* anchor, const char* extra, const char* s) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s%s>", x, y, anchor, extra ? " " : "", extra ? extra : "");
    xml_text(f, s);
    fprintf(f, "</text>\n");
}

static void svg_title(FILE* f, double x, double y, const char* title) {
    if (title && *title) svg_text(f, x, y, "middle", "font-size=\"16\" font-weight=\"bold\"", title);
}

// ----------------------------------------------------------------------------------------------------
// perplexity plot

#define PLOT_W 640.0
#define PLOT_H 380.0
#define MARGIN_L 80.0
#define MARGIN_T 50.0
#define MARGIN_B 60.0
#define CHAR_W 7.0        // rough width of one 12px sans-serif character, for layout only

// x domain: the whole context [lo[0], hi[n-1]] (linear) or the bucket centres (log)
static Axis x_axis(const Buckets* b, int log_x) {
    Axis a = {log_x, 0, 1, MARGIN_L, MARGIN_L + PLOT_W};
    if (b->n <= 0) return a;
    if (!log_x) {
        a.d0 = (double)b->lo[0]; a.d1 = (double)b->hi[b->n - 1];
        if (a.d1 <= a.d0) a.d1 = a.d0 + 1;
        return a;
    }
    double c0 = 0.5 * (double)(b->lo[0] + b->hi[0]), c1 = 0.5 * (double)(b->lo[b->n - 1] + b->hi[b->n - 1]);
    if (c0 <= 0) c0 = 0.5;
    if (c1 < c0) c1 = c0;
    double l0 = log10(c0), l1 = log10(c1), pad = l1 > l0 ? 0.04 * (l1 - l0) : 0.3;
    a.d0 = l0 - pad; a.d1 = l1 + pad;
    return a;
}

// the band of bucket i: exp(mean -/+ se); 0 when there is none (fewer than 2 units, or not finite)
static int bucket_band(const Series* s, int i, double* plo, double* phi) {
    double se = bucket_se(s, i);
    if (isnan(se) || s->count[i] == 0) return 0;
    double m = s->nll_sum[i] / (double)s->count[i];
    *plo = exp(m - se); *phi = exp(m + se);
    return isfinite(*plo) && isfinite(*phi) && *plo > 0;
}

// y domain from the finite perplexities and their bands; log10 when max/min > 10
static Axis y_axis(const Buckets* b, const Series* s, int ns) {
    double lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < ns; j++)
        for (int i = 0; i < b->n; i++) {
            double p = bucket_ppl(&s[j], i), bl = 0, bh = 0;
            if (isfinite(p)) { lo = fmin(lo, p); hi = fmax(hi, p); }
            if (isfinite(p) && bucket_band(&s[j], i, &bl, &bh)) { lo = fmin(lo, bl); hi = fmax(hi, bh); }
        }
    Axis a = {0, 0, 1, MARGIN_T + PLOT_H, MARGIN_T};
    if (!(lo <= hi)) return a;                          // no data: an empty 0..1 frame
    if (lo > 0 && hi / lo > 10) {
        double l0 = log10(lo), l1 = log10(hi), pad = 0.05 * (l1 - l0);
        a.log = 1; a.d0 = l0 - pad; a.d1 = l1 + pad;
        return a;
    }
    double pad = hi > lo ? 0.06 * (hi - lo) : fmax(0.05 * fabs(hi), 0.5);
    lo -= pad; hi += pad;
    double step = nice_step(hi - lo, 6);                // widen to whole steps so the frame ends on ticks
    a.d0 = floor(lo / step) * step; a.d1 = ceil(hi / step) * step;
    return a;
}

// grid lines, tick marks and tick labels of both axes. On a log x axis the ticks are positions: whole numbers
// only; position 0 cannot sit on a log scale, and its bucket [0, 1) is drawn at its centre 0.5, so when the first
// bucket is [0, 1) (zero_half) a tick at 0.5 is labelled "0" — never "0.5".
static void plot_axes(FILE* f, const Axis* ax, const Axis* ay, int zero_half, const char* per) {
    double t[MAX_TICKS];
    char buf[48];
    double ybot = MARGIN_T + PLOT_H;
    int n = ax->log ? ticks_pow2(ax->d0, ax->d1, t) : ticks_linear(ax->d0, ax->d1, 7, t);
    if (ax->log && n < 2) {                             // narrow log range: nice linear values instead
        double tl[MAX_TICKS];
        int m = ticks_linear(pow(10, ax->d0), pow(10, ax->d1), 5, tl);
        n = 0;
        for (int k = 0; k < m; k++) if (ax_inside(ax, tl[k])) t[n++] = tl[k];
    }
    if (ax->log) {                                      // positions: whole numbers, and 0 at 0.5 (above)
        int m = 0, half = 0;
        for (int k = 0; k < n; k++) {
            if (zero_half && fabs(t[k] - 0.5) < 1e-12) half = 1;
            else if (t[k] >= 1 && t[k] == floor(t[k])) t[m++] = t[k];
        }
        n = m;
        if (zero_half && (half || ax_inside(ax, 0.5)) && n < MAX_TICKS) {
            memmove(t + 1, t, (size_t)n * sizeof *t);
            t[0] = 0.5; n++;
        }
    }
    fprintf(f, "<g id=\"x-ticks\">\n");
    for (int k = 0; k < n; k++) {
        if (!ax_inside(ax, t[k])) continue;
        double x = ax_map(ax, t[k]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", x, MARGIN_T, x, ybot);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", x, ybot, x, ybot + 5);
        if (ax->log && t[k] < 1) snprintf(buf, sizeof buf, "0");   // the bucket [0, 1): position 0
        else fmt_pos(buf, sizeof buf, t[k]);
        svg_text(f, x, ybot + 19, "middle", NULL, buf);
    }
    fprintf(f, "</g>\n");
    n = ay->log ? ticks_log10(ay->d0, ay->d1, t) : ticks_linear(ay->d0, ay->d1, 6, t);
    fprintf(f, "<g id=\"y-ticks\">\n");
    for (int k = 0; k < n; k++) {
        if (!ax_inside(ay, t[k])) continue;
        double y = ax_map(ay, t[k]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", MARGIN_L, y, MARGIN_L + PLOT_W, y);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", MARGIN_L - 5, y, MARGIN_L, y);
        fmt_num(buf, sizeof buf, t[k]);
        svg_text(f, MARGIN_L - 8, y + 4, "end", NULL, buf);
    }
    fprintf(f, "</g>\n");
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>\n",
            MARGIN_L, MARGIN_T, PLOT_W, PLOT_H);
    svg_text(f, MARGIN_L + PLOT_W / 2, ybot + 42, "middle", "font-size=\"13\"",
             ax->log ? "position in context (log scale)" : "position in context");
    char rot[96];
    snprintf(rot, sizeof rot, "font-size=\"13\" transform=\"rotate(-90 %.1f %.1f)\"", 22.0, MARGIN_T + PLOT_H / 2);
    char yname[64];
    snprintf(yname, sizeof yname, "perplexity%s%s%s", per ? " per " : "", per ? per : "", ay->log ? " (log scale)" : "");
    svg_text(f, 22, MARGIN_T + PLOT_H / 2, "middle", rot, yname);
}

// the x axis's marks: each distinct trained context of the series, and each distinct design range F x L of a YaRN
// series (rope "yarn:F:L")
typedef struct { double x, factor; const char* col; const char* dash; char text[96]; } Mark;   // factor 0: trained
#define MAX_MARKS 24
static int ppl_marks(const Series* s, int ns, Mark* mk) {
    int n = 0;
    for (int j = 0; j < ns && n < MAX_MARKS; j++) {
        int seen = s[j].trained_len <= 0;
        for (int k = 0; k < j; k++) seen |= s[k].trained_len == s[j].trained_len;
        if (seen) continue;
        mk[n] = (Mark){ (double)s[j].trained_len, 0, "#555555", "6 4", "" };
        snprintf(mk[n++].text, sizeof mk->text, "trained context %lld", s[j].trained_len);
    }
    for (int j = 0; j < ns && n < MAX_MARKS; j++) {
        double F = 0;
        long long L = 0;
        if (sscanf(s[j].rope, "yarn:%lf:%lld", &F, &L) != 2 || !(F > 0) || L <= 0) continue;
        double x = F * (double)L;
        int seen = 0;
        for (int k = 0; k < n; k++) seen |= mk[k].factor > 0 && mk[k].x == x;
        if (seen) continue;
        mk[n] = (Mark){ x, F, PALETTE[j % 10], "2 3", "" };
        snprintf(mk[n++].text, sizeof mk->text, "YaRN x%g design range %.0f = %g x %lld", F, x, F, L);
    }
    return n;
}

int report_svg_ppl(const char* path, const Buckets* b, const Series* s, int ns, const PplPlot* o, char* err,
                   size_t errlen) {
    const char* title = o ? o->title : NULL;
    int log_x = o ? o->log_x : 0;
    size_t maxlab = 0;
    int ropes = any_rope(s, ns), bands = 0;
    char rope[200], text[160], band_text[128];
    Mark mk[MAX_MARKS];
    int nm = ppl_marks(s, ns, mk);
    Axis ax = x_axis(b, log_x), ay = y_axis(b, s, ns);
    for (int j = 0; j < ns; j++) {
        if (strlen(s[j].label) > maxlab) maxlab = strlen(s[j].label);
        report_rope_text(s[j].rope, s[j].rope_trained, text, sizeof text);
        if (ropes && 0.85 * (double)(strlen(text) + 5) > (double)maxlab) maxlab = (size_t)(0.85 * (double)(strlen(text) + 5) + 1);
        for (int i = 0; i < b->n; i++) {
            double bl, bh;
            bands |= isfinite(bucket_ppl(&s[j], i)) && bucket_band(&s[j], i, &bl, &bh);
        }
    }
    snprintf(band_text, sizeof band_text, "shaded: \xc2\xb1 1 standard error over the %s", o && o->units ? o->units : "units");
    for (int k = 0; k < nm; k++) {   // (the legend's note for a mark outside the plot: a log x axis ends at the last
        size_t l = strlen(mk[k].text);  // bucket's centre, short of the context's end)
        if (!ax_inside(&ax, mk[k].x))
            snprintf(mk[k].text + l, sizeof mk->text - l, b->n > 0 && mk[k].x == (double)b->hi[b->n - 1] ?
                     " (= this plot's context)" : " (beyond the plot)");
        if (0.85 * (double)strlen(mk[k].text) > (double)maxlab) maxlab = (size_t)(0.85 * (double)strlen(mk[k].text) + 1);
    }
    if (bands && 0.85 * (double)strlen(band_text) > (double)maxlab) maxlab = (size_t)(0.85 * (double)strlen(band_text) + 1);
    double legend_w = 50 + CHAR_W * (double)maxlab, legend_h = (ropes ? 34.0 : 20.0) * ns + 20.0 * (nm + bands) + (nm + bands ? 10 : 0);
    double w = MARGIN_L + PLOT_W + 20 + legend_w, h = MARGIN_T + PLOT_H + MARGIN_B;
    if (MARGIN_T + 20 + legend_h > h) h = MARGIN_T + 20 + legend_h;   // a long legend
    if (title && CHAR_W * 1.4 * (double)strlen(title) + 40 > w) w = CHAR_W * 1.4 * (double)strlen(title) + 40;
    FILE* f = open_out(path, err, errlen);
    if (!f) return 1;
    svg_begin(f, w, h);
    svg_title(f, MARGIN_L + PLOT_W / 2, 30, title);
    plot_axes(f, &ax, &ay, b->n > 0 && b->lo[0] == 0 && b->hi[0] == 1, o ? o->per : NULL);
    // the marks: a vertical line across the plot each, under the bands and lines, with a short label at its top
    fprintf(f, "<g id=\"marks\">\n");
    for (int k = 0, shown = 0; k < nm; k++) {
        if (!ax_inside(&ax, mk[k].x)) continue;
        double x = ax_map(&ax, mk[k].x), y = MARGIN_T + 12 + 12 * (shown++ % 3);
        fprintf(f, "<line class=\"mark\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\" "
                "stroke-dasharray=\"%s\"/>\n", x, MARGIN_T, x, MARGIN_T + PLOT_H, mk[k].col, mk[k].dash);
        char shorttext[48];
        if (mk[k].factor > 0) snprintf(shorttext, sizeof shorttext, "YaRN x%g range %.0f", mk[k].factor, mk[k].x);
        else snprintf(shorttext, sizeof shorttext, "trained %.0f", mk[k].x);
        int right = x + 4 + 6.0 * (double)strlen(shorttext) <= MARGIN_L + PLOT_W;   // (else left of the line)
        svg_text(f, right ? x + 4 : x - 4, y, right ? "start" : "end", "class=\"mark-label\" font-size=\"10\" fill=\"#555\"", shorttext);
    }
    fprintf(f, "</g>\n");
    // confidence bands first (under every line): one polygon per run of consecutive buckets with a band
    for (int j = 0; j < ns; j++) {
        int i = 0, any = 0;
        while (i < b->n) {
            int i0 = i;
            double bl = 0, bh = 0;
            while (i < b->n && isfinite(bucket_ppl(&s[j], i)) && bucket_band(&s[j], i, &bl, &bh) &&
                   ax_inside(&ax, 0.5 * (double)(b->lo[i] + b->hi[i])))
                i++;
            if (i == i0) { i++; continue; }
            if (!any) { fprintf(f, "<g id=\"band-%d\">\n", j); any = 1; }
            fprintf(f, "<polygon fill=\"%s\" fill-opacity=\"0.18\" stroke=\"none\" points=\"", PALETTE[j % 10]);
            for (int k = i0; k < i; k++) {   // upper edge left to right, then the lower edge back
                bucket_band(&s[j], k, &bl, &bh);
                fprintf(f, "%s%.1f,%.1f", k == i0 ? "" : " ", ax_map(&ax, 0.5 * (double)(b->lo[k] + b->hi[k])), ax_map(&ay, bh));
            }
            for (int k = i - 1; k >= i0; k--) {
                bucket_band(&s[j], k, &bl, &bh);
                fprintf(f, " %.1f,%.1f", ax_map(&ax, 0.5 * (double)(b->lo[k] + b->hi[k])), ax_map(&ay, bl));
            }
            fprintf(f, "\"/>\n");
        }
        if (any) fprintf(f, "</g>\n");
    }
    for (int j = 0; j < ns; j++) {
        const char* col = PALETTE[j % 10];
        const char* dash = j >= 10 ? " stroke-dasharray=\"6 3\"" : "";
        fprintf(f, "<g id=\"series-%d\">\n<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", j, col, dash);
        int first = 1;
        for (int i = 0; i < b->n; i++) {
            double x = 0.5 * (double)(b->lo[i] + b->hi[i]), p = bucket_ppl(&s[j], i);
            if (!isfinite(p) || !ax_inside(&ax, x) || !ax_inside(&ay, p)) continue;
            fprintf(f, "%s%.1f,%.1f", first ? "" : " ", ax_map(&ax, x), ax_map(&ay, p));
            first = 0;
        }
        fprintf(f, "\"/>\n");
        for (int i = 0; i < b->n; i++) {
            double x = 0.5 * (double)(b->lo[i] + b->hi[i]), p = bucket_ppl(&s[j], i);
            if (!isfinite(p) || !ax_inside(&ax, x) || !ax_inside(&ay, p)) continue;
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", ax_map(&ax, x), ax_map(&ay, p), col);
        }
        fprintf(f, "</g>\n");
    }
    // legend: a swatch (line + marker) and the label per series, right of the plot
    double lx = MARGIN_L + PLOT_W + 20, ly = MARGIN_T + 10;
    fprintf(f, "<g id=\"legend\">\n");
    for (int j = 0; j < ns; j++) {
        double y = ly + (ropes ? 34.0 : 20.0) * j;
        const char* col = PALETTE[j % 10];
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                lx, y, lx + 24, y, col, j >= 10 ? " stroke-dasharray=\"6 3\"" : "");
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", lx + 12, y, col);
        svg_text(f, lx + 30, y + 4, "start", NULL, s[j].label);
        if (s[j].rope[0]) {   // the RoPE the series ran with, on a second, smaller line
            report_rope_text(s[j].rope, s[j].rope_trained, text, sizeof text);
            snprintf(rope, sizeof rope, "RoPE %s", text);
            svg_text(f, lx + 30, y + 18, "start", "font-size=\"11\" fill=\"#555\"", rope);
        }
    }
    fprintf(f, "</g>\n<g id=\"legend-keys\">\n");
    double y = ly + (ropes ? 34.0 : 20.0) * ns + 10;   // then what the band and the marks are
    if (bands) {
        fprintf(f, "<rect class=\"legend-band\" x=\"%.1f\" y=\"%.1f\" width=\"24\" height=\"10\" fill=\"#555555\" fill-opacity=\"0.18\"/>\n",
                lx, y - 5);
        svg_text(f, lx + 30, y + 4, "start", "class=\"legend-key\"", band_text);
        y += 20;
    }
    for (int k = 0; k < nm; k++, y += 20) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\" stroke-dasharray=\"%s\"/>\n",
                lx, y, lx + 24, y, mk[k].col, mk[k].dash);
        svg_text(f, lx + 30, y + 4, "start", "class=\"legend-key\"", mk[k].text);
    }
    fprintf(f, "</g>\n</svg>\n");
    return close_out(f, path, err, errlen);
}

// ----------------------------------------------------------------------------------------------------
// passkey grid

int report_passkey_csv(const char* path, const PasskeyGrid* g, char* err, size_t errlen) {
    FILE* f = open_out(path, err, errlen);
    if (!f) return 1;
    fprintf(f, "context,depth,accuracy,digit_accuracy\n");
    for (int i = 0; i < g->nlen; i++)
        for (int j = 0; j < g->ndepth; j++) {
            size_t k = (size_t)i * g->ndepth + j;
            double a = g->acc[k], d = g->digits ? g->digits[k] : NAN;
            fprintf(f, "%d,%.10g,", g->lens[i], g->depths[j]);
            if (!isnan(a)) fprintf(f, "%.10g", a);
            fprintf(f, ",");
            if (!isnan(d)) fprintf(f, "%.10g", d);
            fprintf(f, "\n");
        }
    return close_out(f, path, err, errlen);
}

// mean of the non-NaN values of n strided entries; NaN when none
static double mean_skip_nan(const double* v, int n, int stride) {
    double sum = 0; int k = 0;
    for (int i = 0; i < n; i++) if (!isnan(v[(size_t)i * stride])) { sum += v[(size_t)i * stride]; k++; }
    return k ? sum / k : NAN;
}

static void acc_cell(FILE* f, double a) {
    if (isnan(a)) fprintf(f, " %8s", "-");
    else fprintf(f, " %8.3f", a);
}

static void passkey_grid_table(FILE* f, const PasskeyGrid* g, const double* acc) {
    char buf[32];
    fprintf(f, "%-15s", "context \\ depth");
    for (int j = 0; j < g->ndepth; j++) { snprintf(buf, sizeof buf, "%g", g->depths[j]); fprintf(f, " %8s", buf); }
    fprintf(f, " %8s\n", "mean");
    for (int i = 0; i < g->nlen; i++) {
        fprintf(f, "%-15d", g->lens[i]);
        const double* row = acc + (size_t)i * g->ndepth;
        for (int j = 0; j < g->ndepth; j++) acc_cell(f, row[j]);
        acc_cell(f, mean_skip_nan(row, g->ndepth, 1));
        fprintf(f, "\n");
    }
    fprintf(f, "%-15s", "mean");
    for (int j = 0; j < g->ndepth; j++) acc_cell(f, mean_skip_nan(acc + j, g->nlen, g->ndepth));
    acc_cell(f, mean_skip_nan(acc, g->nlen * g->ndepth, 1));
    fprintf(f, "\n");
}

void report_passkey_table(FILE* f, const PasskeyGrid* g) {
    fprintf(f, "passkey retrieval: fraction of documents with every answer digit right\n");
    passkey_grid_table(f, g, g->acc);
    if (!g->digits) return;
    fprintf(f, "fraction of answer digits right (chance 0.1)\n");
    passkey_grid_table(f, g, g->digits);
}

// accuracy 0..1 → red (#d73027) → yellow (#fee08b) → green (#1a9850); grey for NaN
static void acc_colour(double a, int rgb[3]) {
    static const int c[3][3] = {{215, 48, 39}, {254, 224, 139}, {26, 152, 80}};
    if (isnan(a)) { rgb[0] = rgb[1] = rgb[2] = 200; return; }
    a = a < 0 ? 0 : a > 1 ? 1 : a;
    int k = a < 0.5 ? 0 : 1;
    double t = a < 0.5 ? a / 0.5 : (a - 0.5) / 0.5;
    for (int q = 0; q < 3; q++) rgb[q] = (int)lround(c[k][q] + t * (c[k + 1][q] - c[k][q]));
}

#define CELL_W 60.0
#define CELL_H 32.0
#define HM_LEFT 100.0
#define HM_TOP 50.0

int report_svg_heatmap(const char* path, const PasskeyGrid* g, const char* title, char* err, size_t errlen) {
    double gw = CELL_W * g->ndepth, gh = CELL_H * g->nlen;
    if (gw < 120) gw = 120;                              // keep room for the axis label under a tiny grid
    double cw = gw / (g->ndepth > 0 ? g->ndepth : 1);
    double bar_x = HM_LEFT + gw + 25, bar_h = gh < 120 ? 120 : gh;
    double w = bar_x + 70, h = HM_TOP + bar_h + 60;
    if (title && CHAR_W * 1.4 * (double)strlen(title) + 40 > w) w = CHAR_W * 1.4 * (double)strlen(title) + 40;
    FILE* f = open_out(path, err, errlen);
    if (!f) return 1;
    char buf[48];
    svg_begin(f, w, h);
    svg_title(f, w / 2, 30, title);
    fprintf(f, "<g id=\"cells\">\n");
    for (int i = 0; i < g->nlen; i++)
        for (int j = 0; j < g->ndepth; j++) {
            double a = g->acc[(size_t)i * g->ndepth + j], x = HM_LEFT + cw * j, y = HM_TOP + CELL_H * i;
            int rgb[3];
            acc_colour(a, rgb);
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#%02x%02x%02x\" stroke=\"white\"/>\n",
                    x, y, cw, CELL_H, rgb[0], rgb[1], rgb[2]);
            double lum = (0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]) / 255;
            if (isnan(a)) snprintf(buf, sizeof buf, "n/a"); else snprintf(buf, sizeof buf, "%.2f", a);
            svg_text(f, x + cw / 2, y + CELL_H / 2 + 4, "middle", lum < 0.5 ? "fill=\"white\"" : "fill=\"black\"", buf);
        }
    fprintf(f, "</g>\n<g id=\"axes\">\n");
    for (int j = 0; j < g->ndepth; j++) {
        snprintf(buf, sizeof buf, "%g", g->depths[j]);
        svg_text(f, HM_LEFT + cw * (j + 0.5), HM_TOP + gh + 18, "middle", NULL, buf);
    }
    for (int i = 0; i < g->nlen; i++) {
        fmt_pos(buf, sizeof buf, g->lens[i]);
        svg_text(f, HM_LEFT - 8, HM_TOP + CELL_H * (i + 0.5) + 4, "end", NULL, buf);
    }
    svg_text(f, HM_LEFT + gw / 2, HM_TOP + gh + 42, "middle", "font-size=\"13\"", "depth of the pass key");
    char rot[96];
    snprintf(rot, sizeof rot, "font-size=\"13\" transform=\"rotate(-90 %.1f %.1f)\"", 24.0, HM_TOP + gh / 2);
    svg_text(f, 24, HM_TOP + gh / 2, "middle", rot, "context length");
    fprintf(f, "</g>\n");
    // colour bar: a vertical gradient, 1 at the top
    fprintf(f, "<defs><linearGradient id=\"accgrad\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">\n");
    for (int k = 0; k <= 4; k++) {
        int rgb[3];
        acc_colour(k / 4.0, rgb);
        fprintf(f, "<stop offset=\"%.2f\" stop-color=\"#%02x%02x%02x\"/>\n", k / 4.0, rgb[0], rgb[1], rgb[2]);
    }
    fprintf(f, "</linearGradient></defs>\n<g id=\"legend\">\n");
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"16\" height=\"%.1f\" fill=\"url(#accgrad)\" stroke=\"black\"/>\n",
            bar_x, HM_TOP, bar_h);
    for (int k = 0; k <= 4; k++) {
        double y = HM_TOP + bar_h * (1 - k / 4.0);
        snprintf(buf, sizeof buf, "%g", k / 4.0);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", bar_x + 16, y, bar_x + 20, y);
        svg_text(f, bar_x + 23, y + 4, "start", NULL, buf);
    }
    svg_text(f, bar_x + 8, HM_TOP + bar_h + 20, "middle", NULL, "accuracy");
    fprintf(f, "</g>\n</svg>\n");
    return close_out(f, path, err, errlen);
}

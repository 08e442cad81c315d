// report.h — evaluation reports: position buckets, perplexity per bucket, and the outputs of build/eval
// (a text table, CSV, SVG line plot of perplexity by position; passkey CSV, table and SVG heatmap).
//
// Buckets split the positions of a context [0, ctx) into consecutive half-open ranges [lo[i], hi[i]).
// A Series holds, per bucket, the sum of per-token negative log-likelihoods (natural log) and the token
// count, so perplexity of bucket i = exp(nll_sum[i] / count[i]). Several series (checkpoints, or one
// checkpoint with several RoPE settings) share one Buckets and are drawn on one plot.
// Confidence band: the tokens of a bucket are not independent — they come from a few documents, and the
// curve is dominated by what those documents are — so the standard error of a bucket's mean NLL is taken over
// units (documents, or packed windows): with unit u contributing n_u tokens of NLL sum s_u, mean m = S / N,
// se = sqrt(U / (U - 1) * sum_u (s_u - m n_u)^2) / N (the cluster / ratio-estimator standard error; with equal
// n_u it is the standard deviation of the units' means / sqrt(U)); undefined (NaN) with fewer than 2 units.
//
// Every writer returns 0, or 1 with err = "cannot write 'PATH': <strerror>" (err may be NULL).
// Files written:
//   CSV        series,bucket_lo,bucket_hi,tokens,mean_nll,ppl,docs,se_nll,ppl_lo,ppl_hi
//              one row per series x bucket, series in order; an empty bucket has tokens 0 and mean_nll, ppl
//              empty; docs = units (documents) with tokens in the bucket, se_nll their standard error of
//              mean_nll (above), ppl_lo / ppl_hi = exp(mean_nll -/+ se_nll), empty when undefined; labels are
//              quoted (RFC 4180) when they hold a comma, quote or line break; numbers are %.10g.
//              When any series has a RoPE description (rope set), two more columns end each row: rope (the
//              setting the series ran with: none | linear:F | yarn:F:L, " theta B" added when the base differs
//              from the trained one) and rope_trained (the checkpoint's, same form); rope == rope_trained: as
//              trained.
//   passkey    context,depth,accuracy,digit_accuracy            one row per length x depth (row-major as
//              in PasskeyGrid); accuracy = fraction of documents with every answer digit right, digit_accuracy
//              = fraction of answer digits right (chance 0.1); NaN (not measured) is written empty.
//   SVG        standalone SVG 1.1 (UTF-8; labels and titles XML-escaped, invalid UTF-8 / control bytes → '?').
#pragma once
#include <stddef.h>
#include <stdio.h>

// ----------------------------------------------------------------------------------------------------
// position buckets

typedef struct { int n; long long* lo; long long* hi; } Buckets;   // bucket i covers positions [lo[i], hi[i])

// [0,w), [w,2w), ...; the last one clipped to ctx. Returns 0, or 1 (b zeroed) when width <= 0, width > ctx
// or out of memory.
int  buckets_fixed(Buckets* b, long long ctx, long long width);
// [0,1), [1,2), [2,4), [4,8), ..., [2^k, ctx) with 2^k < ctx <= 2^(k+1). Returns 0, or 1 when ctx <= 0.
int  buckets_log(Buckets* b, long long ctx);
// index of the bucket holding pos, -1 if outside every bucket (binary search)
int  bucket_of(const Buckets* b, long long pos);
void buckets_free(Buckets* b);

// ----------------------------------------------------------------------------------------------------
// series: per-bucket NLL sums and token counts (arrays of b->n)

typedef struct {
    char label[128];
    char rope[64], rope_trained[64];            // RoPE run and trained ("" : not described; see the CSV format)
    long long trained_len;                      // the context the checkpoint was trained at (0: not known; the plot marks it)
    double* nll_sum; long long* count;          // per bucket: NLL sum and tokens
    long long* units;                           // per bucket: units (documents) added with series_add_unit
    double *u_ss, *u_sc, *u_cc;                 // per bucket: sum over units of s_u^2, s_u n_u, n_u^2
} Series;

// zeroed arrays for b->n buckets and a copy of label (truncated to 127 bytes). Returns 0, or 1 (no memory).
int  series_init(Series* s, const Buckets* b, const char* label);
// add the NLL sum of n tokens at position pos (ignored when pos is outside the buckets)
void series_add(Series* s, const Buckets* b, long long pos, double nll, long long n);
// one unit's (document's) totals in bucket i, for the standard error only (its tokens are added with
// series_add); n == 0 is ignored
void series_add_unit(Series* s, int i, double nll, double n);
void series_free(Series* s);

// XML text / attribute content for an SVG: & < > " ' escaped; control bytes and invalid UTF-8 become '?'
void report_xml_text(FILE* f, const char* str);

// a series' RoPE for people: "R (as trained)" when rope equals trained, else "R (override; trained T)"; "" when
// rope is empty
void report_rope_text(const char* rope, const char* trained, char* out, size_t n);

double bucket_ppl(const Series* s, int i);   // exp(nll_sum/count); NAN when count == 0
double bucket_se(const Series* s, int i);    // standard error of the bucket's mean NLL over units; NAN when < 2

// ----------------------------------------------------------------------------------------------------
// perplexity by position

// Human table: per bucket the range "[lo, hi)", then per series tokens, mean loss, ppl ("-" when empty);
// last an "all positions" row (all tokens of the series pooled). Under the labels, a "RoPE" row (report_rope_text)
// when any series has a RoPE description.
void report_table(FILE* f, const Buckets* b, const Series* s, int ns);
int  report_csv(const char* path, const Buckets* b, const Series* s, int ns, char* err, size_t errlen);
// SVG line plot: x = bucket centre (lo + hi) / 2 (log2 scale with power-of-two ticks when log_x, "4k" =
// 4096; on the log scale ticks are whole positions, and the bucket [0,1), drawn at 0.5, has its tick labelled
// "0"), y = perplexity (linear, or log10 when max/min > 10), grid, axis labels "position in context" and
// "perplexity per byte" / "per token" (per), title, one polyline + circle markers per series (10 distinct colours,
// then dashed), legend with the labels on the right (each with a second, smaller line "RoPE " + report_rope_text
// when the series has a RoPE description). Empty buckets and non-finite perplexities are skipped. Where a series has
// standard errors, a shaded band (a polygon in the series' colour, opacity 0.18) spans exp(mean_nll -/+ se)
// over each run of consecutive buckets that have one; the y range covers the bands; the legend names it below the
// series (group "legend-keys": "shaded: +/- 1 standard error over the <units>", a grey swatch). Marks (a vertical line across the plot, class "mark",
// with a legend entry; outside the x range only the legend entry, "beyond the plot"): each distinct trained_len of
// the series ("trained context N", grey, dashed) and each distinct design range F x L of a series whose rope is
// yarn:F:L ("YaRN xF design range N = F x L", the series' colour, dotted).
typedef struct {
    const char* title;   // NULL or "": none
    int log_x;
    const char* per;     // "byte" | "token": the y axis's unit ("perplexity per byte"); NULL: "perplexity"
    const char* units;   // what the bands' standard errors are over ("documents", "windows"); NULL: "units"
} PplPlot;
int  report_svg_ppl(const char* path, const Buckets* b, const Series* s, int ns, const PplPlot* o, char* err,
                    size_t errlen);

// ----------------------------------------------------------------------------------------------------
// passkey retrieval grid

typedef struct {
    int nlen, ndepth;
    const int* lens;       // [nlen] context lengths
    const double* depths;  // [ndepth] relative depths 0..1
    const double* acc;     // [nlen*ndepth], row = length; NaN = not measured
    const double* digits;  // [nlen*ndepth] fraction of answer digits right, or NULL (column left empty)
} PasskeyGrid;

int  report_passkey_csv(const char* path, const PasskeyGrid* g, char* err, size_t errlen);
// table: one row per context length, one column per depth, then the row mean; a last "mean" row per depth;
// then (when digits is set) the same table of the fraction of answer digits right
void report_passkey_table(FILE* f, const PasskeyGrid* g);
// SVG heatmap: columns = depths (x, "depth of the pass key"), rows = context lengths (y, "context length",
// in the grid's order from the top), cell colour red (0) → yellow (0.5) → green (1), grey when NaN, the
// accuracy printed in each cell (%.2f), title, and a colour bar legend 0..1.
int  report_svg_heatmap(const char* path, const PasskeyGrid* g, const char* title, char* err, size_t errlen);

// test_report.c — eval/report.c and eval/passkey.c: bucket edges (fixed and log, odd context sizes),
// bucket_of, perplexity per bucket against hand-computed values, the text table, CSV written and read back,
// SVG plot and heatmap parsed as XML by Python's ElementTree (escaped labels come back unescaped), passkey
// CSV, passkey documents (determinism, layout, depth placement, printable bytes), and write errors.
#include "eval/report.h"
#include "eval/passkey.h"
#include "tests/testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PY "/usr/bin/python3"

static char g_tmp[256];                  // temp directory, removed at the end

static void tpath(char* out, size_t n, const char* name) { snprintf(out, n, "%s/%s", g_tmp, name); }

// buckets equal to the expected edges
static int edges_are(const Buckets* b, int n, const long long* lo, const long long* hi) {
    if (b->n != n) return 0;
    for (int i = 0; i < n; i++) if (b->lo[i] != lo[i] || b->hi[i] != hi[i]) return 0;
    return 1;
}

// every position of [0, ctx) in exactly the bucket whose range holds it; outside → -1
static int bucket_of_consistent(const Buckets* b, long long ctx) {
    for (long long p = 0; p < ctx; p++) {
        int i = bucket_of(b, p);
        if (i < 0 || b->lo[i] > p || p >= b->hi[i]) return 0;
    }
    return bucket_of(b, -1) == -1 && bucket_of(b, ctx) == -1 && bucket_of(b, ctx + 100) == -1;
}

// contiguous cover of [0, ctx)
static int covers(const Buckets* b, long long ctx) {
    if (b->n <= 0 || b->lo[0] != 0 || b->hi[b->n - 1] != ctx) return 0;
    for (int i = 0; i < b->n; i++) if (b->lo[i] >= b->hi[i] || (i && b->lo[i] != b->hi[i - 1])) return 0;
    return 1;
}

// run a Python snippet on a file: `python3 script file`; 0 when it exits 0
static int py_check(const char* script_name, const char* script, const char* file) {
    char sp[512], cmd[1400];
    tpath(sp, sizeof sp, script_name);
    FILE* f = fopen(sp, "w");
    if (!f) return -1;
    fputs(script, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, PY " -I '%s' '%s'", sp, file);   // -I: no user site, no script-dir imports
    return system(cmd);
}

static char* slurp(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* s = malloc((size_t)n + 1);
    size_t r = fread(s, 1, (size_t)n, f);
    s[r] = 0;
    fclose(f);
    return s;
}

// split one CSV line (RFC 4180 quotes) into at most max fields, in place in buf; returns the count
static int csv_split(char* line, char** fields, int max) {
    int n = 0;
    char* w = line;
    char* r = line;
    while (n < max) {
        fields[n++] = w;
        if (*r == '"') {
            r++;
            for (;;) {
                if (*r == '"' && r[1] == '"') { *w++ = '"'; r += 2; }
                else if (*r == '"') { r++; break; }
                else if (!*r) break;
                else *w++ = *r++;
            }
        } else {
            while (*r && *r != ',' && *r != '\n') *w++ = *r++;
        }
        int more = *r == ',';
        *w++ = 0;
        if (!more) break;
        r++;
    }
    return n;
}

// ----------------------------------------------------------------------------------------------------

static void test_buckets(void) {
    Buckets b;
    CHECK(buckets_fixed(&b, 7, 3) == 0, "fixed ctx 7 width 3");
    { long long lo[] = {0, 3, 6}, hi[] = {3, 6, 7}; CHECK(edges_are(&b, 3, lo, hi), "fixed 7/3 → [0,3) [3,6) [6,7)"); }
    CHECK(bucket_of_consistent(&b, 7), "fixed 7/3 bucket_of");
    CHECK(bucket_of(&b, 0) == 0 && bucket_of(&b, 2) == 0 && bucket_of(&b, 3) == 1 && bucket_of(&b, 6) == 2,
          "fixed 7/3 bucket_of edges");
    buckets_free(&b);
    CHECK(buckets_fixed(&b, 8, 4) == 0, "fixed ctx 8 width 4");
    { long long lo[] = {0, 4}, hi[] = {4, 8}; CHECK(edges_are(&b, 2, lo, hi), "fixed 8/4 → [0,4) [4,8)"); }
    buckets_free(&b);
    CHECK(buckets_fixed(&b, 5, 5) == 0, "fixed ctx 5 width 5 (width == ctx)");
    { long long lo[] = {0}, hi[] = {5}; CHECK(edges_are(&b, 1, lo, hi), "fixed 5/5 → [0,5)"); }
    buckets_free(&b);
    CHECK(buckets_fixed(&b, 1000, 1) == 0 && b.n == 1000 && covers(&b, 1000) && bucket_of_consistent(&b, 1000),
          "fixed 1000/1: 1000 unit buckets");
    buckets_free(&b);
    CHECK(buckets_fixed(&b, 131072, 4096) == 0 && b.n == 32 && covers(&b, 131072) && b.lo[31] == 126976,
          "fixed 131072/4096: 32 buckets");
    CHECK(bucket_of(&b, 4095) == 0 && bucket_of(&b, 4096) == 1 && bucket_of(&b, 131071) == 31 &&
          bucket_of(&b, 131072) == -1, "fixed 131072/4096 bucket_of");
    buckets_free(&b);
    CHECK(buckets_fixed(&b, 1000, 300) == 0 && covers(&b, 1000) && b.n == 4 && b.lo[3] == 900 && b.hi[3] == 1000,
          "fixed 1000/300: last bucket [900,1000)");
    CHECK(bucket_of_consistent(&b, 1000), "fixed 1000/300 bucket_of");
    buckets_free(&b);
    CHECK(buckets_fixed(&b, 10, 0) == 1, "fixed width 0 → error");
    CHECK(buckets_fixed(&b, 10, -3) == 1, "fixed width < 0 → error");
    CHECK(buckets_fixed(&b, 10, 11) == 1, "fixed width > ctx → error");
    CHECK(buckets_fixed(&b, 0, 1) == 1, "fixed ctx 0 → error");

    CHECK(buckets_log(&b, 7) == 0, "log ctx 7");
    { long long lo[] = {0, 1, 2, 4}, hi[] = {1, 2, 4, 7}; CHECK(edges_are(&b, 4, lo, hi), "log 7 → [0,1) [1,2) [2,4) [4,7)"); }
    CHECK(bucket_of_consistent(&b, 7), "log 7 bucket_of");
    buckets_free(&b);
    CHECK(buckets_log(&b, 8) == 0, "log ctx 8");
    { long long lo[] = {0, 1, 2, 4}, hi[] = {1, 2, 4, 8}; CHECK(edges_are(&b, 4, lo, hi), "log 8 → ... [4,8)"); }
    buckets_free(&b);
    CHECK(buckets_log(&b, 9) == 0, "log ctx 9");
    { long long lo[] = {0, 1, 2, 4, 8}, hi[] = {1, 2, 4, 8, 9}; CHECK(edges_are(&b, 5, lo, hi), "log 9 → ... [4,8) [8,9)"); }
    buckets_free(&b);
    CHECK(buckets_log(&b, 1) == 0, "log ctx 1");
    { long long lo[] = {0}, hi[] = {1}; CHECK(edges_are(&b, 1, lo, hi), "log 1 → [0,1)"); }
    buckets_free(&b);
    CHECK(buckets_log(&b, 2) == 0, "log ctx 2");
    { long long lo[] = {0, 1}, hi[] = {1, 2}; CHECK(edges_are(&b, 2, lo, hi), "log 2 → [0,1) [1,2)"); }
    buckets_free(&b);
    CHECK(buckets_log(&b, 3) == 0, "log ctx 3");
    { long long lo[] = {0, 1, 2}, hi[] = {1, 2, 3}; CHECK(edges_are(&b, 3, lo, hi), "log 3 → [0,1) [1,2) [2,3)"); }
    buckets_free(&b);
    CHECK(buckets_log(&b, 1000) == 0 && b.n == 11 && covers(&b, 1000) && b.lo[10] == 512 && bucket_of_consistent(&b, 1000),
          "log 1000: 11 buckets, last [512,1000)");
    buckets_free(&b);
    CHECK(buckets_log(&b, 131072) == 0 && b.n == 18 && covers(&b, 131072) && b.lo[17] == 65536 &&
          bucket_of(&b, 65535) == 16 && bucket_of(&b, 65536) == 17 && bucket_of(&b, 131072) == -1,
          "log 131072: 18 buckets, last [65536,131072)");
    buckets_free(&b);
    CHECK(buckets_log(&b, 0) == 1 && buckets_log(&b, -5) == 1, "log ctx <= 0 → error");
}

// per-position NLLs 0.1 .. 0.7 at positions 0..6
static const double NLL7[7] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7};

static void fill(Series* s, const Buckets* b, double scale) {
    for (int p = 0; p < 7; p++) series_add(s, b, p, scale * NLL7[p], 1);
}

static void test_ppl(void) {
    Buckets b;
    Series s;
    buckets_fixed(&b, 7, 3);
    CHECK(series_init(&s, &b, "x") == 0, "series_init");
    fill(&s, &b, 1.0);
    series_add(&s, &b, 7, 100.0, 1);        // outside: ignored
    series_add(&s, &b, -1, 100.0, 1);
    CHECK(s.count[0] == 3 && s.count[1] == 3 && s.count[2] == 1, "fixed 7/3 counts 3,3,1");
    // (0.1+0.2+0.3)/3 = 0.2, (0.4+0.5+0.6)/3 = 0.5, 0.7
    CHECK(fabs(bucket_ppl(&s, 0) - 1.2214027581601699) < 1e-12, "ppl bucket 0 = exp(0.2) (%.15g)", bucket_ppl(&s, 0));
    CHECK(fabs(bucket_ppl(&s, 1) - 1.6487212707001282) < 1e-12, "ppl bucket 1 = exp(0.5) (%.15g)", bucket_ppl(&s, 1));
    CHECK(fabs(bucket_ppl(&s, 2) - 2.0137527074704766) < 1e-12, "ppl bucket 2 = exp(0.7) (%.15g)", bucket_ppl(&s, 2));
    series_free(&s);
    buckets_free(&b);

    buckets_log(&b, 7);
    series_init(&s, &b, "x");
    fill(&s, &b, 1.0);
    // [0,1): 0.1  [1,2): 0.2  [2,4): (0.3+0.4)/2 = 0.35  [4,7): (0.5+0.6+0.7)/3 = 0.6
    CHECK(s.count[0] == 1 && s.count[1] == 1 && s.count[2] == 2 && s.count[3] == 3, "log 7 counts 1,1,2,3");
    CHECK(fabs(bucket_ppl(&s, 0) - 1.1051709180756477) < 1e-12, "log ppl 0 = exp(0.1)");
    CHECK(fabs(bucket_ppl(&s, 1) - 1.2214027581601699) < 1e-12, "log ppl 1 = exp(0.2)");
    CHECK(fabs(bucket_ppl(&s, 2) - 1.4190675485932573) < 1e-12, "log ppl 2 = exp(0.35)");
    CHECK(fabs(bucket_ppl(&s, 3) - 1.8221188003905089) < 1e-12, "log ppl 3 = exp(0.6)");
    series_free(&s);
    series_init(&s, &b, "empty");
    CHECK(isnan(bucket_ppl(&s, 0)) && isnan(bucket_ppl(&s, 3)), "empty bucket ppl is NaN");
    series_free(&s);
    buckets_free(&b);
}

// the text table: ranges, labels, per-bucket ppl and the total row (mean NLL 0.4 over 7 tokens)
static void test_table(void) {
    Buckets b;
    Series s[2];
    buckets_fixed(&b, 9, 3);                    // bucket [6,9) holds one token, [..] none for series 1
    series_init(&s[0], &b, "base 4k");
    series_init(&s[1], &b, "yarn s=8");
    fill(&s[0], &b, 1.0);
    series_add(&s[1], &b, 0, 1.0, 1);
    char* buf = NULL;
    size_t n = 0;
    FILE* f = open_memstream(&buf, &n);
    report_table(f, &b, s, 2);
    fclose(f);
    CHECK(buf && strstr(buf, "base 4k") && strstr(buf, "yarn s=8"), "table has the series labels");
    CHECK(buf && strstr(buf, "[0, 3)") && strstr(buf, "[6, 9)"), "table has the ranges");
    CHECK(buf && strstr(buf, "1.2214") && strstr(buf, "1.6487") && strstr(buf, "2.0138"), "table has bucket ppls");
    const char* all = buf ? strstr(buf, "all positions") : NULL;
    // series 0 total: 2.8 / 7 = 0.4 → ppl exp(0.4) = 1.4918; series 1 total: 1 / 1 → e = 2.7183
    CHECK(all && strstr(all, "0.40000") && strstr(all, "1.4918") && strstr(all, "2.7183"), "table total row");
    CHECK(buf && strchr(buf, '-'), "table marks empty buckets with '-'");
    printf("%s", buf ? buf : "");
    free(buf);
    series_free(&s[0]); series_free(&s[1]);
    buckets_free(&b);
}

static const char* LABEL_A = "R&D <base> \"4k\" 'a'";     // all five XML specials
static const char* LABEL_B = "yarn, s=8";                  // a comma: quoted in CSV

static void test_csv(void) {
    Buckets b;
    Series s[2];
    buckets_fixed(&b, 9, 3);
    series_init(&s[0], &b, LABEL_A);
    series_init(&s[1], &b, LABEL_B);
    fill(&s[0], &b, 1.0);
    fill(&s[1], &b, 2.0);                       // 1.4 at position 6; [6,9) has 1 token
    char path[512], err[600] = "";
    tpath(path, sizeof path, "ppl.csv");
    CHECK(report_csv(path, &b, s, 2, err, sizeof err) == 0, "report_csv writes (%s)", err);
    FILE* f = fopen(path, "r");
    char line[1024];
    int rows = 0, header_ok = 0, ok = 1;
    // expected per row: label, lo, hi, tokens, mean
    const char* lab[6] = {LABEL_A, LABEL_A, LABEL_A, LABEL_B, LABEL_B, LABEL_B};
    long long lo[6] = {0, 3, 6, 0, 3, 6}, hi[6] = {3, 6, 9, 3, 6, 9}, tok[6] = {3, 3, 1, 3, 3, 1};
    double mean[6] = {0.2, 0.5, 0.7, 0.4, 1.0, 1.4};
    while (f && fgets(line, sizeof line, f)) {
        if (!header_ok) { header_ok = strcmp(line, "series,bucket_lo,bucket_hi,tokens,mean_nll,ppl,docs,se_nll,ppl_lo,ppl_hi\n") == 0; continue; }
        char* fl[12];
        int nf = csv_split(line, fl, 12);
        if (rows >= 6 || nf != 10 || strcmp(fl[6], "0") || fl[7][0] || fl[8][0] || fl[9][0]) { ok = 0; rows++; continue; }
        int r = rows++;
        if (strcmp(fl[0], lab[r]) || atoll(fl[1]) != lo[r] || atoll(fl[2]) != hi[r] || atoll(fl[3]) != tok[r] ||
            fabs(atof(fl[4]) - mean[r]) > 1e-9 || fabs(atof(fl[5]) - exp(mean[r])) > 1e-8 * exp(mean[r])) {
            ok = 0;
            printf("  bad row %d: %s|%s|%s|%s|%s|%s\n", r, fl[0], fl[1], fl[2], fl[3], fl[4], fl[5]);
        }
    }
    if (f) fclose(f);
    CHECK(header_ok, "CSV header");
    CHECK(rows == 6 && ok, "CSV rows read back: labels, edges, tokens, mean_nll, ppl; no units: docs 0, se empty (%d rows)", rows);

    // empty buckets: tokens 0, mean and ppl empty; the file parses with Python's csv module
    Series e;
    series_init(&e, &b, "e");
    series_add(&e, &b, 4, 0.25, 1);
    tpath(path, sizeof path, "empty.csv");
    CHECK(report_csv(path, &b, &e, 1, err, sizeof err) == 0, "report_csv with empty buckets");
    char* txt = slurp(path);
    CHECK(txt && strstr(txt, "e,0,3,0,,,0,,,\n") && strstr(txt, "e,6,9,0,,,0,,,\n") && strstr(txt, "e,3,6,1,0.25,"),
          "CSV empty buckets: tokens 0, empty mean_nll and ppl");
    free(txt);
    series_free(&e);
    tpath(path, sizeof path, "ppl.csv");
    CHECK(py_check("chk_csv.py",
                   "import csv, sys, math\n"
                   "rows = list(csv.DictReader(open(sys.argv[1], newline='')))\n"
                   "assert len(rows) == 6, rows\n"
                   "assert rows[0]['series'] == 'R&D <base> \"4k\" \\'a\\'', rows[0]\n"
                   "assert rows[3]['series'] == 'yarn, s=8', rows[3]\n"
                   "assert abs(float(rows[4]['ppl']) - math.exp(1.0)) < 1e-8\n", path) == 0,
          "CSV parses with Python csv, quoted labels intact");
    series_free(&s[0]); series_free(&s[1]);
    buckets_free(&b);
}

// standard error over units (documents): hand-computed cases; CSV columns; the SVG band
static void test_se(void) {
    Buckets b;
    buckets_fixed(&b, 4, 2);                   // [0,2) [2,4)
    Series s;
    series_init(&s, &b, "se");
    // bucket 0: three documents of 2 tokens each with mean NLL 1, 2, 3 -> mean 2, sd 1, se 1/sqrt(3)
    double means[3] = {1, 2, 3};
    for (int u = 0; u < 3; u++) {
        series_add(&s, &b, 0, means[u], 1); series_add(&s, &b, 1, means[u], 1);
        series_add_unit(&s, 0, 2 * means[u], 2);
    }
    // bucket 1: unequal documents: (s, n) = (1, 1) and (9, 3) -> m = 10/4 = 2.5,
    // sum (s - m n)^2 = 2.25 + 2.25 = 4.5, se = sqrt(2/1 * 4.5) / 4 = 0.75
    series_add(&s, &b, 2, 1, 1); series_add_unit(&s, 1, 1, 1);
    series_add(&s, &b, 3, 9, 3); series_add_unit(&s, 1, 9, 3);
    series_add_unit(&s, 1, 5, 0);             // n = 0: ignored
    CHECK(fabs(bucket_se(&s, 0) - 1 / sqrt(3.0)) < 1e-12 && s.units[0] == 3, "se over 3 equal documents = sd / sqrt(3) (%.6f)", bucket_se(&s, 0));
    CHECK(fabs(bucket_se(&s, 1) - 0.75) < 1e-12 && s.units[1] == 2, "se over unequal documents (ratio estimator) = 0.75 (%.6f)", bucket_se(&s, 1));
    Series one;
    series_init(&one, &b, "one");
    series_add(&one, &b, 0, 1, 1); series_add_unit(&one, 0, 1, 1);
    CHECK(isnan(bucket_se(&one, 0)) && isnan(bucket_se(&one, 1)), "se undefined with fewer than 2 documents");
    char path[512], err[600] = "";
    tpath(path, sizeof path, "se.csv");
    Series both[2] = { s, one };
    CHECK(report_csv(path, &b, both, 2, err, sizeof err) == 0, "report_csv with standard errors (%s)", err);
    CHECK(py_check("chk_se.py",
                   "import csv, sys, math\n"
                   "r = list(csv.DictReader(open(sys.argv[1], newline='')))\n"
                   "assert [x['docs'] for x in r] == ['3', '2', '1', '0'], r\n"
                   "assert abs(float(r[0]['se_nll']) - 1 / math.sqrt(3)) < 1e-9\n"
                   "assert abs(float(r[0]['ppl_lo']) - math.exp(2 - 1 / math.sqrt(3))) < 1e-8\n"
                   "assert abs(float(r[0]['ppl_hi']) - math.exp(2 + 1 / math.sqrt(3))) < 1e-8\n"
                   "assert abs(float(r[1]['se_nll']) - 0.75) < 1e-9\n"
                   "assert r[2]['se_nll'] == r[2]['ppl_lo'] == r[2]['ppl_hi'] == '' and r[3]['mean_nll'] == ''\n", path) == 0,
          "CSV docs, se_nll, ppl_lo, ppl_hi columns (empty where undefined)");
    // the band: one polygon per series with standard errors, inside the plot, lines drawn over it
    tpath(path, sizeof path, "se.svg");
    CHECK(report_svg_ppl(path, &b, both, 2, &(PplPlot){ "band", 0, NULL, NULL }, err, sizeof err) == 0, "report_svg_ppl with bands (%s)", err);
    CHECK(py_check("chk_band.py",
                   "import sys, xml.etree.ElementTree as ET\n"
                   "ns = '{http://www.w3.org/2000/svg}'\n"
                   "root = ET.parse(sys.argv[1]).getroot()\n"
                   "polys = root.findall('.//' + ns + 'polygon')\n"
                   "assert len(polys) == 1, len(polys)\n"
                   "pts = [tuple(map(float, p.split(','))) for p in polys[0].get('points').split()]\n"
                   "assert len(pts) == 4 and all(80 <= x <= 720 and 50 <= y <= 430 for x, y in pts), pts\n"
                   "assert pts[0][1] < pts[3][1] and pts[1][1] < pts[2][1], pts   # upper edge above the lower\n"
                   "kids = [c.get('id') for c in root]\n"
                   "assert kids.index('band-0') < kids.index('series-0'), kids\n", path) == 0,
          "SVG band: a polygon from exp(mean - se) to exp(mean + se), under the lines, inside the plot");
    series_free(&s); series_free(&one);
    buckets_free(&b);
}

// python: parse the SVG, check root, polylines, legend label and axis texts
static const char* SVG_CHECK =
    "import sys, xml.etree.ElementTree as ET\n"
    "ns = '{http://www.w3.org/2000/svg}'\n"
    "root = ET.parse(sys.argv[1]).getroot()\n"
    "assert root.tag == ns + 'svg', root.tag\n"
    "lines = root.findall('.//' + ns + 'polyline')\n"
    "assert len(lines) == 2, len(lines)\n"
    "for pl in lines:\n"
    "    pts = [tuple(map(float, p.split(','))) for p in pl.get('points').split()]\n"
    "    assert len(pts) >= 2, pts\n"
    "    assert all(80 <= x <= 720 and 50 <= y <= 430 for x, y in pts), pts\n"
    "texts = [''.join(t.itertext()) for t in root.iter(ns + 'text')]\n"
    "assert 'R&D <base> \"4k\" \\'a\\'' in texts, texts\n"
    "assert 'yarn, s=8' in texts, texts\n"
    "assert 'Title & <co>' in texts, texts\n"
    "assert any(t.startswith('position in context') for t in texts), texts\n"
    "assert any(t.startswith('perplexity') for t in texts), texts\n"
    "assert len(root.findall('.//' + ns + 'circle')) >= 6\n";

static void test_svg(void) {
    Buckets b;
    Series s[2];
    buckets_log(&b, 4096);
    series_init(&s[0], &b, LABEL_A);
    series_init(&s[1], &b, LABEL_B);
    for (int p = 0; p < 4096; p++) {
        series_add(&s[0], &b, p, 3.0 / (1 + 0.001 * p), 1);        // ppl falls from e^3 ≈ 20 to ≈ 3
        series_add(&s[1], &b, p, 2.0 + 0.0005 * p, 1);
    }
    s[1].count[2] = 0; s[1].nll_sum[2] = 0;                      // an empty bucket: skipped
    char path[512], err[600] = "";
    tpath(path, sizeof path, "ppl_log.svg");
    CHECK(report_svg_ppl(path, &b, s, 2, &(PplPlot){ "Title & <co>", 1, NULL, NULL }, err, sizeof err) == 0, "report_svg_ppl log x (%s)", err);
    CHECK(py_check("chk_svg.py", SVG_CHECK, path) == 0, "SVG (log x) is well-formed, 2 polylines, unescaped labels");
    tpath(path, sizeof path, "ppl_lin.svg");
    CHECK(report_svg_ppl(path, &b, s, 2, &(PplPlot){ "Title & <co>", 0, "token", NULL }, err, sizeof err) == 0, "report_svg_ppl linear x");
    CHECK(py_check("chk_svg.py", SVG_CHECK, path) == 0, "SVG (linear x) is well-formed, 2 polylines, unescaped labels");
    char* txt = slurp(path);
    CHECK(txt && strstr(txt, "R&amp;D &lt;base&gt; &quot;4k&quot; &apos;a&apos;"), "SVG label escaped in the file");
    CHECK(txt && strstr(txt, ">perplexity per token") && !strstr(txt, "class=\"mark\""),
          "SVG y axis: perplexity per token (PplPlot.per); no marks without a trained length or a YaRN series");
    free(txt);
    series_free(&s[0]); series_free(&s[1]);
    buckets_free(&b);

    // a flat series (single y value), 1 bucket: still valid XML
    buckets_fixed(&b, 10, 10);
    series_init(&s[0], &b, "flat \x01 bad\xff utf8 \xc3\xa9");
    series_add(&s[0], &b, 3, 1.0, 1);
    tpath(path, sizeof path, "flat.svg");
    CHECK(report_svg_ppl(path, &b, s, 1, &(PplPlot){ NULL, 1, NULL, NULL }, err, sizeof err) == 0, "SVG single point, no title");
    CHECK(py_check("chk_svg1.py",
                   "import sys, xml.etree.ElementTree as ET\n"
                   "ns = '{http://www.w3.org/2000/svg}'\n"
                   "root = ET.parse(sys.argv[1]).getroot()\n"
                   "texts = [''.join(t.itertext()) for t in root.iter(ns + 'text')]\n"
                   "assert 'flat ? bad? utf8 \\u00e9' in texts, texts\n", path) == 0,
          "SVG with control bytes / invalid UTF-8 in the label parses");
    series_free(&s[0]);
    buckets_free(&b);
}

// python: the x tick labels of a log-x plot are whole positions: "0" (position 0, whose bucket [0,1) is drawn at
// 0.5, where the first marker is), never "0.5"; argv[2] = the expected first labels
static const char* XTICK_CHECK =
    "import sys, xml.etree.ElementTree as ET\n"
    "ns = '{http://www.w3.org/2000/svg}'\n"
    "root = ET.parse(sys.argv[1]).getroot()\n"
    "g = [e for e in root.iter(ns + 'g') if e.get('id') == 'x-ticks'][0]\n"
    "labels = [(float(t.get('x')), t.text) for t in g.iter(ns + 'text')]\n"
    "texts = [l for _, l in labels]\n"
    "assert all('.' not in l for l in texts), texts\n"
    "assert texts[:len(sys.argv[2].split(','))] == sys.argv[2].split(','), texts\n"
    "first = min(float(c.get('cx')) for c in root.find(ns + 'g[@id=\"series-0\"]').iter(ns + 'circle'))\n"
    "assert abs(labels[0][0] - first) < 0.11, (labels[0], first)   # the '0' tick is at position 0's marker\n";

static void test_log_ticks(void) {
    char path[512], err[600] = "";
    long long ctxs[3] = {4096, 2, 1LL << 30};
    const char* want[3] = {"0,2,8", "0,1", "0"};
    for (int c = 0; c < 3; c++) {
        Buckets b;
        Series s;
        buckets_log(&b, ctxs[c]);
        series_init(&s, &b, "log");
        for (int i = 0; i < b.n; i++) series_add(&s, &b, b.lo[i], 2.0 + 0.1 * i, 1);
        tpath(path, sizeof path, "ticks.svg");
        CHECK(report_svg_ppl(path, &b, &s, 1, &(PplPlot){ "ticks", 1, NULL, NULL }, err, sizeof err) == 0, "report_svg_ppl log x, context %lld", ctxs[c]);
        char cmd[1600], sp[512];
        tpath(sp, sizeof sp, "chk_xticks.py");
        FILE* f = fopen(sp, "w");
        if (f) { fputs(XTICK_CHECK, f); fclose(f); }
        snprintf(cmd, sizeof cmd, PY " -I '%s' '%s' '%s'", sp, path, want[c]);
        CHECK(system(cmd) == 0, "log x axis, context %lld: ticks start %s ('0' at position 0's marker, no '0.5')", ctxs[c], want[c]);
        series_free(&s);
        buckets_free(&b);
    }
}

static void test_passkey_report(void) {
    int lens[3] = {1024, 4096, 16384};
    double depths[4] = {0, 0.25, 0.5, 1};
    double acc[12] = {1, 1, 0.9, 1, 0.8, 0.75, 0.5, 0.95, 0, 0.1, NAN, 0.3};
    double dig[12] = {1, 1, 0.98, 1, 0.96, 0.95, 0.9, 0.99, 0.125, 0.42, NAN, 0.6};
    PasskeyGrid g = {3, 4, lens, depths, acc, dig};
    char path[512], err[600] = "";
    tpath(path, sizeof path, "passkey.csv");
    CHECK(report_passkey_csv(path, &g, err, sizeof err) == 0, "report_passkey_csv (%s)", err);
    CHECK(py_check("chk_pk.py",
                   "import csv, sys\n"
                   "rows = list(csv.reader(open(sys.argv[1], newline='')))\n"
                   "assert rows[0] == ['context', 'depth', 'accuracy', 'digit_accuracy'], rows[0]\n"
                   "assert len(rows) == 13, len(rows)\n"
                   "assert rows[1] == ['1024', '0', '1', '1'], rows[1]\n"
                   "assert rows[6] == ['4096', '0.25', '0.75', '0.95'], rows[6]\n"
                   "assert rows[9] == ['16384', '0', '0', '0.125'], rows[9]\n"
                   "assert rows[11] == ['16384', '0.5', '', ''], rows[11]\n"
                   "assert float(rows[12][2]) == 0.3 and float(rows[12][1]) == 1.0 and float(rows[12][3]) == 0.6\n", path) == 0,
          "passkey CSV parses: header, 12 rows, values, digit accuracy, NaN empty");
    char* buf = NULL;
    size_t n = 0;
    FILE* f = open_memstream(&buf, &n);
    report_passkey_table(f, &g);
    fclose(f);
    CHECK(buf && strstr(buf, "16384") && strstr(buf, "0.950") && strstr(buf, "mean") && strstr(buf, "0.125") &&
          strstr(buf, "digits right"), "passkey table: documents and digits");
    printf("%s", buf ? buf : "");
    free(buf);
    tpath(path, sizeof path, "passkey.svg");
    CHECK(report_svg_heatmap(path, &g, "Passkey <yarn> & co", err, sizeof err) == 0, "report_svg_heatmap (%s)", err);
    CHECK(py_check("chk_hm.py",
                   "import sys, xml.etree.ElementTree as ET\n"
                   "ns = '{http://www.w3.org/2000/svg}'\n"
                   "root = ET.parse(sys.argv[1]).getroot()\n"
                   "assert root.tag == ns + 'svg', root.tag\n"
                   "cells = root.find(\".//*[@id='cells']\")\n"
                   "assert len(cells.findall(ns + 'rect')) == 12\n"
                   "texts = [''.join(t.itertext()) for t in root.iter(ns + 'text')]\n"
                   "for s in ['Passkey <yarn> & co', '0.95', 'n/a', '0.75', '1k', '4k', '16k', 'context length', 'accuracy']:\n"
                   "    assert s in texts, (s, texts)\n"
                   "assert any(t.startswith('depth') for t in texts), texts\n"
                   "assert root.find('.//' + ns + 'linearGradient') is not None\n", path) == 0,
          "heatmap SVG well-formed: 12 cells, values, title, axes, colour legend");
}

static void test_errors(void) {
    const char* bad = "/nonexistent_ringlm_dir/out.csv";
    Buckets b;
    Series s;
    buckets_fixed(&b, 4, 2);
    series_init(&s, &b, "x");
    char err[600] = "";
    CHECK(report_csv(bad, &b, &s, 1, err, sizeof err) == 1 && strstr(err, "cannot write '/nonexistent_ringlm_dir/out.csv'"),
          "report_csv unwritable → 1 (%s)", err);
    err[0] = 0;
    CHECK(report_svg_ppl(bad, &b, &s, 1, &(PplPlot){ "t", 0, NULL, NULL }, err, sizeof err) == 1 && strstr(err, bad), "report_svg_ppl unwritable (%s)", err);
    int lens[1] = {1024};
    double depths[1] = {0.5}, acc[1] = {1};
    PasskeyGrid g = {1, 1, lens, depths, acc, NULL};
    err[0] = 0;
    CHECK(report_passkey_csv(bad, &g, err, sizeof err) == 1 && strstr(err, bad), "report_passkey_csv unwritable (%s)", err);
    err[0] = 0;
    CHECK(report_svg_heatmap(bad, &g, "t", err, sizeof err) == 1 && strstr(err, bad), "report_svg_heatmap unwritable (%s)", err);
    CHECK(report_csv(bad, &b, &s, 1, NULL, 0) == 1, "NULL err is allowed");
    series_free(&s);
    buckets_free(&b);
}

static void test_passkey_make(void) {
    static int t1[4096], t2[4096];
    char k1[PASSKEY_DIGITS + 1], k2[PASSKEY_DIGITS + 1];
    int np1, np2;
    CHECK(passkey_make(42, 1000, 0.5, t1, k1, &np1) == 0 && passkey_make(42, 1000, 0.5, t2, k2, &np2) == 0,
          "passkey_make seed 42 twice");
    CHECK(memcmp(t1, t2, sizeof(int) * 1000) == 0 && strcmp(k1, k2) == 0 && np1 == np2, "deterministic");
    CHECK(passkey_make(43, 1000, 0.5, t2, k2, &np2) == 0 && strcmp(k1, k2) != 0, "seed 43 → another key (%s vs %s)", k1, k2);
    int distinct = 1;
    char seen[20][PASSKEY_DIGITS + 1];
    for (int i = 0; i < 20; i++) {
        passkey_make((uint64_t)i, 200, 0, t2, seen[i], NULL);
        for (int j = 0; j < i; j++) if (!strcmp(seen[i], seen[j])) distinct = 0;
    }
    CHECK(distinct, "20 seeds → 20 distinct keys");

    static const char* FIXED_NEEDLE_A = "The pass key is ";
    int lens[3] = {200, 1000, 4096};
    double depths[4] = {0, 0.25, 0.5, 1};
    int all_ok = 1;
    for (int li = 0; li < 3; li++)
        for (int di = 0; di < 4; di++) {
            int len = lens[li], np = -1;
            char key[PASSKEY_DIGITS + 1] = "";
            for (int i = 0; i < 4096; i++) t1[i] = -7;            // canary beyond len
            int rc = passkey_make(1000 + (uint64_t)li, len, depths[di], t1, key, &np);
            // expected start: round(depth * (len - 59 - 43 - 1)) + 1, computed here from the spec
            double want = depths[di] * (len - 59 - 43 - 1) + 1;
            char needle[128], tail[64], doc_needle[128], doc_tail[64];
            snprintf(needle, sizeof needle, "The pass key is %s. Remember it. %s is the pass key. ", key, key);
            snprintf(tail, sizeof tail, "What is the pass key? The pass key is %s", key);
            int nl = (int)strlen(needle), ql = (int)strlen(tail);
            int ok = rc == 0 && strlen(key) == 5 && key[0] >= '1' && key[0] <= '9' && t1[0] == 256 &&
                     fabs(np - want) <= 1 && np >= 1 && np + nl + ql <= len && (len >= 4096 || t1[len] == -7);
            int printable = 1;
            for (int i = 1; i < len && ok; i++) if (t1[i] < 32 || t1[i] > 126) printable = 0;
            ok = ok && printable;
            if (ok) {
                for (int i = 0; i < nl; i++) doc_needle[i] = (char)t1[np + i];
                doc_needle[nl] = 0;
                for (int i = 0; i < ql; i++) doc_tail[i] = (char)t1[len - ql + i];
                doc_tail[ql] = 0;
                int last5 = 1;
                for (int i = 0; i < 5; i++) if (t1[len - 5 + i] != key[i]) last5 = 0;
                ok = !strcmp(doc_needle, needle) && !strcmp(doc_tail, tail) && last5 &&
                     !strncmp(needle, FIXED_NEEDLE_A, strlen(FIXED_NEEDLE_A));
                // needle occurs exactly once, question exactly once
                int count = 0;
                for (int i = 1; i + nl <= len; i++) {
                    int m = 1;
                    for (int k = 0; k < nl && m; k++) if (t1[i + k] != (unsigned char)needle[k]) m = 0;
                    count += m;
                }
                ok = ok && count == 1;
                if (depths[di] == 0) ok = ok && np == 1;
                if (depths[di] == 1) ok = ok && np + nl == len - ql;
            }
            if (!ok) printf("  len %d depth %g: rc %d key '%s' needle_pos %d (want %.1f)\n", len, depths[di], rc, key, np, want);
            all_ok &= ok;
        }
    CHECK(all_ok, "passkey layout for len 200/1000/4096 x depth 0/0.25/0.5/1: 256 first, needle at depth (+-1), "
                  "key in needle and last 5 tokens, printable, exactly len");
    CHECK(passkey_make(1, 102, 0.5, t1, k1, &np1) == 1, "len 102 (too small) → 1");
    CHECK(passkey_make(1, 103, 0.5, t1, k1, &np1) == 0 && np1 == 1, "len 103 (no filler) → 0, needle at 1");
    CHECK(passkey_make(1, 10, 0, t1, k1, &np1) == 1, "len 10 → 1");
    CHECK(passkey_make(1, 500, 1.5, t1, k1, &np1) == 1 && passkey_make(1, 500, NAN, t1, k1, &np1) == 1,
          "depth outside [0,1] → 1");
    CHECK(passkey_make(1, 500, 0.3, t1, NULL, NULL) == 0, "NULL key / needle_pos allowed");
    // the text around the needle: filler ends at a sentence boundary right before the needle and question
    passkey_make(7, 1000, 0.5, t1, k1, &np1);
    CHECK(t1[np1 - 1] == ' ' && t1[np1 - 2] == '.', "filler before the needle ends with \". \"");
    CHECK(t1[1000 - 44] == ' ' && t1[1000 - 45] == '.', "filler before the question ends with \". \"");
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "%s/ringlm_test_report.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_tmp)) { printf("cannot create temp dir\n"); return 1; }
    test_buckets();
    test_ppl();
    test_table();
    test_csv();
    test_svg();
    test_se();
    test_log_ticks();
    test_passkey_report();
    test_errors();
    test_passkey_make();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) printf("cannot remove %s\n", g_tmp);
    return tu_finish();
}

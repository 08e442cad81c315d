// anatomy.cu — the step anatomy of the CUDA backend (RINGLM_CUDA_ANATOMY=FILE): what one training step costs the
// GPU, counted per kernel class and per kernel, with a roofline prediction of its time on an H200.
//
// Selected step: RINGLM_CUDA_ANATOMY_STEP (default 2: the first step grows the scratch buffers) of the steps the
// trainer runs (be_step_begin / be_step_end). While it runs, every operation the backend and its transport queue is
// recorded under the kernel class of the backend call it belongs to (cu_common.h's PROF classes):
//   - kernel launches (LAUNCH), each with the device-memory bytes it reads and writes as declared at its launch site
//     (TRAFFIC: a formula from the launch's arguments; TRAFFIC_MAX: an upper bound, for gathers and tiles that may be
//     skipped; TRAFFIC_ATTN: the attention kernels, whose time comes from their FLOPs), or "undeclared";
//   - cuBLAS calls: shape, operand and result dtypes, compute type, FLOPs (2 m n k), operand bytes;
//   - memsets and device-to-device copies (launch-like operations with their bytes), collectives (bytes);
//   - host<->device copies (bytes) and host synchronisations (calls that block the host until the device has done
//     its work: stream/device synchronisations, synchronous copies, event synchronisations of events not yet
//     complete), by cause;
//   - attention FLOPs (the attention block kernels' calls: forward 4, backward 10 x hd x heads x visible pairs,
//     FlashAttention's convention; causal blocks count Tq (Tk + 1) / 2 pairs when Tq = Tk, else Tq Tk / 2, document
//     masks ignored);
//   - the peak of device memory the backend held (allocations + scratch + the cuBLAS workspace).
// Under the host emulation with RINGLM_EMU_TRAFFIC=1 each kernel's pages read and written are counted too (page
// faults, backend/cuda/emu/) and set beside the declaration: "traffic check" fails a kernel whose count departs
// from its formula by more than two pages per pointer. With RINGLM_EMU_DRY=1 the emulation runs no kernel at all,
// so the anatomy of shapes far larger than this machine can run (the H200's 141 GiB: RINGLM_EMU_MEMORY_MIB) is
// counted on the real code path.
//
// The roofline (stated assumptions; the GPU check measures beside it): per operation, the larger of FLOPs / peak and
// bytes / HBM bandwidth, plus a fixed launch overhead; attention kernels at an engine rate; a host synchronisation
// costs a fixed stall; copies between host and device at a PCIe rate. Communication is not predicted (one GPU).
// The report (FILE, markdown; FILE.json, the same numbers for scripts; rank r > 0: FILE.rank<r>) gives the
// summary, the classes with predicted and, where profiling ran on a GPU (RINGLM_CUDA_PROFILE), measured
// milliseconds side by side, every kernel, and every GEMM shape.
#include "backend/cuda/cu_common.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <map>
#include <string>
#include <time.h>

// ---- the roofline's constants (H200 SXM) ----
static const double PEAK_BF16 = 989.4e12;   // dense bf16 tensor cores, FLOP/s
static const double PEAK_TF32 = 494.7e12;   // dense tf32
static const double PEAK_FP32 = 66.9e12;    // fp32 without tensor cores
static const double HBM_BW = 4.8e12;        // bytes/s
static const double PCIE_BW = 25e9;         // host <-> device, pageable source or destination
static const double LAUNCH_S = 2e-6;        // per kernel, cuBLAS call, memset or copy: the GPU's gap between operations
static const double SYNC_S = 20e-6;         // per host synchronisation: the queue drains, the host relaunches
static double g_attn_rate[2] = { 0, 0 };   // attention forward, backward: FLOP/s, when RINGLM_ANATOMY_ATTN_TFLOPS sets them
static int g_attn_rate_set = 0;

int cu_anat_on = 0;

typedef struct {
    int cls;
    long n, undeclared, counted, bad;
    double rd, wr, flops, pred_s, crd, cwr, cdrd, cdwr;   // declared; predicted; counted and declared where counted
    int kind;
} KRow;
typedef struct {
    long calls;
    double flops, bytes, pred_s;
    int cls;
} GRow;
typedef struct {
    long kernels, blas, ops, undeclared, syncs, h2d_n, d2h_n, coll_n;
    double rd, wr, flops, attn_flops, h2d, d2h, coll_bytes, pred_s, measured_ms;
} CRow;

static const char* g_path = NULL;
static long long g_want = 2, g_seen = 0;
static int g_done = 0;
static double g_model_flops = 0, g_t0 = 0, g_wall = 0;
static char g_about[1024];
static std::map<std::string, KRow> g_k;
static std::map<std::string, GRow> g_g;
static std::map<std::string, long> g_sync_why;
static CRow g_c[PROF_NCLASS + 1];
static double g_prof0[PROF_NCLASS], g_prof1[PROF_NCLASS];
static int g_prof_ok = 0;
static struct { int set, kind; double rd, wr, rlo, rhi, wlo, whi; } g_pend, g_lastd;
static KRow* g_last = NULL;
static const char* g_last_name = "";
static double g_conv_bytes = 0;   // modelled operand conversions inside cuBLAS (fp32 operands, bf16 compute)

static double now_wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static int cls_now(void) { int c = cu_class_now(); return c < 0 ? PROF_NCLASS : c; }
static const char* cls_name(int c) { return c >= PROF_NCLASS ? "outside any class" : cu_class_name(c); }

void cu_anat_traffic_(double rd, double wr, int kind, double rd_lo, double rd_hi, double wr_lo, double wr_hi) {
    g_pend.set = 1; g_pend.rd = rd; g_pend.wr = wr; g_pend.kind = kind;
    g_pend.rlo = rd_lo; g_pend.rhi = rd_hi; g_pend.wlo = wr_lo; g_pend.whi = wr_hi;
}

static KRow& krow(const char* name, int c) {   // one row per kernel and class
    char key[300];
    snprintf(key, sizeof key, "%s\t%s", name, cls_name(c));
    return g_k[key];
}

void cu_anat_launch_(const char* name) {
    int c = cls_now();
    KRow& k = krow(name, c);
    k.cls = c;
    k.n++;
    double t = LAUNCH_S;
    if (g_pend.set) {
        k.rd += g_pend.rd; k.wr += g_pend.wr; k.kind = g_pend.kind;
        if (g_pend.kind != TR_ATTN) t += (g_pend.rd + g_pend.wr) / HBM_BW;
        g_c[c].rd += g_pend.rd; g_c[c].wr += g_pend.wr;
    } else {
        k.undeclared++; g_c[c].undeclared++;
    }
    g_lastd = g_pend;
    g_pend.set = 0;
    k.pred_s += t;
    g_c[c].pred_s += t;
    g_c[c].kernels++;
    g_last = &k;
    g_last_name = name;
}

// the emulation's page count of the launch just made, against its declaration
void cu_anat_launched_(void) {
    double r, w;
    int np;
    if (!g_last || !g_lastd.set || !cu_counted_traffic(&r, &w, &np)) return;
    KRow& k = *g_last;
    k.counted++;
    k.crd += r; k.cwr += w; k.cdrd += g_lastd.rd; k.cdwr += g_lastd.wr;
    double slack = 2.0 * 4096 * (np > 1 ? np : 1);   // a range's two partial pages, per pointer
    if (r < g_lastd.rlo - slack || r > g_lastd.rhi + slack || w < g_lastd.wlo - slack || w > g_lastd.whi + slack) {
        k.bad++;
        if (getenv("RINGLM_ANATOMY_VERBOSE"))
            fprintf(stderr, "anatomy: %s: counted read %.0f written %.0f, declared read %.0f [%.0f, %.0f] written %.0f "
                    "[%.0f, %.0f], slack %.0f\n", g_last_name, r, w, g_lastd.rd, g_lastd.rlo, g_lastd.rhi,
                    g_lastd.wr, g_lastd.wlo, g_lastd.whi, slack);
    }
}

static const char* dtype_name(int t) { return t == CU_DT_BF16 ? "bf16" : "fp32"; }
static const char* compute_name(int c) { return c == CU_BF16 ? "fp32 acc., bf16 inputs" : c == CU_TF32 ? "fp32 acc., tf32 inputs" : "fp32"; }

void cu_anat_gemm(int m, int n, int k, int ta, int tb, int at, int bt, int ct, int compute, int beta_nonzero) {
    if (!cu_anat_on) return;
    int c = cls_now();
    double fl = 2.0 * m * n * (double)k;
    double ea = at == CU_DT_BF16 ? 2 : 4, eb = bt == CU_DT_BF16 ? 2 : 4, ec = ct == CU_DT_BF16 ? 2 : 4;
    double a = (double)m * k, b = (double)k * n, cc = (double)m * n;
    double rd = a * ea + b * eb + (beta_nonzero ? cc * ec : 0), wr = cc * ec;
    double peak = compute == CU_FP32 ? PEAK_FP32 : compute == CU_TF32 && at != CU_DT_BF16 ? PEAK_TF32 : PEAK_BF16;
    double conv = 0;
    if (compute == CU_BF16 && at != CU_DT_BF16) conv += a * (4 + 2 + 2 - 4);   // fp32 A converted to bf16 and read again
    if (compute == CU_BF16 && bt != CU_DT_BF16) conv += b * (4 + 2 + 2 - 4);
    double t = fmax(fl / peak, (rd + wr + conv) / HBM_BW) + LAUNCH_S;
    char key[200];
    snprintf(key, sizeof key, "| %d | %d | %d | %s%s | %s | %s | %s | %s |", m, n, k, ta ? "A^T " : "A ", tb ? "B^T" : "B",
             dtype_name(at), dtype_name(bt), dtype_name(ct), compute_name(compute));
    GRow& g = g_g[key];
    g.calls++; g.flops += fl; g.bytes += rd + wr + conv; g.pred_s += t; g.cls = c;
    g_c[c].blas++; g_c[c].flops += fl; g_c[c].rd += rd + conv * 0.75; g_c[c].wr += wr + conv * 0.25; g_c[c].pred_s += t;
    g_conv_bytes += conv;
}

void cu_anat_op(const char* name, double rd, double wr) {
    if (!cu_anat_on) return;
    int c = cls_now();
    KRow& k = krow(name, c);
    k.cls = c; k.n++; k.rd += rd; k.wr += wr; k.kind = TR_EXACT;
    double t = LAUNCH_S + (rd + wr) / HBM_BW;
    k.pred_s += t;
    g_c[c].ops++; g_c[c].rd += rd; g_c[c].wr += wr; g_c[c].pred_s += t;
}

void cu_anat_collective(const char* name, double bytes) {
    if (!cu_anat_on) return;
    int c = cls_now();
    KRow& k = krow(name, c);
    k.cls = c; k.n++; k.rd += bytes; k.kind = TR_EXACT;
    g_c[c].coll_n++; g_c[c].coll_bytes += bytes;
}

void cu_anat_xfer(int to_device, double bytes) {
    if (!cu_anat_on) return;
    int c = cls_now();
    if (to_device) { g_c[c].h2d += bytes; g_c[c].h2d_n++; }
    else { g_c[c].d2h += bytes; g_c[c].d2h_n++; }
    g_c[c].pred_s += LAUNCH_S + bytes / PCIE_BW;
}

// offload's copies run on the copy stream beside the compute stream: their bytes and count, no time in the prediction
// (build/plan's offload verdict says whether a layer's compute hides them)
void cu_anat_xfer_async(int to_device, double bytes) {
    if (!cu_anat_on) return;
    int c = cls_now();
    if (to_device) { g_c[c].h2d += bytes; g_c[c].h2d_n++; }
    else { g_c[c].d2h += bytes; g_c[c].d2h_n++; }
}

void cu_anat_sync(const char* why) {
    if (!cu_anat_on) return;
    int c = cls_now();
    g_c[c].syncs++;
    g_c[c].pred_s += SYNC_S;
    g_sync_why[why]++;
}

// The FLOPs of an attention block call (FlashAttention's convention): forward 4, backward 10 x hd x heads x the
// visible query-key pairs; a causal block of Tq = Tk sees Tq (Tq + 1) / 2 (the diagonal included), another causal
// block about half of Tq x Tk
static double attn_flops_of(int backward, int Tq, int Tk, int nh, int hd, int causal) {
    double pairs = !causal ? (double)Tq * Tk : Tq == Tk ? (double)Tq * (Tk + 1) / 2 : (double)Tq * Tk / 2;
    return (backward ? 10.0 : 4.0) * hd * nh * pairs;
}

// The FLOPs of an attention block call. Its time: at the engine rate RINGLM_ANATOMY_ATTN_TFLOPS when that is set
// (every engine, e.g. cuDNN's published rates); else the fp32 kernels at the fp32 peak, and the bf16 kernels by
// the model of cu_anat_attn_kernel.
void cu_anat_attention(int backward, int Tq, int Tk, int nh, int hd, int causal, int fp32) {
    if (!cu_anat_on) return;
    double fl = attn_flops_of(backward, Tq, Tk, nh, hd, causal);
    int c = cls_now();
    g_c[c].attn_flops += fl;
    if (g_attn_rate_set) g_c[c].pred_s += fl / g_attn_rate[backward ? 1 : 0];
    else if (fp32) g_c[c].pred_s += fl / PEAK_FP32;
}

// ---- the model of the own bf16 attention kernels ----
// Per tile (forward: 128 query rows x one key tile; backward: one key tile x 32 query rows) and per warp, what the
// kernel's main loop issues, counted from its SASS (sm_90a, CUDA 13.0; tools/sass_counts.py, docs/attention_kernels.md):
// HMMA (mma.sync m16n8k16), MUFU (ex2), bytes through shared memory (ldmatrix x4 = 512 per warp, plain loads and
// stores by their width), every instruction. The block's 4 warps share one SM with the other resident blocks; an
// SM's throughput per clock is taken as: 1 HMMA per 1.5 clocks (mma.sync at 2/3 of the dense wgmma peak: an
// assumption until measured), 16 MUFU lanes (a warp's ex2 = 2 clocks), 128 bytes of shared memory, 4 instructions
// issued (one per scheduler). A tile costs the largest of the four (perfect overlap of the others), the kernel
// tiles x that / (SMs x clock); at the 1.83 GHz that makes the 989.4 TFLOP/s bf16 peak 4096 FLOP per SM-clock.
struct AttnModel { int backward, hd, tile; double hmma, mufu, smem, instr; };
static const AttnModel ATTN_MODELS[] = {
#include "backend/cuda/attn_model.h"
};
static const double SM_CLOCK = 1.83e9, SMS = 132, C_HMMA = 1.5, C_MUFU = 2.0, SMEM_BPC = 128, ISSUE_PC = 4;
struct AttnRow { long calls; double tiles, pred_s, flops; const char* limit; AttnModel m; };
static std::map<std::string, AttnRow> g_attn_k;
static const AttnModel* attn_model(int backward, int hd, int tile) {
    for (const AttnModel& m : ATTN_MODELS)
        if (m.backward == backward && m.hd == hd && m.tile == tile) return &m;
    return NULL;
}
// tiles computed: forward (query tiles of 128 rows) x (key tiles of `tile`), backward (key tiles of `tile`) x
// (query tiles of 32), over the heads, those a causal mask aligned bottom-right (key j seen by query i iff
// j <= i + Tk - Tq: the ring's blocks) leaves visible; document masks not counted
static double attn_tiles(int backward, int tile, int Tq, int Tk, int nh, int causal) {
    const int BMq = backward ? 32 : 128, BNk = tile;
    long nqt = (Tq + BMq - 1) / BMq, nkt = (Tk + BNk - 1) / BNk;
    if (!causal) return (double)nqt * nkt * nh;
    long off = (long)Tk - Tq;
    double n = 0;
    for (long qt = 0; qt < nqt; qt++) {
        long last = (qt + 1) * BMq - 1 < Tq ? (qt + 1) * BMq - 1 : Tq - 1;   // the tile's last query
        long kmax = last + off;                                           // the last key it sees
        if (kmax >= 0) n += kmax / BNk + 1 < nkt ? kmax / BNk + 1 : nkt;
    }
    return n * nh;
}
// the model's seconds for one tile of a kernel, and the pipe that bounds it
static double attn_tile_s(const AttnModel& m, const char** limit) {
    double t[4] = { 4 * m.hmma * C_HMMA, 4 * m.mufu * C_MUFU, 4 * m.smem / SMEM_BPC, 4 * m.instr / ISSUE_PC };
    static const char* what[4] = { "tensor cores (HMMA)", "ex2 (MUFU)", "shared memory", "instruction issue" };
    int k = 0;
    for (int i = 1; i < 4; i++) if (t[i] > t[k]) k = i;
    if (limit) *limit = what[k];
    return t[k] / SM_CLOCK;
}
extern "C" double cuda_attn_model_s(int backward, int hd_pad, int tile, int Tq, int Tk, int nh, int causal) {
    const AttnModel* m = attn_model(backward, hd_pad, tile);
    if (!m) return 0;
    return attn_tiles(backward, tile, Tq, Tk, nh, causal) * attn_tile_s(*m, NULL) / SMS;
}
void cu_anat_attn_kernel(int backward, int hd_pad, int tile, int Tq, int Tk, int nh, int causal) {
    if (!cu_anat_on || g_attn_rate_set) return;
    const AttnModel* m = attn_model(backward, hd_pad, tile);
    if (!m) return;
    char key[64];
    snprintf(key, sizeof key, "%s hd %d, %d-key tiles", backward ? "backward" : "forward", hd_pad, tile);
    AttnRow& r = g_attn_k[key];
    r.m = *m;
    double tiles = attn_tiles(backward, tile, Tq, Tk, nh, causal), ts = attn_tile_s(*m, &r.limit);
    r.calls++; r.tiles += tiles; r.pred_s += tiles * ts / SMS;
    r.flops += attn_flops_of(backward, Tq, Tk, nh, hd_pad, causal);
    g_c[cls_now()].pred_s += tiles * ts / SMS;
}

extern "C" void cuda_backend_note_sync(const char* why) { cu_anat_sync(why); }
extern "C" void cuda_backend_note_xfer(int to_device, double bytes) { cu_anat_xfer(to_device, bytes); }
extern "C" void cuda_backend_note_collective(const char* name, double bytes) { cu_anat_collective(name, bytes); }

// ---- the step ----

extern "C" void be_step_begin(long long step, double model_flops, const char* about) {
    (void)step;
    if (g_done || !cuda_backend_started()) return;
    if (!g_path) {
        const char* p = getenv("RINGLM_CUDA_ANATOMY");
        if (!p || !*p) { g_done = 1; return; }
        g_path = p;
        const char* s = getenv("RINGLM_CUDA_ANATOMY_STEP");
        if (s && *s) g_want = atoll(s);
        const char* a = getenv("RINGLM_ANATOMY_ATTN_TFLOPS");
        double f, b;
        if (a && sscanf(a, "%lf,%lf", &f, &b) == 2 && f > 0 && b > 0) {
            g_attn_rate[0] = f * 1e12; g_attn_rate[1] = b * 1e12; g_attn_rate_set = 1;
        }
    }
    if (++g_seen != g_want) return;
    g_model_flops = model_flops;
    snprintf(g_about, sizeof g_about, "%s", about ? about : "");
    g_prof_ok = cu_prof_totals(g_prof0);
    g_t0 = now_wall();
    cu_anat_on = 1;
}

static void write_report(void);
extern "C" void be_step_end(void) {
    if (!cu_anat_on) return;
    cu_anat_on = 0;
    g_wall = now_wall() - g_t0;
    if (g_prof_ok) g_prof_ok = cu_prof_totals(g_prof1);
    if (g_prof_ok)
        for (int c = 0; c < PROF_NCLASS; c++) g_c[c].measured_ms = g_prof1[c] - g_prof0[c];
    write_report();
    g_done = 1;
}

static double sum_c(double CRow::*f) { double s = 0; for (int c = 0; c <= PROF_NCLASS; c++) s += g_c[c].*f; return s; }
static long sum_l(long CRow::*f) { long s = 0; for (int c = 0; c <= PROF_NCLASS; c++) s += g_c[c].*f; return s; }

static void write_report(void) {
    const char* r = getenv("OMPI_COMM_WORLD_RANK");
    if (!r) r = getenv("PMI_RANK");
    if (!r) r = getenv("SLURM_PROCID");
    char path[4096], jpath[4200];
    if (r && atoi(r) > 0) snprintf(path, sizeof path, "%s.rank%d", g_path, atoi(r));
    else snprintf(path, sizeof path, "%s", g_path);
    snprintf(jpath, sizeof jpath, "%s.json", path);
    FILE* f = fopen(path, "w");
    FILE* j = fopen(jpath, "w");
    if (!f || !j) {
        fprintf(stderr, "cuda backend: cannot write the step anatomy to %s\n", path);
        if (f) fclose(f);
        if (j) fclose(j);
        return;
    }
    int emu = strstr(cu_device_name(), "emulation") != NULL, dry = cu_dry_run(), traffic = 0;
    for (auto& e : g_k) traffic |= e.second.counted > 0;
    long kernels = sum_l(&CRow::kernels), blas = sum_l(&CRow::blas), ops = sum_l(&CRow::ops);
    long launches = kernels + blas + ops, syncs = sum_l(&CRow::syncs), undecl = sum_l(&CRow::undeclared);
    double pred = sum_c(&CRow::pred_s), gemm = sum_c(&CRow::flops), attn = sum_c(&CRow::attn_flops);
    double rd = sum_c(&CRow::rd), wr = sum_c(&CRow::wr), h2d = sum_c(&CRow::h2d), d2h = sum_c(&CRow::d2h);
    long h2dn = sum_l(&CRow::h2d_n), d2hn = sum_l(&CRow::d2h_n);
    double peak = (double)cu_memory_peak_held();
    double mfu = pred > 0 ? g_model_flops / pred / PEAK_BF16 : 0;
    long bad = 0, counted = 0;
    for (auto& e : g_k) { bad += e.second.bad; counted += e.second.counted; }
    const double MiB = 1048576.0;
    fprintf(f, "# Step anatomy: step %lld of this run\n\n%s\n\n", g_want, g_about);
    char attn_how[200];
    if (g_attn_rate_set)
        snprintf(attn_how, sizeof attn_how, "attention at %.0f (forward) / %.0f (backward) TFLOP/s (RINGLM_ANATOMY_ATTN_TFLOPS)",
                 g_attn_rate[0] / 1e12, g_attn_rate[1] / 1e12);
    else
        snprintf(attn_how, sizeof attn_how, "the own bf16 attention kernels by their model (tiles x per-tile cost from the SASS, "
                 "below), the fp32 ones at the fp32 peak");
    fprintf(f, "Counted on %s. Roofline (H200 SXM, stated assumptions): per operation max(FLOPs / peak, bytes / %.1f TB/s) "
            "+ %.0f us launch; peaks %.1f (bf16), %.1f (tf32), %.1f (fp32) TFLOP/s dense; %s; %.0f us per host "
            "synchronisation; host<->device copies at %.0f GB/s; fp32 operands under a bf16 compute type modelled as one "
            "conversion pass inside cuBLAS (read 4, write 2, read 2 bytes per element); communication not predicted.\n\n",
            emu ? (dry ? "the host emulation's dry run (RINGLM_EMU_DRY: the code path, no kernel executed)"
                       : traffic ? "the host emulation, each kernel's pages counted (RINGLM_EMU_TRAFFIC)" : "the host emulation")
                : "the GPU",
            HBM_BW / 1e12, LAUNCH_S * 1e6, PEAK_BF16 / 1e12, PEAK_TF32 / 1e12, PEAK_FP32 / 1e12, attn_how, SYNC_S * 1e6,
            PCIE_BW / 1e9);
    fprintf(f, "| | |\n|---|---:|\n");
    fprintf(f, "| launches (kernels + cuBLAS calls + memsets/copies on the device) | %ld (%ld + %ld + %ld) |\n", launches,
            kernels, blas, ops);
    fprintf(f, "| kernels without a declared traffic formula | %ld |\n", undecl);
    fprintf(f, "| host synchronisations | %ld |\n", syncs);
    for (auto& e : g_sync_why) fprintf(f, "| &nbsp; %s | %ld |\n", e.first.c_str(), e.second);
    fprintf(f, "| host -> device | %ld copies, %.3f MiB |\n| device -> host | %ld copies, %.3f MiB |\n", h2dn, h2d / MiB, d2hn,
            d2h / MiB);
    fprintf(f, "| cuBLAS GFLOP | %.3f |\n| attention GFLOP | %.3f |\n", gemm / 1e9, attn / 1e9);
    fprintf(f, "| device memory read / written (declared), MiB | %.1f / %.1f |\n", rd / MiB, wr / MiB);
    fprintf(f, "| of which modelled cuBLAS operand conversions, MiB | %.1f |\n", g_conv_bytes / MiB);
    fprintf(f, "| peak device memory held, GiB | %.3f |\n", peak / (MiB * 1024));
    fprintf(f, "| predicted step time, ms | %.3f |\n| model FLOPs per GPU (6N + attention), GFLOP | %.3f |\n", pred * 1e3,
            g_model_flops / 1e9);
    fprintf(f, "| predicted MFU (model FLOPs / predicted time / %.1f TFLOP/s) | %.1f %% |\n", PEAK_BF16 / 1e12, 100 * mfu);
    fprintf(f, "| measured step time (host clock, %s), ms | %.3f |\n", emu ? "emulation, not a GPU" : "GPU", g_wall * 1e3);
    if (traffic)
        fprintf(f, "| kernels whose counted traffic departs from the declaration | %ld of %ld launches counted |\n", bad, counted);
    fprintf(f, "\n## By kernel class\n\n| class | kernels | cuBLAS | memsets/copies | syncs | H2D MiB | D2H MiB | collectives "
            "(MiB) | cuBLAS GFLOP | attention GFLOP | read MiB | written MiB | predicted ms | measured ms |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int c = 0; c <= PROF_NCLASS; c++) {
        CRow& x = g_c[c];
        if (!x.kernels && !x.blas && !x.ops && !x.syncs && !x.h2d_n && !x.d2h_n && !x.coll_n) continue;
        char meas[32] = "—";
        if (g_prof_ok && c < PROF_NCLASS) snprintf(meas, sizeof meas, "%.3f", x.measured_ms);
        fprintf(f, "| %s | %ld | %ld | %ld | %ld | %.3f | %.3f | %ld (%.1f) | %.3f | %.3f | %.1f | %.1f | %.3f | %s |\n",
                cls_name(c), x.kernels, x.blas, x.ops, x.syncs, x.h2d / MiB, x.d2h / MiB, x.coll_n, x.coll_bytes / MiB,
                x.flops / 1e9, x.attn_flops / 1e9, x.rd / MiB, x.wr / MiB, x.pred_s * 1e3, meas);
    }
    fprintf(f, "\n## By kernel (declared traffic%s)\n\n| kernel | class | launches | read MiB | written MiB | predicted ms |%s\n"
            "|---|---|---:|---:|---:|---:|%s\n", traffic ? "; counted pages beside it" : "",
            traffic ? " counted read / written MiB | traffic check |" : "", traffic ? "---:|---|" : "");
    for (auto& e : g_k) {
        KRow& k = e.second;
        const char* kind = k.undeclared ? " (undeclared)" : k.kind == TR_BOUNDS ? " (bounds)" : k.kind == TR_ATTN ? " (attention)" : "";
        std::string nm = e.first.substr(0, e.first.find('\t'));
        fprintf(f, "| %s%s | %s | %ld | %.3f | %.3f | %.4f |", nm.c_str(), kind, cls_name(k.cls), k.n, k.rd / MiB,
                k.wr / MiB, k.pred_s * 1e3);
        if (traffic) {
            if (k.counted) fprintf(f, " %.3f / %.3f | %s |", k.crd / MiB, k.cwr / MiB, k.bad ? "DEPARTS" : "ok");
            else fprintf(f, " — | — |");
        }
        fprintf(f, "\n");
    }
    if (!g_attn_k.empty()) {
        fprintf(f, "\n## The own attention kernels' model\n\nPer tile and warp, counted from the SASS: HMMA, MUFU, shared-memory "
                "bytes, instructions; an SM retires 1 HMMA / %.1f clocks, 16 MUFU lanes, %.0f shared-memory bytes and %.0f "
                "instructions per clock at %.2f GHz, %d SMs; a tile costs its slowest pipe.\n\n"
                "| kernel | calls | tiles | HMMA | MUFU | smem bytes | instructions | bound by | predicted ms | TFLOP/s |\n"
                "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|\n", C_HMMA, SMEM_BPC, ISSUE_PC, SM_CLOCK / 1e9, (int)SMS);
        for (auto& e : g_attn_k) {
            const AttnRow& r = e.second;
            fprintf(f, "| %s | %ld | %.0f | %.0f | %.0f | %.0f | %.0f | %s | %.3f | %.0f |\n", e.first.c_str(), r.calls, r.tiles,
                    r.m.hmma, r.m.mufu, r.m.smem, r.m.instr, r.limit, r.pred_s * 1e3, r.pred_s > 0 ? r.flops / r.pred_s / 1e12 : 0);
        }
    }
    fprintf(f, "\n## cuBLAS calls by shape\n\n| m | n | k | op | A | B | C | compute | calls | GFLOP | MiB moved | predicted ms |\n"
            "|---:|---:|---:|---|---|---|---|---|---:|---:|---:|---:|\n");
    for (auto& e : g_g)
        fprintf(f, "%s %ld | %.3f | %.1f | %.4f |\n", e.first.c_str(), e.second.calls, e.second.flops / 1e9,
                e.second.bytes / MiB, e.second.pred_s * 1e3);
    fclose(f);

    fprintf(j, "{\"launches\": %ld, \"kernels\": %ld, \"cublas\": %ld, \"ops\": %ld, \"undeclared\": %ld, \"syncs\": %ld, "
            "\"h2d_bytes\": %.0f, \"d2h_bytes\": %.0f, \"h2d_copies\": %ld, \"d2h_copies\": %ld, \"gemm_flops\": %.6g, "
            "\"attn_flops\": %.6g, \"read_bytes\": %.6g, \"written_bytes\": %.6g, \"conv_bytes\": %.6g, \"peak_bytes\": %.0f, "
            "\"predicted_s\": %.9g, \"model_flops\": %.6g, \"mfu\": %.6g, \"wall_s\": %.6g, \"traffic_counted\": %ld, "
            "\"traffic_departs\": %ld, \"classes\": {", launches, kernels, blas, ops, undecl, syncs, h2d, d2h, h2dn, d2hn,
            gemm, attn, rd, wr, g_conv_bytes, peak, pred, g_model_flops, mfu, g_wall, counted, bad);
    int first = 1;
    for (int c = 0; c <= PROF_NCLASS; c++) {
        CRow& x = g_c[c];
        fprintf(j, "%s\"%s\": {\"launches\": %ld, \"syncs\": %ld, \"predicted_s\": %.9g, \"measured_ms\": %s}", first ? "" : ", ",
                cls_name(c), x.kernels + x.blas + x.ops, x.syncs, x.pred_s,
                g_prof_ok && c < PROF_NCLASS ? std::to_string(x.measured_ms).c_str() : "null");
        first = 0;
    }
    fprintf(j, "}, \"kernels_by_name\": {");
    first = 1;
    for (auto& e : g_k) {
        std::string nm = e.first.substr(0, e.first.find('\t'));
        fprintf(j, "%s\"%s | %s\": {\"class\": \"%s\", \"launches\": %ld, \"bad\": %ld, \"counted\": %ld}", first ? "" : ", ",
                nm.c_str(), cls_name(e.second.cls), cls_name(e.second.cls), e.second.n, e.second.bad, e.second.counted);
        first = 0;
    }
    fprintf(j, "}, \"attention_model\": {");
    first = 1;
    for (auto& e : g_attn_k) {
        fprintf(j, "%s\"%s\": {\"calls\": %ld, \"tiles\": %.0f, \"predicted_s\": %.9g, \"flops\": %.6g, \"bound\": \"%s\"}",
                first ? "" : ", ", e.first.c_str(), e.second.calls, e.second.tiles, e.second.pred_s, e.second.flops, e.second.limit);
        first = 0;
    }
    fprintf(j, "}}\n");
    fclose(j);
}

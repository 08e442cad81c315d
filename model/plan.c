// plan.c — the capacity planner (see plan.h).
#include "model/plan.h"
#include "model/model.h"
#include "optim/adamw.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int plan_step(Plan* p, const Config* c0, const PlanLayout* l, int seq_len, char* err, size_t errlen) {
    memset(p, 0, sizeof *p);
    int parts = strcmp(c0->cp_layout, "zigzag") == 0 ? 2 * l->cp : l->cp;
    if (l->tp < 1 || l->cp < 1 || l->dp < 1 || l->micro_batch < 1 || seq_len % parts ||
        c0->batch_size % (l->micro_batch * l->dp) || c0->n_kv_head % l->tp) {
        snprintf(err, errlen, "plan: tp %d, cp %d, dp %d, micro_batch %d do not divide seq_len %d (into %d chunks), "
                 "batch_size %d or n_kv_head %d", l->tp, l->cp, l->dp, l->micro_batch, seq_len, parts,
                 c0->batch_size, c0->n_kv_head);
        return 1;
    }
    Config c = *c0;
    c.seq_len = seq_len;
    c.tp = l->tp; c.cp = l->cp;   // the all-to-all degree follows the layout's cp (config_a2a)
    if (c.max_seq_len < seq_len) c.max_seq_len = seq_len;   // the RoPE table covers the sequence
    c.zero = l->zero;
    int shard = l->dp * l->cp;   // the replicas: ZeRO shards over them
    Model m;
    // the activations' type of the backend planned for: bf16 on a GPU (act_dtype = bf16, matmul_precision = bf16)
    model_shape(&m, &c, l->micro_batch, seq_len, l->tp, 0, l->cp, l->zero ? (size_t)shard : 1,
                model_act_bf16(&c, !strcmp(l->backend, "cuda")));
    double N = (double)m.N, C = m.C, L = m.L;
    ModelMemory mm = model_memory(&m);
    p->params = (double)mm.params;
    p->grads = (double)mm.grads;
    p->moments = 2.0 * m.zu.shard * 4;   // (without ZeRO one unit: the whole arena)
    p->acts_kept = (double)m.act_kept;
    p->host = (double)offload_host_bytes(&m);
    p->acts_work = (double)m.act_work;
    p->acts_scratch = (double)m.act_bytes - m.act_kept - m.act_work;
    int U = m.U, Rr = l->cp / U;   // all-to-all degree, ring size
    double Hka = (double)m.nkv_at * m.hd, Ta = m.T_at;
    p->ring = (Rr > 1 ? (double)ring_buffer_bytes_for((int)Ta, (int)Hka) : 0) +
              (U > 1 ? (double)a2a_buffer_bytes_for(U, m.T, m.nh_at * m.hd > m.kv_w ? m.nh_at * m.hd : m.kv_w) : 0);
    if (!strcmp(l->backend, "cuda")) {   // cuBLAS workspace + bf16 copies of q, k, v, dO padded to 64 / 128
        // and the CUDA backend's LM-head chunk (4096 rows) where this build's backend plans another
        long rows = m.N < 4096 ? m.N : 4096;
        p->acts_scratch += ((double)rows - m.lm_chunk) * m.Vl * 4;
        // and its RMSNorm weight-gradient partials: up to 256 row groups (this build's backend plans m.norm_g)
        long g = (m.Ns + 63) / 64 < 256 ? (m.Ns + 63) / 64 : 256;
        p->acts_scratch += ((double)g - m.norm_g) * (2.0 * m.L + 1) * m.C * 4;
        double hdp = m.hd <= 64 ? 64 : 128;
        double Na = (double)m.B * m.T_at;   // bf16 copies of attention's q, dO (nh_at heads) and k, v (nkv_at)
        p->workspace = 32.0 * 1048576 + 2.0 * Na * hdp * (2 * m.nh_at + 2 * m.nkv_at) + 4.0 * C * 1024;
    }
    p->total = p->params + p->grads + p->moments + p->acts_kept + p->acts_work + p->acts_scratch + p->ring + p->workspace;
    // communication per step
    p->accum = c.batch_size / (l->micro_batch * l->dp);
    int rc = m.recompute;
    // per layer and sequence: the ring's hops of K and V (Ta tokens of nkv_at heads) — P - 1 forward, P - 1 K/V and
    // P dK/dV backward, P - 1 again when recomputing the whole layer — and the all-to-alls (each sends U - 1 of its U
    // blocks of T rows): q, k, v in, out back (forward); dout, D in, dq, dk, dv back (backward); q, k, v again when
    // recomputing them, out again when recomputing the whole layer
    double hop = 2.0 * Ta * Hka * 4, seqs = p->accum * (double)l->micro_batch * L;
    double hops = Rr > 1 ? (Rr - 1) + (Rr - 1) + Rr + (rc == RECOMPUTE_FULL ? Rr - 1 : 0) : 0;
    p->ring_sent = seqs * hops * hop;
    p->ring_msgs = seqs * hops;
    if (U > 1) {
        double Hqa = (double)m.nh_at * m.hd, kvw = m.kv_w, T = m.T, blk = (U - 1) * T * 4;
        double qkv = Hqa + 2 * kvw, calls = 4 + 5;
        double floats = qkv + Hqa + (2 * Hqa + 2 * kvw + m.nh_at);   // forward q, k, v, out; backward dout, dq, D, dk, dv
        if (rc >= RECOMPUTE_QKV) { floats += qkv; calls += 3; }
        if (rc >= RECOMPUTE_FULL) { floats += Hqa; calls += 1; }
        p->a2a_sent = seqs * blk * floats;
        p->a2a_msgs = seqs * calls * (U - 1);
    }
    double ar = 1 + L * (4 + (rc == RECOMPUTE_FULL ? 1 : 0)) + 1;   // embedding, 2 fwd + 2 bwd per layer, head
    p->tp_payload = l->tp > 1 ? p->accum * ar * N * C * 4 : 0;
    // over dp x cp, as comm.h counts what a rank sends: an all-reduce of the gradients; ZeRO: each unit's reduce-scatter
    // and all-gather ((P - 1) slices each): stage 1 both once per step, stage 2 the reduce-scatter per micro-batch,
    // stage 3 also the gathers of zero.h (parameters never all-gathered after the update): every unit in the step's
    // first forward; in the backward every layer but the two last still held; in a later micro-batch's forward every
    // layer but the first two (still held from the backward) and, untied, the embedding and the rest again (they
    // share a buffer)
    double P = shard, A = (double)m.arena;
    if (shard > 1 && !l->zero) { p->dp_sent = 2 * (P - 1) / P * A * 4; p->dp_msgs = 2 * (P - 1); }
    else if (shard > 1) {
        int n = m.zu.n;
        double lay = (double)m.zu.len[1], io = (double)m.zu.len[0] + m.zu.len[n - 1], held = L < 2 ? L : 2;
        double calls = l->zero == 1 ? 2.0 * n : l->zero == 2 ? (p->accum + 1.0) * n : (double)p->accum * n;   // collectives
        double elems = l->zero == 1 ? 2 * A : l->zero == 2 ? (p->accum + 1) * A : p->accum * A;              // of P slices
        if (l->zero == 3) {
            int later = p->accum - 1, untied = !c.tie_embeddings;
            elems += A + (L - held) * lay + later * ((untied ? io : 0) + 2 * (L - held) * lay);
            calls += n + (L - held) + later * ((untied ? 2 : 0) + 2 * (L - held));
        }
        p->dp_sent = (P - 1) / P * elems * 4;
        p->dp_msgs = calls * (P - 1);
    }
    // FLOPs: the model's (6 x matmul params + attention) and the recomputed forward parts, per rank
    double tokens = (double)c.batch_size * seq_len, world = (double)l->tp * l->cp * l->dp;
    p->flops_model = model_flops_per_token(&c, seq_len) * tokens / world;
    double Cg = c.d_model, hdg = (double)c.d_model / c.n_head, Fg = c.d_ff;
    double qkv = 2 * Cg * hdg * (c.n_head + 2.0 * c.n_kv_head), mlp = 4 * Cg * Fg, att = 2.0 * seq_len * Cg + 2 * hdg * c.n_head * Cg;
    double extra = rc >= RECOMPUTE_MLP || m.mlp_tiled ? mlp : 0;   // a tiled MLP recomputes gate and up per tile
    if (rc >= RECOMPUTE_QKV) extra += qkv;
    if (rc >= RECOMPUTE_FULL) extra += att;
    p->flops_exec = p->flops_model + extra * c.n_layer * tokens / world;
    // one hop against the attention work of one block pair (zigzag: half of a full Tl x Tl block)
    p->hop_xfer_s = Rr > 1 ? hop / (l->link_gbs * 1e9) : 0;
    p->hop_compute_s = 2.0 * Ta * Ta * m.hd * m.nh_at / (l->tflops * 1e12);
    if (l->peak_tflops > 0) {   // the time model: a layer per micro-batch, its recomputation, the offload copies
        double rate = l->peak_tflops * 1e12 * l->mfu, toks = (double)l->micro_batch * seq_len / ((double)l->tp * l->cp);
        double per_layer = Cg * c.n_head * hdg * 2 + Cg * c.n_kv_head * hdg * 2 + 3 * Cg * Fg;   // matmul parameters
        double fwd = toks * (2 * per_layer + 2.0 * seq_len * Cg);   // (causal attention: 2 seq_len C per token)
        p->layer_fwd_s = fwd / rate;
        p->layer_bwd_s = (2 * fwd + toks * extra) / rate;
        p->offload_xfer_s = m.offload && m.L > 2 ? (double)m.kept_bytes / (l->pcie_gbs * 1e9) : 0;
        double ex = (m.L > 2 ? m.L - 2 : 0) * ((p->offload_xfer_s > p->layer_fwd_s ? p->offload_xfer_s - p->layer_fwd_s : 0) +
                                              (p->offload_xfer_s > p->layer_bwd_s ? p->offload_xfer_s - p->layer_bwd_s : 0));
        p->offload_exposed_s = p->accum * ex;
        p->step_s = p->flops_exec / rate + p->dp_sent / (l->link_gbs * 1e9) + p->offload_exposed_s;
    }
    model_shape_free(&m);
    return 0;
}

int plan_longest(const Config* c, const PlanLayout* l, double mem_bytes, double host_bytes, int limit) {
    int unit = (strcmp(c->cp_layout, "zigzag") == 0 ? 2 * l->cp : l->cp) * 128;
    char err[256];
    Plan p;
    int lo = 0, hi = limit / unit;   // in units: lo fits (or 0), the answer is in [lo, hi]
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (!plan_step(&p, c, l, mid * unit, err, sizeof err) && p.total <= mem_bytes && p.host <= host_bytes) lo = mid;
        else hi = mid - 1;
    }
    return lo * unit;
}

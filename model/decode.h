// decode.h — generating tokens one at a time with a KV cache, on the model's own weights and layout.
//
// The cache holds, per layer, the K and V (after RoPE) of the tokens seen so far. With tensor parallelism each rank
// caches its KV heads and the usual all-reduces follow o_proj, down_proj and the embedding; the LM head's
// vocabulary slices are gathered so that every rank sees the whole row of logits. With context parallelism the
// cache stays distributed over the cp ranks (a long prompt is prefilled by the ring: each rank keeps its chunk's
// K/V); a new token's query attends to every rank's part of the cache — each computes (out, lse) over its own
// keys, and the parts are merged in rank order with the ring's LSE merge, so every rank gets the same bits. A new
// token's K/V goes to the cp rank whose turn it is (token count modulo cp). Every rank of tp x cp runs every step.
#pragma once
#include "model/model.h"

typedef struct {
    Model* m;
    int cp, cp_rank;              // the context group (m->cp_g)
    int cap;                      // tokens this rank's cache holds at most
    int n;                        // tokens in this rank's cache
    long total;                   // tokens in the whole sequence so far (every rank's)
    float** kc;                   // [n_layer] -> [cap, nkv hd] backend
    float** vc;
    int* pos_dev;                 // [cap] positions of this rank's cached tokens
    float *x, *xn, *rstd, *q, *k, *v, *att, *lse, *proj, *qkv, *gu, *h, *logits;   // one token's scratch
    float *part, *acc;            // cp merge: [cp, nh hd + nh] gathered parts, [nh hd + nh] the merge
    int* tok1;                    // [1] token id, [1] position (backend)
    int* pos1;
    float* host_logits;           // [V] the whole row, on every rank
    float* host_slices;           // [tp, Vl] gathered slices
} Decoder;

// A cache of up to `cap` tokens on this rank (collective: none). m was built for one sequence per micro-batch.
void decoder_init(Decoder* d, Model* m, int cap);
void decoder_free(Decoder* d);
// Take the K/V of this rank's tokens at positions < n_valid from the model's last forward (recompute none: every
// layer's k and v kept) as the cache; total becomes n_valid. Collective over cp.
void decoder_take_prefill(Decoder* d, int n_valid);
// One token at position pos through every layer, its K/V appended to the cache; returns the logits of the next
// token (host [V], the same on every rank). Collective over tp and cp.
const float* decoder_step(Decoder* d, int token, int pos);

// Sampling from a row of logits (host): greedy (temperature <= 0), else softmax(logits / temperature) restricted to
// the top_k largest (0: all) and to the smallest set whose probability reaches top_p (>= 1: all; 0: the most likely
// token alone), drawn with *rng (a 64-bit state, advanced). Ties go to the lowest id. Only ids < nv (the real
// vocabulary) are drawn.
int sample_logits(const float* logits, int nv, float temperature, int top_k, float top_p, uint64_t* rng);

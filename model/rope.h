// rope.h — rotary position embedding frequencies: none, linear and YaRN (HF transformers semantics).
#pragma once
#include "model/config.h"

// inv_freq[hd/2] in double; returns the attention factor (multiplied into cos and sin: logits scale by its
// square). For yarn also reports the correction range through low/high when non-NULL.
double rope_inv_freq(const Config* c, int hd, double* inv_freq, double* low, double* high);

// Host table [npos, hd]: row p = (a*cos(p*inv_freq_i) for i < hd/2, a*sin(p*inv_freq_i) for i < hd/2).
void rope_table(const Config* c, int hd, int npos, float* table);

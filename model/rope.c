// rope.c — RoPE inverse frequencies and the cos/sin table.
//
// theta_i = b^(-2i/d), i = 0 .. d/2-1.  linear: theta_i / s.  yarn (s = factor, L = original length):
//   corr_dim(r) = d ln(L / (2 pi r)) / (2 ln b); low = floor(corr_dim(32)), high = ceil(corr_dim(1)),
//   clamped to [0, d-1], high += 0.001 when equal; ramp_i = clamp((i - low)/(high - low), 0, 1);
//   e_i = 1 - ramp_i; inv_freq_i = theta_i/s (1 - e_i) + theta_i e_i; factor a = 0.1 ln s + 1 (s > 1).
#include "model/rope.h"
#include <math.h>
#include <string.h>

static double corr_dim(double r, int d, double base, double L) {
    return d * log(L / (2.0 * M_PI * r)) / (2.0 * log(base));
}

double rope_inv_freq(const Config* c, int hd, double* inv_freq, double* low_out, double* high_out) {
    double base = c->rope_theta, s = c->rope_factor;
    for (int i = 0; i < hd / 2; i++) inv_freq[i] = pow(base, -2.0 * i / hd);
    if (strcmp(c->rope_scaling, "linear") == 0) {
        for (int i = 0; i < hd / 2; i++) inv_freq[i] /= s;
        return 1.0;
    }
    if (strcmp(c->rope_scaling, "yarn") != 0) return 1.0;
    double L = c->rope_original_max_seq_len;
    double low = floor(corr_dim(32.0, hd, base, L)), high = ceil(corr_dim(1.0, hd, base, L));
    if (low < 0) low = 0;
    if (high > hd - 1) high = hd - 1;
    if (low == high) high += 0.001;
    for (int i = 0; i < hd / 2; i++) {
        double ramp = (i - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double e = 1.0 - ramp;
        inv_freq[i] = inv_freq[i] / s * (1.0 - e) + inv_freq[i] * e;
    }
    if (low_out) *low_out = low;
    if (high_out) *high_out = high;
    return s > 1.0 ? 0.1 * log(s) + 1.0 : 1.0;
}

void rope_table(const Config* c, int hd, int npos, float* table) {
    double inv[1024];
    int half = hd / 2;
    double a = rope_inv_freq(c, hd, inv, NULL, NULL);
    for (int p = 0; p < npos; p++)
        for (int i = 0; i < half; i++) {
            double ang = (double)p * inv[i];
            table[(size_t)p * hd + i] = (float)(a * cos(ang));
            table[(size_t)p * hd + half + i] = (float)(a * sin(ang));
        }
}

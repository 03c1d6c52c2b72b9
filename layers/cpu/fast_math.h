/* exp, erf and tanh for float loops that the compiler vectorises: the C library's
 * expf/erff/tanhf are calls the loops cannot vectorise (errno), which keeps element-wise
 * kinds far from memory speed. Polynomial and rational approximations with range
 * reduction, within a few float ulps (exp: Cephes' polynomial; erf and tanh: the
 * rational approximations Eigen and XLA use); tests/test_layers.c compares the kinds
 * that use them with the double reference. Inputs outside the ranges are clamped where
 * the result no longer changes in float. NaN in, NaN out is not guaranteed. */
#ifndef LAYERBENCH_FAST_MATH_H
#define LAYERBENCH_FAST_MATH_H

#include <stdint.h>
#include <string.h>

static inline float lb_expf(float x)
{
    x = x < -87.33654f ? -87.33654f : x > 88.72283f ? 88.72283f : x;
    /* x = n ln2 + r, |r| <= ln2 / 2; n rounded to nearest by the magic-number trick */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    /* 2^n: n + 127 in the exponent field (n is -126..128 after the clamp; 2^128 is
     * reached only as y * 2^127 below) */
    int32_t e = (int32_t)n;
    float scale, half;
    int32_t bits = (e > 127 ? 127 : e) + 127;
    bits <<= 23;
    memcpy(&scale, &bits, sizeof scale);
    half = e > 127 ? 2.0f : 1.0f;
    return y * scale * half;
}

static inline float lb_erff(float x)
{
    x = x < -4.0f ? -4.0f : x > 4.0f ? 4.0f : x;
    float x2 = x * x;
    float p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 + -2.10102402082508e-06f;
    p = p * x2 + -5.69250639462346e-05f;
    p = p * x2 + -7.34990630326855e-04f;
    p = p * x2 + -2.95459980854025e-03f;
    p = p * x2 + -1.60960333262415e-02f;
    p = p * x;
    float q = -1.45660718464996e-05f;
    q = q * x2 + -2.13374055278905e-04f;
    q = q * x2 + -1.68282697438203e-03f;
    q = q * x2 + -7.37332916720468e-03f;
    q = q * x2 + -1.42647390514189e-02f;
    return p / q;
}

static inline float lb_tanhf(float x)
{
    float c = x < -7.90531110763549805f ? -7.90531110763549805f : x > 7.90531110763549805f ? 7.90531110763549805f : x;
    float x2 = c * c;
    float p = -2.76076847742355e-16f;
    p = p * x2 + 2.00018790482477e-13f;
    p = p * x2 + -8.60467152213735e-11f;
    p = p * x2 + 5.12229709037114e-08f;
    p = p * x2 + 1.48572235717979e-05f;
    p = p * x2 + 6.37261928875436e-04f;
    p = p * x2 + 4.89352455891786e-03f;
    p = p * c;
    float q = 1.19825839466702e-06f;
    q = q * x2 + 1.18534705686654e-04f;
    q = q * x2 + 2.26843463243900e-03f;
    q = q * x2 + 4.89352518554385e-03f;
    float t = p / q;
    return (x > -0.0004f && x < 0.0004f) ? x : t;
}

#endif

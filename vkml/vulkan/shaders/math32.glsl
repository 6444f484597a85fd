// float32 math shared by every kernel (math64.glsl adds the double overloads).
//
// Written out instead of calling the GLSL builtins: Vulkan lets exp/log/pow be off by
// 3 + 2|x| ulp and sin/cos be arbitrary outside [-pi, pi] (lavapipe's log is 1.5e-5 off near
// 1, its sin 25 ulp off at 1e5), and erf has no builtin at all. Each function is range
// reduction + a short polynomial, accurate to about 1 ulp over the whole float range.
//
// fma() is not relied on to be fused (lavapipe splits it into a multiply and an add), so
// exact products use Veltkamp/Dekker splitting; `precise` keeps the compiler from
// contracting or reordering those error-free transformations.

float vk_f_inf() { return uintBitsToFloat(0x7f800000u); }
float vk_f_nan() { return uintBitsToFloat(0x7fc00000u); }

// 2^k for k in [-126, 127], built from its bits (exp2() may be approximate)
float vk_f_pow2(int k) { return intBitsToFloat((k + 127) << 23); }

// y * 2^k with a single rounding (only the second multiply can leave the normal range)
float vk_f_scale(float y, int k) {
    int k1 = k / 2;
    return (y * vk_f_pow2(k1)) * vk_f_pow2(k - k1);
}

// a * b - fl(a * b) exactly (Dekker), for |a|, |b| well inside the float range
float vk_f_mulerr(float a, float b, float p) {
    precise float ca = 4097.0 * a;
    precise float ah = ca - (ca - a);
    precise float al = a - ah;
    precise float cb = 4097.0 * b;
    precise float bh = cb - (cb - b);
    precise float bl = b - bh;
    precise float err = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    return err;
}

const float VK_F_LN2_HI = 0.693145751953125;      // 16 bits: k * LN2_HI is exact
const float VK_F_LN2_LO = 1.428606765330187e-06;
const float VK_F_LOG2E = 1.4426950408889634;

// exp(r) - 1 for |r| <= 0.35: Taylor series, truncation below 2^-26 relative
float vk_f_expm1k(float r) {
    return r + r * r * (0.5 + r * (0.16666666666666666 + r * (0.041666666666666664
           + r * (0.008333333333333333 + r * (0.001388888888888889 + r * (0.0001984126984126984
           + r * 2.48015873015873e-05))))));
}

// exp(x + xl) for |xl| <= ulp(x): Cody-Waite reduction x = k ln2 + r, |r| <= ln2 / 2
float vk_f_exp2(float x, float xl) {
    if (isnan(x)) return x;
    if (x > 89.0) return vk_f_inf();           // k = 128 still rounds to inf via the scale
    if (x < -104.0) return 0.0;
    float k = floor(x * VK_F_LOG2E + 0.5);
    precise float r = ((x - k * VK_F_LN2_HI) - k * VK_F_LN2_LO) + xl;
    return vk_f_scale(1.0 + vk_f_expm1k(r), int(k));
}
float vk_exp(float x) { return vk_f_exp2(x, 0.0); }

// log(1 + f) for f exactly representable, |f| <= 0.42, as hi + lo (~2^-40 relative):
// with s = f / (2 + f), log(1 + f) = 2 atanh(s) = 2s + s R(s^2)
void vk_f_log1pk(float f, out float hi, out float lo) {
    precise float d = 2.0 + f;
    precise float dl = f - (d - 2.0);           // 2 + f = d + dl exactly
    precise float sh = f / d;
    precise float ph = sh * d;
    precise float sl = (((f - ph) - vk_f_mulerr(sh, d, ph)) - sh * dl) / d;
    float z = sh * sh;
    float R = z * (0.6666666666666666 + z * (0.4 + z * (0.2857142857142857
              + z * (0.2222222222222222 + z * 0.18181818181818182))));
    precise float h = 2.0 * sh;
    precise float l = 2.0 * sl + sh * R;
    precise float rh = h + l;                       // out parameters cannot be precise:
    precise float rl = l - (rh - h);                // renormalise in precise locals
    hi = rh;
    lo = rl;
}

// log(x) as hi + lo for finite x > 0: x = 2^e m with m in [sqrt(1/2), sqrt(2))
void vk_f_log2(float x, out float hi, out float lo) {
    int e = 0;
    if (x < 1.17549435e-38) { x *= 16777216.0; e = -24; }    // subnormal: make it normal
    int bits = floatBitsToInt(x);
    e += ((bits >> 23) & 0xff) - 127;
    float m = intBitsToFloat((bits & 0x007fffff) | 0x3f800000);
    if (m > 1.4142135623730951) { m *= 0.5; e += 1; }
    float fh, fl;
    vk_f_log1pk(m - 1.0, fh, fl);                             // m - 1 is exact
    precise float a = float(e) * VK_F_LN2_HI;                 // exact
    precise float s = a + fh;
    precise float bb = s - a;
    precise float err = (a - (s - bb)) + (fh - bb);
    precise float t = err + (fl + float(e) * VK_F_LN2_LO);
    precise float rh = s + t;
    precise float rl = t - (rh - s);
    hi = rh;
    lo = rl;
}

float vk_log(float x) {
    if (isnan(x) || x < 0.0) return vk_f_nan();
    if (x == 0.0) return -vk_f_inf();
    if (isinf(x)) return x;
    float hi, lo;
    vk_f_log2(x, hi, lo);
    return hi + lo;
}

float vk_log1p(float x) {
    if (abs(x) < 0.29) {                         // 1 + x is not rounded: use x itself
        if (x == 0.0) return x;                  // keeps -0
        float hi, lo;
        vk_f_log1pk(x, hi, lo);
        return hi + lo;
    }
    if (isnan(x) || x < -1.0) return vk_f_nan();
    if (x == -1.0) return -vk_f_inf();
    if (isinf(x)) return x;
    // log(u) with u = 1 + x rounded, plus the first-order term of the rounding error c
    precise float u = 1.0 + x;
    precise float bb = u - 1.0;
    precise float c = (1.0 - (u - bb)) + (x - bb);
    return vk_log(u) + c / u;
}

float vk_expm1(float x) {
    if (abs(x) <= 0.34657359) return x == 0.0 ? x : vk_f_expm1k(x);   // keeps -0
    if (isnan(x)) return x;
    if (x > 89.0) return vk_f_inf();
    if (x < -88.0) return -1.0;
    float k = floor(x * VK_F_LOG2E + 0.5);
    precise float r = (x - k * VK_F_LN2_HI) - k * VK_F_LN2_LO;
    float p = vk_f_expm1k(r);
    int ki = int(k);
    // 2^k (1 + p) - 1 = 2^k (p + (1 - 2^-k)); the bracket is exact for small k
    if (ki < -2 || ki > 23) return vk_f_scale(1.0 + p, ki) - 1.0;
    return vk_f_scale(p + (1.0 - vk_f_pow2(-ki)), ki);
}

// sin/cos of hi + lo on |hi| <= pi/4 (Taylor; lo enters to first order)
float vk_f_sink(float x, float y) {
    float z = x * x;
    float s = -0.16666666666666666 + z * (0.008333333333333333 + z * (-0.0001984126984126984
              + z * 2.7557319223985893e-06));
    return x + (x * z * s + y * (1.0 - 0.5 * z));
}
float vk_f_cosk(float x, float y) {
    float z = x * x;
    float c = 0.041666666666666664 + z * (-0.001388888888888889 + z * (2.48015873015873e-05
              + z * -2.755731922398589e-07));
    precise float hz = 0.5 * z;
    precise float w = 1.0 - hz;
    precise float v = w + (((1.0 - w) - hz) + (z * z * c - x * y));  // recovers 1 - hz's rounding
    return v;
}

// Bits of 2/pi, most significant first: 2/pi = sum VK_TWO_OVER_PI[i] * 2^(-32 (i + 1)).
const uint VK_TWO_OVER_PI[37] = uint[37](
    0xA2F9836Eu, 0x4E441529u, 0xFC2757D1u, 0xF534DDC0u, 0xDB629599u, 0x3C439041u, 0xFE5163ABu,
    0xDEBBC561u, 0xB7246E3Au, 0x424DD2E0u, 0x06492EEAu, 0x09D1921Cu, 0xFE1DEB1Cu, 0xB129A73Eu,
    0xE88235F5u, 0x2EBB4484u, 0xE99C7026u, 0xB45F7E41u, 0x3991D639u, 0x835339F4u, 0x9C845F8Bu,
    0xBDF9283Bu, 0x1FF897FFu, 0xDE05980Fu, 0xEF2F118Bu, 0x5A0A6D1Fu, 0x6D367ECFu, 0x27CB09B7u,
    0x4F463F66u, 0x9E5FEA2Du, 0x7527BAC7u, 0xEBE5F17Bu, 0x3D0739F7u, 0x8A5292EAu, 0x6BFB5FB1u,
    0x1F8D5D08u, 0x56033046u);

// bits [pos, pos + 32) of the 288-bit little-endian integer p
uint vk_bits32(uint p[9], int pos) {
    int wd = pos >> 5;
    int sh = pos & 31;
    uint v = p[wd] >> uint(sh);
    if (sh != 0 && wd < 8) v |= p[wd + 1] << uint(32 - sh);
    return v;
}

// Payne-Hanek reduction, exact in integer arithmetic: for x = (mhi 2^32 + mlo) 2^e
// (mhi < 2^21, e >= -62) returns the quadrant q = round(x 2/pi) mod 4 and
// |x 2/pi - round(x 2/pi)| in [0, 1/2] as five words w[j] of weight 2^(-32 (j + 1));
// neg says x 2/pi < round(x 2/pi). Used by float and double sin/cos for every |x| > pi/4.
int vk_rem_pio2_bits(uint mhi, uint mlo, int e, out uint w[5], out bool neg) {
    // words of 2/pi whose product with x is a multiple of 4 do not matter; seven more
    // words leave >= 138 bits of the fraction exact
    int i0 = e >= 2 ? (e - 2) >> 5 : 0;
    uint p[9];
    uint carry = 0u;
    for (int j = 0; j < 7; ++j) {
        uint hi, lo, c;
        umulExtended(VK_TWO_OVER_PI[i0 + 6 - j], mlo, hi, lo);
        p[j] = uaddCarry(lo, carry, c);
        carry = hi + c;
    }
    p[7] = carry;
    carry = 0u;
    for (int j = 0; j < 7; ++j) {
        uint hi, lo, c1, c2;
        umulExtended(VK_TWO_OVER_PI[i0 + 6 - j], mhi, hi, lo);
        uint s = uaddCarry(lo, carry, c1);
        p[j + 1] = uaddCarry(p[j + 1], s, c2);
        carry = hi + c1 + c2;                    // hi < 2^21: no overflow
    }
    p[8] = carry;
    int b = 32 * (i0 + 7) - e;                   // bit of p with weight 2^0
    uint q = vk_bits32(p, b) & 3u;
    for (int j = 0; j < 5; ++j) w[j] = vk_bits32(p, b - 32 * (j + 1));
    neg = w[0] >= 0x80000000u;
    if (neg) {                                   // fraction f >= 1/2: use 1 - f, next quadrant
        uint c = 1u;
        for (int j = 4; j >= 0; --j) {
            uint cout;
            w[j] = uaddCarry(~w[j], c, cout);
            c = cout;
        }
        q += 1u;
    }
    return int(q & 3u);
}

// |x| = q pi/2 + (rh + rl) for finite |x| > pi/4, |rh + rl| <= pi/4
int vk_f_rem_pio2(float ax, out float rh, out float rl) {
    int bits = floatBitsToInt(ax);
    uint w[5];
    bool neg;
    int q = vk_rem_pio2_bits(0u, uint((bits & 0x7fffff) | 0x800000), ((bits >> 23) & 0xff) - 150,
                             w, neg);
    // the fraction as hi + lo from 16-bit pieces (each exact in a float), down to 2^-96
    precise float h = 0.0;
    precise float l = 0.0;
    for (int j = 0; j < 6; ++j) {
        uint piece = (j & 1) == 0 ? (w[j >> 1] >> 16u) : (w[j >> 1] & 0xffffu);
        precise float v = float(piece) * vk_f_pow2(-16 * (j + 1));
        precise float s = h + v;
        precise float bb = s - h;
        precise float err = (h - (s - bb)) + (v - bb);
        precise float t = err + l;
        h = s + t;
        l = t - (h - s);
    }
    // times pi/2 = 1.5707963705062866 - 4.371138828673793e-08
    precise float ph = h * 1.5707963705062866;
    precise float pl = vk_f_mulerr(h, 1.5707963705062866, ph)
                       + (h * -4.371138828673793e-08 + l * 1.5707963705062866);
    precise float h2 = ph + pl;
    precise float l2 = pl - (h2 - ph);
    rh = neg ? -h2 : h2;
    rl = neg ? -l2 : l2;
    return q;
}

float vk_sin(float x) {
    float ax = abs(x);
    if (ax <= 0.785398163) return ax < 0.000244140625 ? x : vk_f_sink(x, 0.0);
    if (isnan(x) || isinf(x)) return vk_f_nan();
    float rh, rl;
    int q = vk_f_rem_pio2(ax, rh, rl);
    float v = (q & 1) == 0 ? vk_f_sink(rh, rl) : vk_f_cosk(rh, rl);
    if (q >= 2) v = -v;
    return x < 0.0 ? -v : v;
}

float vk_cos(float x) {
    float ax = abs(x);
    if (ax <= 0.785398163) return vk_f_cosk(ax, 0.0);
    if (isnan(x) || isinf(x)) return vk_f_nan();
    float rh, rl;
    int q = vk_f_rem_pio2(ax, rh, rl);
    float v = (q & 1) == 0 ? vk_f_cosk(rh, rl) : vk_f_sink(rh, rl);
    return (q == 1 || q == 2) ? -v : v;
}

float vk_tanh(float x) {
    float ax = abs(x);
    if (ax > 9.1) return x > 0.0 ? 1.0 : -1.0;   // 1 - tanh < 2^-25
    if (ax < 0.000244140625) return x;            // x^3 / 3 is below half an ulp (and keeps -0)
    float e = vk_expm1(2.0 * ax);
    float t = e / (e + 2.0);
    return x < 0.0 ? -t : t;
}

float vk_sigmoid(float x) {
    if (x >= 0.0) return 1.0 / (1.0 + vk_exp(-x));
    float e = vk_exp(x);                          // x < 0 or nan
    return e / (1.0 + e);
}

// erfc: W. J. Cody's rational approximations in the Chebyshev form used by Numerical
// Recipes' erfc (28 coefficients, good to double precision; shared with math64.glsl).
// z^2 = hi + lo is split exactly and the exponent summed in hi + lo, since rounding z^2 alone
// would cost |z|^2 ulp.
const float VK_F_ERFC_CHEB[28] = float[28](
    -1.3026537197817094, 6.4196979235649026e-1, 1.9476473204185836e-2,
    -9.561514786808631e-3, -9.46595344482036e-4, 3.66839497852761e-4,
    4.2523324806907e-5, -2.0278578112534e-5, -1.624290004647e-6,
    1.303655835580e-6, 1.5626441722e-8, -8.5238095915e-8, 6.529054439e-9,
    5.059343495e-9, -9.91364156e-10, -2.27365122e-10, 9.6467911e-11,
    2.394038e-12, -6.886027e-12, 8.94487e-13, 3.13092e-13, -1.12708e-13,
    3.81e-16, 7.106e-15, -1.523e-15, -9.4e-17, 1.21e-16, -2.8e-17);

// erf on |x| < 0.5 by its Maclaurin series, which avoids the 1 - erfc cancellation near 0
float vk_erf_series(float x) {
    float x2 = x * x;
    float p = x2 * (-0.37612638903183754 + x2 * (0.11283791670955126
              + x2 * (-0.026866170645131252 + x2 * (0.005223977625442188
              + x2 * (-0.0008548327023450853 + x2 * 0.00012055332981789664)))));
    // 2/sqrt(pi) = 1.128379225730896 - 5.8635383e-08: the float constant alone is 0.4 ulp off
    precise float r = x * 1.128379225730896 + x * (-5.8635383e-08 + p);   // precise: no refactoring
    return r;
}

float vk_erfc(float x) {
    if (isnan(x)) return x;
    float z = abs(x);
    if (z < 0.5) return 1.0 - vk_erf_series(x);    // no cancellation: erf(x) < 0.53
    if (z > 10.1) return x > 0.0 ? 0.0 : 2.0;     // erfc(10.1) is below the float range
    float t = 2.0 / (2.0 + z);
    float ty = 4.0 * t - 2.0;
    float d = 0.0, dd = 0.0;
    // only the first 16 coefficients matter in float
    for (int j = 15; j > 0; j--) { float tmp = d; d = ty * d - dd + VK_F_ERFC_CHEB[j]; dd = tmp; }
    float zh = z * z;
    float zl = vk_f_mulerr(z, z, zh);
    // exp(-zh + E - zl) with -zh + E summed exactly (TwoSum) and handed to exp as hi + lo
    precise float E = 0.5 * (VK_F_ERFC_CHEB[0] + ty * d) - dd;
    precise float sh = E - zh;
    precise float bb = sh - E;
    precise float sl = ((E - (sh - bb)) + (-zh - bb)) - zl;
    float r = t * vk_f_exp2(sh, sl);
    return x >= 0.0 ? r : 2.0 - r;
}

float vk_erf(float x) {
    if (abs(x) < 0.5) return vk_erf_series(x);
    if (isnan(x)) return x;
    if (abs(x) > 4.0) return x > 0.0 ? 1.0 : -1.0;   // erfc(4) < 2^-25
    float r = 1.0 - vk_erfc(abs(x));
    return x > 0.0 ? r : -r;
}

// C99/NumPy pow: pow(x, 0) = pow(1, y) = 1 even for nan; a negative base needs an integral
// exponent (odd ones keep the sign); otherwise exp(y log|x|) with log in float-float
float vk_pow(float a, float b) {
    if (b == 0.0 || a == 1.0) return 1.0;
    if (isnan(a) || isnan(b)) return vk_f_nan();
    float aa = abs(a);
    if (isinf(b)) {
        if (aa == 1.0) return 1.0;
        return ((aa > 1.0) == (b > 0.0)) ? vk_f_inf() : 0.0;
    }
    bool bint = b == floor(b);
    bool bodd = bint && abs(b) < 16777216.0 && mod(b, 2.0) == 1.0;
    bool aneg = floatBitsToInt(a) < 0;            // includes -0
    if (a == 0.0 || isinf(a)) {
        float r = ((a == 0.0) == (b < 0.0)) ? vk_f_inf() : 0.0;
        return (aneg && bodd) ? -r : r;
    }
    if (aneg && !bint) return vk_f_nan();
    float lh, ll;
    vk_f_log2(aa, lh, ll);
    float r;
    precise float yh = b * lh;
    if (abs(yh) > 105.0) {
        r = yh > 0.0 ? vk_f_inf() : 0.0;
    } else {
        precise float yl = vk_f_mulerr(b, lh, yh) + b * ll;
        r = vk_f_exp2(yh, yl);
    }
    return (aneg && bodd) ? -r : r;
}

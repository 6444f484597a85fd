// float64 math: the double overloads of math32.glsl's functions, appended after it in
// double kernels only (see lower/expressions.py:math_library).
//
// GLSL has no double exp/log/sin/..., so each is range reduction + a polynomial evaluated
// in double, with double-double (hi + lo) intermediates where a rounding would be
// amplified (log for pow, exp(-z^2) in erfc, the reduced argument of sin/cos). Accuracy is
// a few ulp over the whole range, which float64 finite-difference gradient checks need.
// As in math32.glsl, exact products use Dekker splitting (fma may be unfused) and
// `precise` forbids contraction. Every constant carries the LF suffix: an unsuffixed
// literal is a float.

double vk_d_inf() { return packDouble2x32(uvec2(0u, 0x7ff00000u)); }
double vk_d_nan() { return packDouble2x32(uvec2(0u, 0x7ff80000u)); }

// 2^k for k in [-1022, 1023], from its bits
double vk_d_pow2(int k) { return packDouble2x32(uvec2(0u, uint(k + 1023) << 20)); }

// y * 2^k with a single rounding (only the second multiply can leave the normal range)
double vk_d_scale(double y, int k) {
    int k1 = k / 2;
    return (y * vk_d_pow2(k1)) * vk_d_pow2(k - k1);
}

// a * b - fl(a * b) exactly (Dekker), for |a|, |b| < 2^995
double vk_d_mulerr(double a, double b, double p) {
    precise double ca = 134217729.0LF * a;
    precise double ah = ca - (ca - a);
    precise double al = a - ah;
    precise double cb = 134217729.0LF * b;
    precise double bh = cb - (cb - b);
    precise double bl = b - bh;
    precise double err = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    return err;
}

const double VK_D_LN2_HI = 0.6931471805601177LF;     // 40 bits: k * LN2_HI is exact
const double VK_D_LN2_LO = -1.7239444525614835e-13LF;
const double VK_D_LOG2E = 1.4426950408889634LF;

// exp(r) - 1 for |r| <= 0.35: Taylor series to r^14, truncation below 2^-61 relative
double vk_d_expm1k(double r) {
    double p = 1.1470745597729725e-11LF;
    p = 1.6059043836821613e-10LF + r * p;
    p = 2.08767569878681e-09LF + r * p;
    p = 2.505210838544172e-08LF + r * p;
    p = 2.755731922398589e-07LF + r * p;
    p = 2.7557319223985893e-06LF + r * p;
    p = 2.48015873015873e-05LF + r * p;
    p = 0.0001984126984126984LF + r * p;
    p = 0.001388888888888889LF + r * p;
    p = 0.008333333333333333LF + r * p;
    p = 0.041666666666666664LF + r * p;
    p = 0.16666666666666666LF + r * p;
    p = 0.5LF + r * p;
    return r + r * r * p;
}

// exp(x + xl) for |xl| <= ulp(x): Cody-Waite reduction x = k ln2 + r, |r| <= ln2 / 2
double vk_d_exp2(double x, double xl) {
    if (isnan(x)) return x;
    if (x > 709.79LF) return vk_d_inf();          // k = 1024 still rounds to inf via the scale
    if (x < -745.2LF) return 0.0LF;
    double k = floor(x * VK_D_LOG2E + 0.5LF);
    precise double r = ((x - k * VK_D_LN2_HI) - k * VK_D_LN2_LO) + xl;
    return vk_d_scale(1.0LF + vk_d_expm1k(r), int(k));
}
double vk_exp(double x) { return vk_d_exp2(x, 0.0LF); }

// log(1 + f) for f exactly representable, |f| <= 0.42, as hi + lo (~2^-62 relative):
// with s = f / (2 + f) in double-double, log(1 + f) = 2 atanh(s) = 2s + s R(s^2)
void vk_d_log1pk(double f, out double hi, out double lo) {
    precise double d = 2.0LF + f;
    precise double dl = f - (d - 2.0LF);          // 2 + f = d + dl exactly
    precise double sh = f / d;
    precise double ph = sh * d;
    precise double sl = (((f - ph) - vk_d_mulerr(sh, d, ph)) - sh * dl) / d;
    // the tail's first term 2s^3/3 is up to 1% of the result: take it in double-double too
    precise double zh = sh * sh;
    precise double zl = vk_d_mulerr(sh, sh, zh) + 2.0LF * sh * sl;
    precise double ch = sh * zh;                                    // s^3
    precise double cl = vk_d_mulerr(sh, zh, ch) + (sh * zl + sl * zh);
    precise double th = ch * 0.6666666666666666LF;                  // 2/3 = this + 3.7e-17
    precise double tl = vk_d_mulerr(ch, 0.6666666666666666LF, th)
                        + (ch * 3.700743415417188e-17LF + cl * 0.6666666666666666LF);
    // the rest, 2s^5/5 + 2s^7/7 + ..., is below 2e-4 of the result: double is plenty
    double z = zh;
    double R = 0.08LF;
    R = 0.08695652173913043LF + z * R;
    R = 0.09523809523809523LF + z * R;
    R = 0.10526315789473684LF + z * R;
    R = 0.11764705882352941LF + z * R;
    R = 0.13333333333333333LF + z * R;
    R = 0.15384615384615385LF + z * R;
    R = 0.18181818181818182LF + z * R;
    R = 0.2222222222222222LF + z * R;
    R = 0.2857142857142857LF + z * R;
    R = 0.4LF + z * R;
    R *= ch * z;
    precise double h = 2.0LF * sh;
    precise double s1 = h + th;                                     // TwoSum(h, th)
    precise double bb = s1 - h;
    precise double e1 = (h - (s1 - bb)) + (th - bb);
    precise double l = e1 + (2.0LF * sl + (tl + R));
    precise double rh = s1 + l;                      // out parameters cannot be precise:
    precise double rl = l - (rh - s1);               // renormalise in precise locals
    hi = rh;
    lo = rl;
}

// log(x) as hi + lo for finite x > 0: x = 2^e m with m in [sqrt(1/2), sqrt(2))
void vk_d_log2(double x, out double hi, out double lo) {
    int e = 0;
    if (x < 2.2250738585072014e-308LF) { x *= 18014398509481984.0LF; e = -54; }   // subnormal
    uvec2 u = unpackDouble2x32(x);
    e += int((u.y >> 20) & 0x7ffu) - 1023;
    double m = packDouble2x32(uvec2(u.x, (u.y & 0xfffffu) | 0x3ff00000u));
    if (m > 1.4142135623730951LF) { m *= 0.5LF; e += 1; }
    double fh, fl;
    vk_d_log1pk(m - 1.0LF, fh, fl);                          // m - 1 is exact
    precise double a = double(e) * VK_D_LN2_HI;              // exact
    precise double s = a + fh;
    precise double bb = s - a;
    precise double err = (a - (s - bb)) + (fh - bb);
    precise double t = err + (fl + double(e) * VK_D_LN2_LO);
    precise double rh = s + t;
    precise double rl = t - (rh - s);
    hi = rh;
    lo = rl;
}

double vk_log(double x) {
    if (isnan(x) || x < 0.0LF) return vk_d_nan();
    if (x == 0.0LF) return -vk_d_inf();
    if (isinf(x)) return x;
    double hi, lo;
    vk_d_log2(x, hi, lo);
    return hi + lo;
}

double vk_log1p(double x) {
    if (abs(x) < 0.29LF) {                       // 1 + x is not rounded: use x itself
        if (abs(x) < 5.551115123125783e-17LF) return x;  // log1p(x) = x (1 - x/2 ...); also -0, subnormals
        double hi, lo;
        vk_d_log1pk(x, hi, lo);
        return hi + lo;
    }
    if (isnan(x) || x < -1.0LF) return vk_d_nan();
    if (x == -1.0LF) return -vk_d_inf();
    if (isinf(x)) return x;
    // log(u) with u = 1 + x rounded, plus the first-order term of the rounding error c
    precise double u = 1.0LF + x;
    precise double bb = u - 1.0LF;
    precise double c = (1.0LF - (u - bb)) + (x - bb);
    return vk_log(u) + c / u;
}

double vk_expm1(double x) {
    if (abs(x) <= 0.34657359027997264LF) return x == 0.0LF ? x : vk_d_expm1k(x);   // keeps -0
    if (isnan(x)) return x;
    if (x > 709.79LF) return vk_d_inf();
    if (x < -38.0LF) return -1.0LF;              // exp(x) < 2^-54
    double k = floor(x * VK_D_LOG2E + 0.5LF);
    precise double r = (x - k * VK_D_LN2_HI) - k * VK_D_LN2_LO;
    double p = vk_d_expm1k(r);
    int ki = int(k);
    // 2^k (1 + p) - 1 = 2^k (p + (1 - 2^-k)); the bracket is exact for small k
    if (ki < -2 || ki > 52) return vk_d_scale(1.0LF + p, ki) - 1.0LF;
    return vk_d_scale(p + (1.0LF - vk_d_pow2(-ki)), ki);
}

// Word i of 2/pi for every index a double can need (see vk_two_over_pi_f in math32.glsl)
uint vk_two_over_pi_d(int i) {
    return i == 0 ? 0xA2F9836Eu :
           i == 1 ? 0x4E441529u :
           i == 2 ? 0xFC2757D1u :
           i == 3 ? 0xF534DDC0u :
           i == 4 ? 0xDB629599u :
           i == 5 ? 0x3C439041u :
           i == 6 ? 0xFE5163ABu :
           i == 7 ? 0xDEBBC561u :
           i == 8 ? 0xB7246E3Au :
           i == 9 ? 0x424DD2E0u :
           i == 10 ? 0x06492EEAu :
           i == 11 ? 0x09D1921Cu :
           i == 12 ? 0xFE1DEB1Cu :
           i == 13 ? 0xB129A73Eu :
           i == 14 ? 0xE88235F5u :
           i == 15 ? 0x2EBB4484u :
           i == 16 ? 0xE99C7026u :
           i == 17 ? 0xB45F7E41u :
           i == 18 ? 0x3991D639u :
           i == 19 ? 0x835339F4u :
           i == 20 ? 0x9C845F8Bu :
           i == 21 ? 0xBDF9283Bu :
           i == 22 ? 0x1FF897FFu :
           i == 23 ? 0xDE05980Fu :
           i == 24 ? 0xEF2F118Bu :
           i == 25 ? 0x5A0A6D1Fu :
           i == 26 ? 0x6D367ECFu :
           i == 27 ? 0x27CB09B7u :
           i == 28 ? 0x4F463F66u :
           i == 29 ? 0x9E5FEA2Du :
           i == 30 ? 0x7527BAC7u :
           i == 31 ? 0xEBE5F17Bu :
           i == 32 ? 0x3D0739F7u :
           i == 33 ? 0x8A5292EAu :
           i == 34 ? 0x6BFB5FB1u :
           i == 35 ? 0x1F8D5D08u :
           i == 36 ? 0x56033046u : 0u;
}

// sin/cos of hi + lo on |hi| <= pi/4 (Taylor to x^19 / x^20; lo enters to first order)
double vk_d_sink(double x, double y) {
    double z = x * x;
    double s = -8.22063524662433e-18LF;
    s = 2.8114572543455206e-15LF + z * s;
    s = -7.647163731819816e-13LF + z * s;
    s = 1.6059043836821613e-10LF + z * s;
    s = -2.505210838544172e-08LF + z * s;
    s = 2.7557319223985893e-06LF + z * s;
    s = -0.0001984126984126984LF + z * s;
    s = 0.008333333333333333LF + z * s;
    s = -0.16666666666666666LF + z * s;
    return x + (x * z * s + y * (1.0LF - 0.5LF * z));
}
double vk_d_cosk(double x, double y) {
    double z = x * x;
    double c = 4.110317623312165e-19LF;
    c = -1.5619206968586225e-16LF + z * c;
    c = 4.779477332387385e-14LF + z * c;
    c = -1.1470745597729725e-11LF + z * c;
    c = 2.08767569878681e-09LF + z * c;
    c = -2.755731922398589e-07LF + z * c;
    c = 2.48015873015873e-05LF + z * c;
    c = -0.001388888888888889LF + z * c;
    c = 0.041666666666666664LF + z * c;
    precise double hz = 0.5LF * z;
    precise double w = 1.0LF - hz;
    precise double v = w + (((1.0LF - w) - hz) + (z * z * c - x * y));  // recovers 1 - hz's rounding
    return v;
}

// |x| = q pi/2 + (rh + rl) for pi/4 < |x| < 2^20 (Cody-Waite): pi/2 = P1 + P2 + P3, with
// k P1 and k P2 carried exactly (Dekker) so that cancellation near k pi/2 costs nothing.
// Several times cheaper than the Payne-Hanek path, which takes the larger arguments.
int vk_d_rem_pio2_cw(double ax, out double rh, out double rl) {
    double k = floor(ax * 0.6366197723675814LF + 0.5LF);
    precise double p1 = k * 1.5707963267948966LF;
    precise double e1 = vk_d_mulerr(k, 1.5707963267948966LF, p1);
    precise double p2 = k * 6.123233995736766e-17LF;
    precise double e2 = vk_d_mulerr(k, 6.123233995736766e-17LF, p2);
    precise double t = ax - p1;                      // exact (Sterbenz)
    precise double s1 = t - e1;                      // TwoSum(t, -e1)
    precise double b1 = s1 - t;
    precise double a1 = (t - (s1 - b1)) + (-e1 - b1);
    precise double s2 = s1 - p2;                     // TwoSum(s1, -p2)
    precise double b2 = s2 - s1;
    precise double a2 = (s1 - (s2 - b2)) + (-p2 - b2);
    precise double lo = (a1 + a2) - (e2 + k * -1.4973849048591698e-33LF);
    precise double h = s2 + lo;
    precise double l = lo - (h - s2);
    rh = h;
    rl = l;
    return int(k) & 3;
}

// |x| = q pi/2 + (rh + rl) for any finite |x| > pi/4 (Payne-Hanek, vk_rem_pio2_bits)
int vk_d_rem_pio2_ph(double ax, out double rh, out double rl) {
    uvec2 u = unpackDouble2x32(ax);
    uint w[5];
    bool neg;
    int e = int((u.y >> 20) & 0x7ffu) - 1075;    // ax = m 2^e, e in [-32, 971]
    int i0 = (e >> 5) - 1;
    uint a[8];
    for (int j = 0; j < 8; ++j) a[j] = vk_two_over_pi_d(i0 + j);
    uint m0, m1, m2;
    vk_shift_mantissa((u.y & 0xfffffu) | 0x100000u, u.x, e & 31, m0, m1, m2);
    int q = vk_rem_pio2_bits(m0, m1, m2, a, w, neg);
    // the 160-bit fraction as a double-double (each word is exact in a double)
    precise double h = 0.0LF;
    precise double l = 0.0LF;
    for (int j = 0; j < 5; ++j) {
        precise double v = double(w[j]) * vk_d_pow2(-32 * (j + 1));
        precise double s = h + v;
        precise double bb = s - h;
        precise double err = (h - (s - bb)) + (v - bb);
        precise double t = err + l;
        h = s + t;
        l = t - (h - s);
    }
    // times pi/2 = 1.5707963267948966 + 6.123233995736766e-17
    precise double ph = h * 1.5707963267948966LF;
    precise double pl = vk_d_mulerr(h, 1.5707963267948966LF, ph)
                        + (h * 6.123233995736766e-17LF + l * 1.5707963267948966LF);
    precise double h2 = ph + pl;
    precise double l2 = pl - (h2 - ph);
    rh = neg ? -h2 : h2;
    rl = neg ? -l2 : l2;
    return q;
}

// |x| = q pi/2 + (rh + rl), |rh + rl| <= pi/4, for finite |x| > pi/4
int vk_d_rem_pio2(double ax, out double rh, out double rl) {
    int q = vk_d_rem_pio2_cw(ax, rh, rl);
    // large arguments are rare, but lavapipe runs a divergent if's body under a lane mask
    // even when no lane takes it; written as a loop the unused path measured cheaper
    for (int big = ax < 1048576.0LF ? 0 : 1; big > 0; --big) q = vk_d_rem_pio2_ph(ax, rh, rl);
    return q;
}

double vk_sin(double x) {
    double ax = abs(x);
    if (ax <= 0.7853981633974483LF) return ax < 3.7252902984e-09LF ? x : vk_d_sink(x, 0.0LF);
    if (isnan(x) || isinf(x)) return vk_d_nan();
    double rh, rl;
    int q = vk_d_rem_pio2(ax, rh, rl);
    double v = (q & 1) == 0 ? vk_d_sink(rh, rl) : vk_d_cosk(rh, rl);
    if (q >= 2) v = -v;
    return x < 0.0LF ? -v : v;
}

double vk_cos(double x) {
    double ax = abs(x);
    if (ax <= 0.7853981633974483LF) return vk_d_cosk(ax, 0.0LF);
    if (isnan(x) || isinf(x)) return vk_d_nan();
    double rh, rl;
    int q = vk_d_rem_pio2(ax, rh, rl);
    double v = (q & 1) == 0 ? vk_d_cosk(rh, rl) : vk_d_sink(rh, rl);
    return (q == 1 || q == 2) ? -v : v;
}

double vk_tanh(double x) {
    double ax = abs(x);
    if (ax > 19.1LF) return x > 0.0LF ? 1.0LF : -1.0LF;   // 1 - tanh < 2^-54
    if (ax < 3.7252902984e-09LF) return x;                // x^3 / 3 below half an ulp
    double e = vk_expm1(2.0LF * ax);
    double t = e / (e + 2.0LF);
    return x < 0.0LF ? -t : t;
}

double vk_sigmoid(double x) {
    if (x >= 0.0LF) return 1.0LF / (1.0LF + vk_exp(-x));
    double e = vk_exp(x);                                  // x < 0 or nan
    return e / (1.0LF + e);
}


// erf on |x| < 0.5 by its Maclaurin series to x^27, which avoids the 1 - erfc cancellation
double vk_erf_series(double x) {
    if (x == 0.0LF) return x;                   // keeps -0
    double z = x * x;
    double p = -6.7113668551641105e-12LF;
    p = 9.422759064650411e-11LF + z * p;
    p = -1.2290555301717928e-09LF + z * p;
    p = 1.4807192815879218e-08LF + z * p;
    p = -1.6365844691234924e-07LF + z * p;
    p = 1.6462114365889248e-06LF + z * p;
    p = -1.492565035840625e-05LF + z * p;
    p = 0.00012055332981789664LF + z * p;
    p = -0.0008548327023450853LF + z * p;
    p = 0.005223977625442188LF + z * p;
    p = -0.026866170645131252LF + z * p;
    p = 0.11283791670955126LF + z * p;
    p = -0.37612638903183754LF + z * p;
    precise double r = x * 1.1283791670955126LF + x * (z * p);
    return r;
}

double vk_erfc(double x) {
    if (isnan(x)) return x;
    double z = abs(x);
    if (z < 0.5LF) return 1.0LF - vk_erf_series(x);      // no cancellation: erf(x) < 0.53
    if (z > 27.3LF) return x > 0.0LF ? 0.0LF : 2.0LF;    // erfc(27.3) is below the double range
    double t = 2.0LF / (2.0LF + z);
    double ty = 4.0LF * t - 2.0LF;
    // the Chebyshev series of math32.glsl's erfc with all 28 coefficients, Clenshaw written out
    double b27 = -2.8e-17LF; double b26 = ty * b27 + 1.21e-16LF;
    double b25 = ty * b26 - b27 + -9.4e-17LF;
    double b24 = ty * b25 - b26 + -1.523e-15LF; double b23 = ty * b24 - b25 + 7.106e-15LF;
    double b22 = ty * b23 - b24 + 3.81e-16LF;
    double b21 = ty * b22 - b23 + -1.12708e-13LF; double b20 = ty * b21 - b22 + 3.13092e-13LF;
    double b19 = ty * b20 - b21 + 8.94487e-13LF;
    double b18 = ty * b19 - b20 + -6.886027e-12LF; double b17 = ty * b18 - b19 + 2.394038e-12LF;
    double b16 = ty * b17 - b18 + 9.6467911e-11LF;
    double b15 = ty * b16 - b17 + -2.27365122e-10LF; double b14 = ty * b15 - b16 + -9.91364156e-10LF;
    double b13 = ty * b14 - b15 + 5.059343495e-9LF;
    double b12 = ty * b13 - b14 + 6.529054439e-9LF; double b11 = ty * b12 - b13 + -8.5238095915e-8LF;
    double b10 = ty * b11 - b12 + 1.5626441722e-8LF;
    double b9 = ty * b10 - b11 + 1.303655835580e-6LF; double b8 = ty * b9 - b10 + -1.624290004647e-6LF;
    double b7 = ty * b8 - b9 + -2.0278578112534e-5LF;
    double b6 = ty * b7 - b8 + 4.2523324806907e-5LF; double b5 = ty * b6 - b7 + 3.66839497852761e-4LF;
    double b4 = ty * b5 - b6 + -9.46595344482036e-4LF;
    double b3 = ty * b4 - b5 + -9.561514786808631e-3LF; double b2 = ty * b3 - b4 + 1.9476473204185836e-2LF;
    double b1 = ty * b2 - b3 + 6.4196979235649026e-1LF;
    double zh = z * z;
    double zl = vk_d_mulerr(z, z, zh);
    // exp(-zh + E - zl) with -zh + E summed exactly (TwoSum) and handed to exp as hi + lo
    precise double E = 0.5LF * (-1.3026537197817094LF + ty * b1) - b2;
    precise double sh = E - zh;
    precise double bb = sh - E;
    precise double sl = ((E - (sh - bb)) + (-zh - bb)) - zl;
    double r = t * vk_d_exp2(sh, sl);
    return x >= 0.0LF ? r : 2.0LF - r;
}

double vk_erf(double x) {
    double ax = abs(x);
    if (ax < 0.5LF) return vk_erf_series(x);
    if (isnan(x)) return x;
    if (ax > 6.0LF) return x > 0.0LF ? 1.0LF : -1.0LF;   // erfc(6) < 2^-54
    double r = 1.0LF - vk_erfc(ax);
    return x > 0.0LF ? r : -r;
}

// C99/NumPy pow (see math32.glsl); exp(y log|x|) with log and the product in double-double
double vk_pow(double a, double b) {
    if (b == 0.0LF || a == 1.0LF) return 1.0LF;
    if (isnan(a) || isnan(b)) return vk_d_nan();
    double aa = abs(a);
    if (isinf(b)) {
        if (aa == 1.0LF) return 1.0LF;
        return ((aa > 1.0LF) == (b > 0.0LF)) ? vk_d_inf() : 0.0LF;
    }
    bool bint = b == floor(b);
    bool bodd = bint && abs(b) < 9007199254740992.0LF && mod(b, 2.0LF) == 1.0LF;
    bool aneg = unpackDouble2x32(a).y >= 0x80000000u;       // includes -0
    if (a == 0.0LF || isinf(a)) {
        double r = ((a == 0.0LF) == (b < 0.0LF)) ? vk_d_inf() : 0.0LF;
        return (aneg && bodd) ? -r : r;
    }
    if (aneg && !bint) return vk_d_nan();
    double lh, ll;
    vk_d_log2(aa, lh, ll);
    double r;
    precise double yh = b * lh;
    if (abs(yh) > 746.0LF) {
        r = yh > 0.0LF ? vk_d_inf() : 0.0LF;
    } else {
        precise double yl = vk_d_mulerr(b, lh, yh) + b * ll;
        r = vk_d_exp2(yh, yl);
    }
    return (aneg && bodd) ? -r : r;
}

// The same guard for doubles (2^1020).
// as the float one
double vk_div(double a, double b) {
    double ab = abs(b);
    if (ab > 1.1235582092889474e307LF) return (a * 0.25LF) / (b * 0.25LF);
    if (ab < 2.2250738585072014e-308LF) {
        if (ab != 0.0LF) return (a * 18014398509481984.0LF) / (b * 18014398509481984.0LF);
        if (isnan(a) || a == 0.0LF) return vk_d_nan();
        uint s = (unpackDouble2x32(a).y ^ unpackDouble2x32(b).y) & 0x80000000u;
        return packDouble2x32(uvec2(0u, s | 0x7ff00000u));
    }
    return a / b;
}

// fmod, floor division and remainder for doubles: as the float32 ones (about 2100
// reduction steps at most).
double vk_fmod(double x, double y) {
    double ax = abs(x), ay = abs(y);
    if (isnan(x) || isnan(y) || isinf(x) || ay == 0.0LF) return vk_d_nan();
    if (!(ax >= ay)) return x;
    double t = ay;
    while (t + t <= ax) t += t;
    double r = ax;
    while (t >= ay) { if (r >= t) r -= t; t *= 0.5LF; }
    return x < 0.0LF ? -r : r;
}

// x / y rounded to nearest (as vk_f_div_rn)
double vk_d_div_rn(double x, double y) {
    double ax = abs(x), ay = abs(y);
    if (!(ax >= 2.2250738585072014e-308LF && ay >= 2.2250738585072014e-308LF) || isinf(ax) || isinf(ay))
        return vk_div(x, y);
    int ex, ey;
    double xm = frexp(ax, ex), ym = frexp(ay, ey);
    double q = xm / ym;
    double best = q, br = vk_d_inf();
    for (int i = -2; i <= 2; i++) {
        uvec2 w = unpackDouble2x32(q);
        uint lo = w.x + uint(i);
        // the carry or borrow of the low word into the high one
        uint hi = w.y + ((i > 0 && lo < w.x) ? 1u : 0u) - ((i < 0 && lo > w.x) ? 1u : 0u);
        double c = packDouble2x32(uvec2(lo, hi));
        precise double p = c * ym;
        precise double r = abs((xm - p) - vk_d_mulerr(c, ym, p));
        if (r < br || (r == br && (lo & 1u) == 0u)) { best = c; br = r; }
    }
    double res = ldexp(best, ex - ey);
    return ((x < 0.0LF) != (y < 0.0LF)) ? -res : res;
}

double vk_floordiv(double a, double b) {
    if (b == 0.0LF) return vk_div(a, b);
    double m = vk_fmod(a, b);
    double d = vk_d_div_rn(a - m, b);
    if (m != 0.0LF && ((b < 0.0LF) != (m < 0.0LF))) d -= 1.0LF;
    if (d == 0.0LF) return packDouble2x32(uvec2(0u, unpackDouble2x32(vk_div(a, b)).y & 0x80000000u));
    double f = floor(d);
    return (d - f > 0.5LF) ? f + 1.0LF : f;
}

double vk_remainder(double a, double b) {
    double m = vk_fmod(a, b);
    if (b == 0.0LF) return m;
    if (m != 0.0LF) return ((b < 0.0LF) != (m < 0.0LF)) ? m + b : m;
    return packDouble2x32(uvec2(0u, unpackDouble2x32(b).y & 0x80000000u));   // as the float one
}

// atan2 (float64): as the float32 one, with fdlibm's double polynomial.
double vk_d_atanp(double t) {
    int id = -1;
    double r = t;
    if (t >= 2.4375LF) { id = 3; r = vk_div(-1.0LF, t); }
    else if (t >= 1.1875LF) { id = 2; r = vk_div(t - 1.5LF, 1.0LF + 1.5LF * t); }
    else if (t >= 0.6875LF) { id = 1; r = vk_div(t - 1.0LF, t + 1.0LF); }
    else if (t >= 0.4375LF) { id = 0; r = vk_div(2.0LF * t - 1.0LF, 2.0LF + t); }
    double z = r * r, w = z * z;
    double s1 = z * (3.33333333333329318027e-01LF + w * (1.42857142725034663711e-01LF + w * (9.09088713343650656196e-02LF + w * (6.66107313738753120669e-02LF + w * (4.97687799461593236017e-02LF + w * 1.62858201153657823623e-02LF)))));
    double s2 = w * (-1.99999999998764832476e-01LF + w * (-1.11111104054623557880e-01LF + w * (-7.69187620504482999495e-02LF + w * (-5.83357013379057348645e-02LF + w * -3.65315727442169155270e-02LF))));
    if (id < 0) return r - r * (s1 + s2);
    double hi = 4.63647609000806094e-01LF, lo = 2.26987774529616871e-17LF;
    if (id == 1) { hi = 7.85398163397448279e-01LF; lo = 3.06161699786838302e-17LF; }
    if (id == 2) { hi = 9.82793723247329054e-01LF; lo = 1.39033110312309985e-17LF; }
    if (id == 3) { hi = 1.57079632679489656e+00LF; lo = 6.12323399573676604e-17LF; }
    return hi - ((r * (s1 + s2) - lo) - r);
}

double vk_atan2(double y, double x) {
    if (isnan(x) || isnan(y)) return x + y;
    double ax = abs(x), ay = abs(y);
    double z;
    if (ay == 0.0LF) z = 0.0LF;
    else if (isinf(ax) && isinf(ay)) z = 7.85398163397448279e-01LF;
    else if (ax == 0.0LF || isinf(ay)) z = 1.57079632679489656e+00LF;
    else if (isinf(ax)) z = 0.0LF;
    else z = vk_d_atanp(vk_div(ay, ax));
    if (unpackDouble2x32(x).y >= 0x80000000u) z = 3.14159265358979312e+00LF - (z - 1.22464679914735321e-16LF);
    return (unpackDouble2x32(y).y >= 0x80000000u) ? -z : z;
}

// float32 math shared by every kernel (math64.glsl adds the double overloads).
//
// Written out instead of calling the GLSL builtins: Vulkan lets exp/log/pow be off by
// 3 + 2|x| ulp and sin/cos be arbitrary outside [-pi, pi] (lavapipe's log is 1.5e-5 off near
// 1, its sin 25 ulp off at 1e5), and erf has no builtin at all. Each function is range
// reduction + a short polynomial, accurate to 1-2 ulp over the whole float range (erf 2.0
// and erfc 6.0 at worst, every float checked by bench/tools/ulp_exhaustive.py);
// tests/vulkan/test_math.py holds the bounds.
//
// fma() is not relied on to be fused (lavapipe splits it into a multiply and an add), so
// exact products use Veltkamp/Dekker splitting; `precise` keeps the compiler from
// contracting or reordering those error-free transformations.

float vk_f_inf() { return uintBitsToFloat(0x7f800000u); }
float vk_f_nan() { return uintBitsToFloat(0x7fc00000u); }

// 2^k for k in [-126, 127], built from its bits (exp2() may be approximate)
float vk_f_pow2(int k) { return intBitsToFloat((k + 127) << 23); }

// y * 2^k with a single rounding, for y in [1/2, 2) and k in [-150, 128]: y 2^k1 is normal
// and exact (an integer add to y's exponent field), and only the multiply by 2^(k - k1) can
// leave the normal range. k >> 1, not k / 2: signed division needs a fix-up for negative k.
float vk_f_scale(float y, int k) {
    int k1 = k >> 1;
    return intBitsToFloat(floatBitsToInt(y) + (k1 << 23)) * vk_f_pow2(k - k1);
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

// x - k ln2 for k = roundEven(x / ln2), |k| <= 150: two fused multiply-adds (k * LN2_HI is
// exact, so an unfused first step rounds the same; the second only adds a rounding of the
// tiny k * LN2_LO). precise: evaluated as written, never reassociated. On a GPU that issues
// one instruction per cycle this is two instructions where the subtractions were four.
float vk_f_reduce(float x, float k) {
    precise float r1 = fma(-k, VK_F_LN2_HI, x);
    precise float r = fma(-k, VK_F_LN2_LO, r1);
    return r;
}

// exp(r) - 1 for |r| <= 0.35 as r + r^2 u(r), u a minimax fit to (exp(r) - 1 - r) / r^2 with
// float coefficients. Degree 4, fitted to the error in ulp of exp(r) (under 0.05 ulp), is
// enough where the result is 1 + p (exp, tanh): one term shorter than the Taylor series used
// before. expm1 returns p itself or cancels part of it (k = 1: p + 1/2), so it takes degree
// 5 (u within 2^-27.9 relative).
float vk_f_expm1k4(float r) {
    float u = 0.5 + r * (0.16666542 + r * (0.041667383 + r * (0.008366764 + r * 0.0013851123)));
    return r + r * r * u;
}
float vk_f_expm1k5(float r) {
    float u = 0.5 + r * (0.16666667 + r * (0.04166653 + r * (0.008333245 + r * (0.0013928752
              + r * 0.00019908798))));
    return r + r * r * u;
}

// exp(x + xl) for |xl| <= ulp(x): Cody-Waite reduction x = k ln2 + r, |r| <= ln2 / 2.
// No branches (lavapipe runs both sides of a divergent if under a lane mask, and early
// returns cost masks too): x is clamped to [-104, 89], where the scale itself rounds the
// result to 0 or inf (k = -150 or 128), and nan is put back by a select. roundEven is one
// instruction where floor(v + 0.5) is two.
float vk_f_exp2(float x, float xl) {
    float xc = min(max(x, -104.0), 89.0);
    float k = roundEven(xc * VK_F_LOG2E);
    precise float r = vk_f_reduce(xc, k) + xl;
    float e = vk_f_scale(1.0 + vk_f_expm1k4(r), int(k));
    return isnan(x) ? x : e;
}
float vk_exp(float x) {                          // vk_f_exp2(x, 0) without the + 0
    float xc = min(max(x, -104.0), 89.0);
    float k = roundEven(xc * VK_F_LOG2E);
    float r = vk_f_reduce(xc, k);
    float e = vk_f_scale(1.0 + vk_f_expm1k4(r), int(k));
    return isnan(x) ? x : e;
}

// log(1 + f) for f exactly representable, |f| <= 0.42, as hi + lo (~2^-30 relative):
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

// e ln2 + log(1 + f) + c as hi + lo, for f exactly representable with |f| <= 0.42 and
// |c| a few ulp of the result at most (a first-order correction, summed before rounding)
void vk_f_logk(int e, float f, float c, out float hi, out float lo) {
    float fh, fl;
    vk_f_log1pk(f, fh, fl);
    precise float a = float(e) * VK_F_LN2_HI;                 // exact
    precise float s = a + fh;
    precise float bb = s - a;
    precise float err = (a - (s - bb)) + (fh - bb);
    precise float t = err + (fl + (float(e) * VK_F_LN2_LO + c));
    precise float rh = s + t;
    precise float rl = t - (rh - s);
    hi = rh;
    lo = rl;
}

// x = 2^e m with m in [0x1.6a09e6p-1, 0x1.6a09e6p0) ~ [sqrt(1/2), sqrt(2)), for x normal
// and positive: subtracting m's lower end from the bits moves the binade boundary to it,
// so e and m come from one integer path (no compare and halve). m - 1 is exact.
int vk_f_logr(float x, out float m) {
    int ix = floatBitsToInt(x) - 0x3f3504f3;
    m = intBitsToFloat((ix & 0x007fffff) + 0x3f3504f3);
    return ix >> 23;
}

// log(x) as hi + lo for finite x > 0. No branches: a subnormal x is scaled by 2^24 under a
// select.
void vk_f_log2(float x, out float hi, out float lo) {
    bool sub = x < 1.17549435e-38;
    float m;
    int e = vk_f_logr(sub ? x * 16777216.0 : x, m);
    vk_f_logk(sub ? e - 24 : e, m - 1.0, 0.0, hi, lo);
}

// Branch-free: the finite positive path runs for every x and a select puts back
// log(+inf) = +inf, log(nan) = nan, log(+-0) = -inf and log(x < 0) = nan.
float vk_log(float x) {
    float hi, lo;
    vk_f_log2(x, hi, lo);
    float r = (isnan(x) || isinf(x)) ? x : hi + lo;
    return x <= 0.0 ? (x == 0.0 ? -vk_f_inf() : vk_f_nan()) : r;
}

// log1p(x) = log(u) + c / u (to first order in c) for u = 1 + x rounded and c its rounding
// error, with c / u summed into the float-float log before the one final rounding. For
// |x| < 0.29, where 1 + x cannot be used unrounded, log1p(x) is log(1 + f) with f = x itself
// (e = 0, no correction): one path for both, the reduction's inputs chosen by selects.
// u >= 2^-24 for x > -1, so it is normal. Below 2^-25, log1p(x) rounds to x (this keeps -0
// and subnormals); a select also puts back inf, nan, log1p(-1) = -inf and x < -1 -> nan.
float vk_log1p(float x) {
    precise float u = 1.0 + x;
    precise float bb = u - 1.0;
    precise float c = (1.0 - (u - bb)) + (x - bb);
    float m;
    int e = vk_f_logr(u, m);
    bool small = abs(x) < 0.29;
    float hi, lo;
    vk_f_logk(small ? 0 : e, small ? x : m - 1.0, small ? 0.0 : c / u, hi, lo);
    float r = (abs(x) < 2.98023224e-08 || isnan(x) || isinf(x)) ? x : hi + lo;
    return x <= -1.0 ? (x == -1.0 ? -vk_f_inf() : vk_f_nan()) : r;
}

// expm1 by the reduction of exp, without branches: 2^k (1 + p) - 1 = 2^k (p + (1 - 2^-k)).
// The bracket is exact for k in [-24, 24], so the sum rounds once; for k = 0 (|x| < ln2 / 2,
// r = x) the result is p itself; for k >= 25 the bracket rounds to 1, which costs at most
// 2^-25 relative. x is clamped to [-18, 89]: expm1 rounds to -1 below -17.4 (k = -26 still
// gives -1) and to inf above 88.73 (k = 128: only the last multiply may overflow).
float vk_expm1(float x) {
    float xc = min(max(x, -18.0), 89.0);
    float k = roundEven(xc * VK_F_LOG2E);
    float r = vk_f_reduce(xc, k);
    float p = vk_f_expm1k5(r);
    int ki = int(k);
    float y = p + (1.0 - vk_f_pow2(-min(ki, 126)));
    float e = (y * vk_f_pow2(ki - 1)) * 2.0;
    // below 2^-25 expm1(x) rounds to x (this keeps -0 and subnormals)
    return (abs(x) < 2.98023224e-08 || isnan(x)) ? x : e;
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

// Word i of 2/pi = sum w[i] 2^(-32 (i + 1)) (0 for i < 0, as 2/pi < 1), for the indices a
// float can need. A chain of selects, not a table: lavapipe materialises an indexed
// constant array in every invocation of the kernel, whether or not the code reading it
// runs (that made sin/cos 4-10x slower).
uint vk_two_over_pi_f(int i) {
    return i == 0 ? 0xA2F9836Eu :
           i == 1 ? 0x4E441529u :
           i == 2 ? 0xFC2757D1u :
           i == 3 ? 0xF534DDC0u :
           i == 4 ? 0xDB629599u :
           i == 5 ? 0x3C439041u :
           i == 6 ? 0xFE5163ABu :
           i == 7 ? 0xDEBBC561u :
           i == 8 ? 0xB7246E3Au :
           i == 9 ? 0x424DD2E0u : 0u;
}

// Payne-Hanek reduction, exact in integer arithmetic, for x = m 2^e (m < 2^53). With
// e = 32 (i0 + 1) + s, 0 <= s < 32, the words of 2/pi before i0 only add multiples of 2^32
// to x 2/pi; the caller passes m2:m1:m0 = m << s and a[j] = word i0 + j of 2/pi (j = 0..7),
// so that x 2/pi = (m << s) A 2^-224 with the units bit at a fixed word of the product:
// nothing is indexed by a lane's exponent. Returns the quadrant q = round(x 2/pi) mod 4
// and |x 2/pi - round(x 2/pi)| in [0, 1/2] as five words w[j] of weight 2^(-32 (j + 1)),
// exact to 2^-140; neg says x 2/pi is below round(x 2/pi). For float and double sin/cos of
// large |x|.
int vk_rem_pio2_bits(uint m0, uint m1, uint m2, uint a[8], out uint w[5], out bool neg) {
    uint p[11];                                  // little-endian words of (m << s) A
    for (int j = 0; j < 11; ++j) p[j] = 0u;
    uint m[3] = uint[3](m0, m1, m2);
    for (int r = 0; r < 3; ++r) {
        uint carry = 0u;
        for (int j = 0; j < 8; ++j) {
            uint hi, lo, c1, c2;
            umulExtended(a[7 - j], m[r], hi, lo);
            uint t = uaddCarry(lo, carry, c1);
            p[j + r] = uaddCarry(p[j + r], t, c2);
            carry = hi + c1 + c2;                // a b + c + d < 2^64: no overflow
        }
        p[8 + r] = carry;
    }
    uint q = p[7] & 3u;                          // units word; p[0], p[1] and p[8..] unused
    for (int j = 0; j < 5; ++j) w[j] = p[6 - j];
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

// m << s for m = mhi:mlo (mhi < 2^21), 0 <= s < 32, as three words
void vk_shift_mantissa(uint mhi, uint mlo, int s, out uint m0, out uint m1, out uint m2) {
    uint us = uint(s);
    m0 = mlo << us;
    m1 = s == 0 ? mhi : (mhi << us) | (mlo >> (32u - us));
    m2 = s == 0 ? 0u : mhi >> (32u - us);
}

// |x| = q pi/2 + (rh + rl) for pi/4 < |x| < 2^12 (Cody-Waite): pi/2 = P1 + P2 + P3, with
// k P1 and k P2 carried exactly (Dekker) so that cancellation near k pi/2 costs nothing.
// Several times cheaper than the Payne-Hanek path, which takes the larger arguments.
int vk_f_rem_pio2_cw(float ax, out float rh, out float rl) {
    float k = floor(ax * 0.6366197723675814 + 0.5);
    precise float p1 = k * 1.5707963705062866;
    precise float e1 = vk_f_mulerr(k, 1.5707963705062866, p1);
    precise float p2 = k * -4.371138828673793e-08;
    precise float e2 = vk_f_mulerr(k, -4.371138828673793e-08, p2);
    precise float t = ax - p1;                      // exact (Sterbenz)
    precise float s1 = t - e1;                      // TwoSum(t, -e1)
    precise float b1 = s1 - t;
    precise float a1 = (t - (s1 - b1)) + (-e1 - b1);
    precise float s2 = s1 - p2;                     // TwoSum(s1, -p2)
    precise float b2 = s2 - s1;
    precise float a2 = (s1 - (s2 - b2)) + (-p2 - b2);
    precise float lo = (a1 + a2) - (e2 + k * -1.7151245100058819e-15);
    precise float h = s2 + lo;
    precise float l = lo - (h - s2);
    rh = h;
    rl = l;
    return int(k) & 3;
}

// |x| = q pi/2 + (rh + rl) for any finite |x| > pi/4 (Payne-Hanek, vk_rem_pio2_bits)
int vk_f_rem_pio2_ph(float ax, out float rh, out float rl) {
    int bits = floatBitsToInt(ax);
    uint w[5];
    bool neg;
    int e = ((bits >> 23) & 0xff) - 150;         // ax = m 2^e, e in [-11, 104]
    int i0 = (e >> 5) - 1;
    uint a[8];
    for (int j = 0; j < 8; ++j) a[j] = vk_two_over_pi_f(i0 + j);
    uint m0, m1, m2;
    vk_shift_mantissa(0u, uint((bits & 0x7fffff) | 0x800000), e & 31, m0, m1, m2);
    int q = vk_rem_pio2_bits(m0, m1, m2, a, w, neg);
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

// sin and cos from |x| = q pi/2 + (rh + rl)
float vk_f_sinq(float x, int q, float rh, float rl) {
    float v = (q & 1) == 0 ? vk_f_sink(rh, rl) : vk_f_cosk(rh, rl);
    if (q >= 2) v = -v;
    return x < 0.0 ? -v : v;
}
float vk_f_cosq(int q, float rh, float rl) {
    float v = (q & 1) == 0 ? vk_f_cosk(rh, rl) : vk_f_sink(rh, rl);
    return (q == 1 || q == 2) ? -v : v;
}

// sin and cos of |x| < 4096 (or NaN, or an infinity): the Cody-Waite reduction only. Called directly
// where the argument is known to be that small (vulkan/lower/ranges.py proves it): the
// same bits as vk_sin / vk_cos without their Payne-Hanek path, most of their code.
float vk_sin_cw(float x) {
    float ax = abs(x);
    if (ax <= 0.785398163) return ax < 0.000244140625 ? x : vk_f_sink(x, 0.0);
    if (isnan(x) || isinf(x)) return vk_f_nan();
    float rh, rl;
    int q = vk_f_rem_pio2_cw(ax, rh, rl);
    return vk_f_sinq(x, q, rh, rl);
}

float vk_cos_cw(float x) {
    float ax = abs(x);
    if (ax <= 0.785398163) return vk_f_cosk(ax, 0.0);
    if (isnan(x) || isinf(x)) return vk_f_nan();
    float rh, rl;
    int q = vk_f_rem_pio2_cw(ax, rh, rl);
    return vk_f_cosq(q, rh, rl);
}

// v, vk_sin_cw(x) or vk_cos_cw(x), replaced past 4096 by the Payne-Hanek reduction's
// result. Large arguments are rare, but lavapipe runs a divergent if's body under a lane
// mask even when no lane takes it; written as a loop the unused path measured cheaper.
float vk_f_large(float x, float v, bool cosine) {
    float ax = abs(x);
    for (int big = (ax < 4096.0 || isinf(x) || isnan(x)) ? 0 : 1; big > 0; --big) {
        float rh, rl;
        int q = vk_f_rem_pio2_ph(ax, rh, rl);
        v = cosine ? vk_f_cosq(q, rh, rl) : vk_f_sinq(x, q, rh, rl);
    }
    return isinf(x) ? vk_f_nan() : v;
}

float vk_sin(float x) { return vk_f_large(x, vk_sin_cw(x), false); }
float vk_cos(float x) { return vk_f_large(x, vk_cos_cw(x), true); }

// tanh|x| = 1 - 2e / (1 + e) with e = exp(-2|x|) = 2^k (1 + p), k <= -1: for |x| >= 0.55
// the quotient is at most 1/2, so its rounding errors shrink in the result. Below 0.55 an
// odd minimax polynomial, x + x^3 P(x^2), within 2^-29.7 relative (no cancellation, no
// division). Both are computed and one is selected: cheaper than a divergent branch on
// lavapipe, and uniform on GPUs. |x| is clamped at 9.1, where tanh rounds to 1; the sign
// (and -0) comes back by copying x's sign bit.
float vk_tanh(float x) {
    // tanh|x| = (1 - e) / (1 + e), e = e^-2|x| = s + sp (s = 2^k, sp = s expm1(r)), with
    // 1 - e formed as (1 - s) - sp so that small |x| does not cancel: one path for every
    // |x| (two paths and a select cost a GPU ~30% more instructions), 1.94 ulp at worst
    // over every float in [1e-20, 9.2] (the two-path form was 1.51).
    float ax = min(abs(x), 9.1);                // tanh(9.1) rounds to 1
    float y = -2.0 * ax;
    float k = roundEven(y * VK_F_LOG2E);        // k in [-26, 0]: 2^k is normal
    float r = vk_f_reduce(y, k);
    float s = vk_f_pow2(int(k));
    float sp = s * vk_f_expm1k5(r);             // exact scaling: e^y = s + sp
    precise float num = (1.0 - s) - sp;         // 1 - s, 1 + s exact (k >= -23); precise:
    precise float den = (1.0 + s) + sp;         // never 1 - (s + sp), which cancels
    float t = abs(num) / den;
    return isnan(x) ? x : uintBitsToFloat(floatBitsToUint(t) | (floatBitsToUint(x) & 0x80000000u));
}

// 1 / (1 + exp(-x)) for x >= 0, exp(x) / (1 + exp(x)) below: one exp of -|x| (never
// overflows) and one division, selected rather than branched (nan: e is nan)
float vk_sigmoid(float x) {
    float e = vk_exp(-abs(x));
    return (x >= 0.0 ? 1.0 : e) / (1.0 + e);
}

// erfc: W. J. Cody's rational approximations in the Chebyshev form used by Numerical
// Recipes' erfc (28 coefficients, good to double precision; math64.glsl uses all of them).
// z^2 = hi + lo is split exactly and the exponent summed in hi + lo, since rounding z^2 alone
// would cost |z|^2 ulp. No branches: erf and erfc compute both the series (erf below 0.75,
// erfc below 0.5) and the Chebyshev form on |x| clamped to 10.1 and select one (the series
// is ~13 operations, the Chebyshev form with its exp ~100), then put nan back by a select.

// erf by its Maclaurin series (erf below 0.75, erfc below 0.5), which avoids the 1 - erfc
// cancellation near 0; through x^19, whose next term is under 0.01 ulp at 0.75
// (-0 comes out +0: vk_erf copies x's sign bit, vk_erfc takes 1 - it)
float vk_erf_series(float x) {
    float x2 = x * x;
    float p = x2 * (-0.37612638903183754 + x2 * (0.11283791670955126
              + x2 * (-0.026866170645131252 + x2 * (0.005223977625442188
              + x2 * (-0.0008548327023450853 + x2 * (0.00012055332981789664
              + x2 * (-1.492565035840625e-05 + x2 * (1.6462114365889246e-06
              + x2 * -1.6365844691234924e-07))))))));
    // 2/sqrt(pi) = 1.128379225730896 - 5.8635383e-08: the float constant alone is 0.4 ulp off
    precise float r = x * 1.128379225730896 + x * (-5.8635383e-08 + p);   // precise: no refactoring
    return r;
}

// erfc(z) for z in [0, 10.1]: rounds to 0 above 10.0468, so clamping z at 10.1 gives
// erfc(+inf) = 0 (and 2 for x < 0), and 1 - it gives erf = 1 (erfc(z) < 2^-25 from z = 4)
float vk_f_erfck(float z) {
    float t = 2.0 / (2.0 + z);
    float ty = 4.0 * t - 2.0;
    // Clenshaw's recurrence written out (an indexed constant array costs every invocation
    // on lavapipe); only the first 16 coefficients matter in float
    float b15 = -2.27365122e-10; float b14 = ty * b15 + -9.91364156e-10;
    float b13 = ty * b14 - b15 + 5.059343495e-9;
    float b12 = ty * b13 - b14 + 6.529054439e-9; float b11 = ty * b12 - b13 + -8.5238095915e-8;
    float b10 = ty * b11 - b12 + 1.5626441722e-8;
    float b9 = ty * b10 - b11 + 1.303655835580e-6; float b8 = ty * b9 - b10 + -1.624290004647e-6;
    float b7 = ty * b8 - b9 + -2.0278578112534e-5;
    float b6 = ty * b7 - b8 + 4.2523324806907e-5; float b5 = ty * b6 - b7 + 3.66839497852761e-4;
    float b4 = ty * b5 - b6 + -9.46595344482036e-4;
    float b3 = ty * b4 - b5 + -9.561514786808631e-3; float b2 = ty * b3 - b4 + 1.9476473204185836e-2;
    float b1 = ty * b2 - b3 + 6.4196979235649026e-1;
    float zh = z * z;
    float zl = vk_f_mulerr(z, z, zh);
    // exp(-zh + E - zl) with -zh + E summed exactly (TwoSum) and handed to exp as hi + lo
    precise float E = 0.5 * (-1.3026537197817094 + ty * b1) - b2;
    precise float sh = E - zh;
    precise float bb = sh - E;
    precise float sl = ((E - (sh - bb)) + (-zh - bb)) - zl;
    return t * vk_f_exp2(sh, sl);
}

// |x| < 0.5: 1 - erf(x), no cancellation (erf(x) < 0.53); else erfc|x| or 2 - erfc|x|
float vk_erfc(float x) {
    float z = min(abs(x), 10.1);               // nan: either operand, replaced at the end
    float r = vk_f_erfck(z);
    float s = vk_erf_series(clamp(x, -0.5, 0.5));
    float e = z < 0.5 ? 1.0 - s : (x >= 0.0 ? r : 2.0 - r);
    return isnan(x) ? x : e;
}

// erf|x| (series below 0.75, else 1 - erfc|x|) with x's sign bit copied on, which keeps -0.
// The series' value at z >= 0.75 is finite and never selected. (With the seam at 0.5,
// 1 - erfc reached 3.06 ulp at 0.513.)
float vk_erf(float x) {
    float z = min(abs(x), 10.1);
    float e = z < 0.75 ? vk_erf_series(z) : 1.0 - vk_f_erfck(z);
    return isnan(x) ? x : uintBitsToFloat(floatBitsToUint(e) | (floatBitsToUint(x) & 0x80000000u));
}

// int32 x ** y by binary exponentiation, wrapping like NumPy's; y < 0 (NumPy refuses it,
// a traced exponent cannot be refused) is the truncated 1 / x ** -y
int vk_ipow(int a, int b) {
    if (b < 0) return (a == 1) ? 1 : ((a == -1) ? (((b & 1) != 0) ? -1 : 1) : 0);
    int r = 1;
    while (b > 0) {
        if ((b & 1) != 0) r *= a;
        a *= a;
        b >>= 1;
    }
    return r;
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

// Vulkan's OpFDiv precision holds only for |b| in [2^-126, 2^126]; NVIDIA computes a * rcp(b),
// which turns inf / 3e38 into nan. Scaling both operands by 1/4 keeps huge divisors in range.
// Vulkan guarantees a / b only for |b| in [2^-126, 2^126]: larger divisors are scaled
// down, subnormal ones up, and a zero divisor gives IEEE's inf or nan from bits (lavapipe
// folded x / 0.0 with a literal 0 to 0)
float vk_div(float a, float b) {
    float ab = abs(b);
    if (ab > 8.507059e37) return (a * 0.25) / (b * 0.25);
    if (ab < 1.17549435e-38) {
        if (ab != 0.0) return (a * 16777216.0) / (b * 16777216.0);
        if (isnan(a) || a == 0.0) return vk_f_nan();
        return uintBitsToFloat(((floatBitsToUint(a) ^ floatBitsToUint(b)) & 0x80000000u) | 0x7f800000u);
    }
    return a / b;
}

// C's fmod, exactly: |x| reduced by |y| * 2^k for k from the largest that fits down to 0.
// Each subtraction has t <= r < 2t, so it is exact (Sterbenz); at most ~280 steps.
float vk_fmod(float x, float y) {
    float ax = abs(x), ay = abs(y);
    if (isnan(x) || isnan(y) || isinf(x) || ay == 0.0) return vk_f_nan();
    if (!(ax >= ay)) return x;
    float t = ay;
    while (t + t <= ax) t += t;
    float r = ax;
    while (t >= ay) { if (r >= t) r -= t; t *= 0.5; }
    return x < 0.0 ? -r : r;
}

// NumPy's floor division and remainder (npy_divmod): from the exact fmod, the quotient
// (a - mod) / b snapped to an integer, the remainder with the divisor's sign; b == 0
// gives a / b and nan.
// x / y rounded to nearest, as NumPy's division is: Vulkan lets a division be 2.5 ulp off
// (NVIDIA's is), which past 2^24 moves a floor quotient to another integer. The mantissas
// are divided, and of the approximate quotient and its neighbours the one with the least
// exact residual |xm - q ym| (Dekker) is taken, the even one on a tie; the exponents are
// put back exactly. Zeros, infinities, nan and subnormals take plain division.
float vk_f_div_rn(float x, float y) {
    float ax = abs(x), ay = abs(y);
    if (!(ax >= 1.17549435e-38 && ay >= 1.17549435e-38) || isinf(ax) || isinf(ay)) return vk_div(x, y);
    int ex, ey;
    float xm = frexp(ax, ex), ym = frexp(ay, ey);
    float q = xm / ym;
    float best = q, br = vk_f_inf();
    for (int i = -2; i <= 2; i++) {
        float c = uintBitsToFloat(uint(int(floatBitsToUint(q)) + i));
        precise float p = c * ym;
        precise float r = abs((xm - p) - vk_f_mulerr(c, ym, p));
        if (r < br || (r == br && (floatBitsToUint(c) & 1u) == 0u)) { best = c; br = r; }
    }
    float res = ldexp(best, ex - ey);
    return ((x < 0.0) != (y < 0.0)) ? -res : res;
}

float vk_floordiv(float a, float b) {
    if (b == 0.0) return vk_div(a, b);
    float m = vk_fmod(a, b);
    float d = vk_f_div_rn(a - m, b);
    if (m != 0.0 && ((b < 0.0) != (m < 0.0))) d -= 1.0;
    // signed zeros from integer bits: a device need not keep the sign of a float zero
    // constant (no SignedZeroInfNanPreserve), and NVIDIA folds a select of +0 and -0 to -0
    if (d == 0.0) return uintBitsToFloat(floatBitsToUint(vk_div(a, b)) & 0x80000000u);
    float f = floor(d);
    return (d - f > 0.5) ? f + 1.0 : f;
}

float vk_remainder(float a, float b) {
    float m = vk_fmod(a, b);
    if (b == 0.0) return m;
    if (m != 0.0) return ((b < 0.0) != (m < 0.0)) ? m + b : m;
    return uintBitsToFloat(floatBitsToUint(b) & 0x80000000u);   // zero with b's sign
}

// atan2 (float32): fdlibm's atan reduced to |r| < 7/16 around atan(0.5), atan(1), atan(1.5)
// and atan(inf) (each reduction is exact or one rounding), with the constants split hi + lo;
// then C99's quadrants. x < 0 gives pi - z with z <= pi/2, so nothing cancels.
float vk_f_atanp(float t) {
    int id = -1;
    float r = t;
    if (t >= 2.4375) { id = 3; r = vk_div(-1.0, t); }
    else if (t >= 1.1875) { id = 2; r = (t - 1.5) / (1.0 + 1.5 * t); }
    else if (t >= 0.6875) { id = 1; r = (t - 1.0) / (t + 1.0); }
    else if (t >= 0.4375) { id = 0; r = (2.0 * t - 1.0) / (2.0 + t); }
    float z = r * r, w = z * z;
    float s1 = z * (3.3333328366e-01 + w * (1.4253635705e-01 + w * 6.1687607318e-02));
    float s2 = w * (-1.9999158382e-01 + w * -1.0648017377e-01);
    if (id < 0) return r - r * (s1 + s2);
    float hi = 4.636476040e-01, lo = 5.012158688e-09;
    if (id == 1) { hi = 7.853981853e-01; lo = -2.185569414e-08; }
    if (id == 2) { hi = 9.827937484e-01; lo = -2.513142405e-08; }
    if (id == 3) { hi = 1.570796371e+00; lo = -4.371138829e-08; }
    return hi - ((r * (s1 + s2) - lo) - r);
}

float vk_atan2(float y, float x) {
    if (isnan(x) || isnan(y)) return x + y;
    float ax = abs(x), ay = abs(y);
    float z;
    if (ay == 0.0) z = 0.0;
    else if (isinf(ax) && isinf(ay)) z = 7.853981853e-01;
    else if (ax == 0.0 || isinf(ay)) z = 1.570796371e+00;
    else if (isinf(ax)) z = 0.0;
    else z = vk_f_atanp(vk_div(ay, ax));
    // the sign bits, so that -0 counts as negative (atan2(0, -0) is pi)
    if (floatBitsToUint(x) >= 0x80000000u) z = 3.141592741e+00 - (z - -8.742277657e-08);
    return (floatBitsToUint(y) >= 0x80000000u) ? -z : z;
}

// gcd of int32 by Euclid on magnitudes (abs(INT_MIN) stays INT_MIN, as NumPy's; after the
// first step the remainder is non-negative: C's % of INT_MIN by b > 0 is in (-b, 0], made
// non-negative by the sign fix-up); at most 46 steps
int vk_gcd(int a, int b) {
    a = abs(a); b = abs(b);
    while (b != 0) {
        int r = a - (a / b) * b;
        if (r < 0) r += b;
        a = b; b = r;
    }
    return a;
}

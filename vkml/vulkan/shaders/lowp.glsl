// float16 and bfloat16 as float32 values: the conversions of 16-bit storage.
// A 16-bit value is held by kernels as the float32 of the same number (exact: both are
// subsets of float32). A store rounds a float32 result to the 16-bit dtype (lp_to_*:
// round to nearest, ties to even, by bit operations, so no float rounding mode is
// assumed; NaN stays NaN, quieted); lp_round_* is that rounding as a float32 value
// (an explicit Cast, and every operator where the profile rounds each one).

// bfloat16: the upper half of a float32
float lp_from_bf16(uint b) { return uintBitsToFloat(b << 16); }
uint lp_to_bf16(float x) {
  uint u = floatBitsToUint(x);
  uint r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return isnan(x) ? ((u >> 16) | 0x40u) : r;
}
float lp_round_bf16(float x) { return uintBitsToFloat(lp_to_bf16(x) << 16); }

// float16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; subnormals below 2^-14.
// Widening is unpackHalf2x16 (exact; one vcvtph2ps on lavapipe). Narrowing is written
// out: packHalf2x16 and float16_t(x) need not round to nearest, and lavapipe's truncate,
// saturate and are not native there either (no vcvtps2ph: a longer integer sequence).
// Each operation costs about as much as the kernel's arithmetic on lavapipe, so this
// is the shortest exact form found (17 operations per element).
float lp_from_f16(uint h) { return unpackHalf2x16(h).x; }
uint lp_to_f16(float x) {
  uint u = floatBitsToUint(x), a = u & 0x7FFFFFFFu, e = a >> 13;
  // normal: rebias the exponent (- 112 << 23), round the 13 dropped bits to nearest even
  // (+ 0xFFF + the kept lsb); from 65520 up (and infinity) the min gives 0x7C00, inf
  uint n = min((a + 0xC8000FFFu + (e & 1u)) >> 13, 0x7C00u);
  // subnormal (|x| < 2^-14): one float add aligns the bits at 2^-24, rounding to nearest
  // even (precise: the add and subtract are not folded away)
  precise float t = uintBitsToFloat(a) + 0.5;
  uint h = a < 0x38800000u ? floatBitsToUint(t) - 0x3F000000u : n;
  // NaN stays NaN: quieted, the payload's top 10 bits kept (as F16C's conversion)
  h = a > 0x7F800000u ? (e | 0x200u) - 0x38000u : h;
  return ((u >> 16) & 0x8000u) | h;
}
float lp_round_f16(float x) { return unpackHalf2x16(lp_to_f16(x)).x; }

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
// Widening is unpackHalf2x16 (exact); narrowing is written out (packHalf2x16 need not
// round to nearest: lavapipe's truncates and saturates).
float lp_from_f16(uint h) { return unpackHalf2x16(h).x; }
uint lp_to_f16(float x) {
  uint u = floatBitsToUint(x), s = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
  // normal: rebias the exponent, round the 13 dropped bits to nearest even
  uint n = (a - 0x37FFF001u + ((a >> 13) & 1u)) >> 13;      // - (112 << 23) + 0xFFF
  // subnormal (|x| < 2^-14): one float add aligns the bits at 2^-24, rounding to nearest
  // even (precise: the add and subtract are not folded away)
  precise float t = uintBitsToFloat(a) + 0.5;
  uint sub = floatBitsToUint(t) - 0x3F000000u;
  uint r = a < 0x38800000u ? sub : (a >= 0x477FF000u ? 0x7C00u : n);   // >= 65520: inf
  return s | (a > 0x7F800000u ? (0x7E00u | ((a >> 13) & 0x3FFu)) : r);
}
float lp_round_f16(float x) { return unpackHalf2x16(lp_to_f16(x)).x; }

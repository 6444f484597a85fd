// float16 and bfloat16 as float32 values: the conversions of 16-bit storage.
// A 16-bit value is held by kernels as the float32 of the same number (exact: both are
// subsets of float32); an operator computes in float32 and rounds its result once with
// lp_round_* (round to nearest, ties to even, by bit operations, so no device feature or
// float rounding mode is assumed); a store takes the bits of a value already rounded.

// bfloat16: the upper half of a float32
float lp_from_bf16(uint b) { return uintBitsToFloat(b << 16); }
float lp_round_bf16(float x) {
  uint u = floatBitsToUint(x);
  if (isnan(x)) return uintBitsToFloat((u | 0x00400000u) & 0xFFFF0000u);   // quiet, sign kept
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uintBitsToFloat(u & 0xFFFF0000u);
}
uint lp_bits_bf16(float x) { return floatBitsToUint(x) >> 16; }   // x already a bfloat16

// float16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; subnormals below 2^-14
float lp_from_f16(uint h) {
  uint s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1Fu) return uintBitsToFloat(s | 0x7F800000u | (m << 13));
  if (e == 0u) return uintBitsToFloat(s | floatBitsToUint(float(m) * 5.9604644775390625e-8));
  return uintBitsToFloat(s | ((e + 112u) << 23) | (m << 13));
}
float lp_round_f16(float x) {
  uint u = floatBitsToUint(x), s = u & 0x80000000u, a = u & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) return isnan(x) ? uintBitsToFloat(u | 0x00400000u) : x;
  if (a >= 0x477FF000u) return uintBitsToFloat(s | 0x7F800000u);    // >= 65520: rounds to inf
  if (a >= 0x38800000u) {                                            // normal: 13 bits dropped
    a += 0xFFFu + ((a >> 13) & 1u);
    return uintBitsToFloat(s | (a & 0xFFFFE000u));
  }
  // subnormal: a multiple of 2^-24, the significand shifted by 13 + (-14 - exponent)
  int d = 126 - int(a >> 23);          // drop = 13 + (-14 - (e - 127)) = 126 - e
  if (d > 24) return uintBitsToFloat(s);
  uint m = (a & 0x7FFFFFu) | 0x800000u;
  uint r = (m + ((1u << uint(d - 1)) - 1u) + ((m >> uint(d)) & 1u)) >> uint(d);
  return uintBitsToFloat(s | floatBitsToUint(float(r) * 5.9604644775390625e-8));
}
uint lp_bits_f16(float x) {                                          // x already a float16
  uint u = floatBitsToUint(x), s = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) return s | 0x7C00u | ((a >> 13) & 0x3FFu) | (a > 0x7F800000u ? 0x200u : 0u);
  if (a >= 0x38800000u) return s | ((a - 0x38000000u) >> 13);
  return s | uint(abs(x) * 16777216.0);                              // subnormal: exact
}

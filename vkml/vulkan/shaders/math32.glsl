// float32 math shared by kernels. GLSL builtins where Vulkan's precision is adequate;
// our own where a builtin is missing (erf) or overflows (tanh, sigmoid for large |x|).
float vk_exp(float x) { return exp(x); }
float vk_log(float x) { return log(x); }
float vk_log1p(float x) {
    // log1p(x) = log(u) * x / (u - 1) with u = 1 + x cancels the rounding of u (Goldberg)
    float u = 1.0 + x;
    if (u == 1.0) return x;
    if (isinf(u)) return u;
    return log(u) * (x / (u - 1.0));
}
float vk_expm1(float x) {
    if (abs(x) < 1e-5) return x + 0.5 * x * x + x * x * x / 6.0;
    if (abs(x) < 0.5) {
        // expm1 = (u - 1) * x / log(u) with u = exp(x) (Kahan)
        float u = exp(x);
        if (u == 1.0) return x;
        float um1 = u - 1.0;
        return um1 * x / log(u);
    }
    return exp(x) - 1.0;
}
float vk_sin(float x) { return sin(x); }
float vk_cos(float x) { return cos(x); }
float vk_tanh(float x) {
    float ax = abs(x);
    if (ax > 9.0) return sign(x);
    if (ax < 0.0004) return x;
    float e = vk_expm1(2.0 * ax);
    return sign(x) * e / (e + 2.0);
}
float vk_sigmoid(float x) {
    if (x >= 0.0) { return 1.0 / (1.0 + exp(-x)); }
    float e = exp(x);
    return e / (1.0 + e);
}
// erf and erfc: W. J. Cody's rational approximations in the form used by Numerical
// Recipes' erfc (Chebyshev fit), relative error below 1.2e-7 everywhere.
float vk_erfc(float x) {
    float z = abs(x);
    float t = 2.0 / (2.0 + z);
    float ty = 4.0 * t - 2.0;
    // Chebyshev coefficients of erfc(z) * exp(z*z) * (2 + z) / 2 on t in [0, 1]
    const float c[28] = float[28](
        -1.3026537197817094, 6.4196979235649026e-1, 1.9476473204185836e-2,
        -9.561514786808631e-3, -9.46595344482036e-4, 3.66839497852761e-4,
        4.2523324806907e-5, -2.0278578112534e-5, -1.624290004647e-6,
        1.303655835580e-6, 1.5626441722e-8, -8.5238095915e-8, 6.529054439e-9,
        5.059343495e-9, -9.91364156e-10, -2.27365122e-10, 9.6467911e-11,
        2.394038e-12, -6.886027e-12, 8.94487e-13, 3.13092e-13, -1.12708e-13,
        3.81e-16, 7.106e-15, -1.523e-15, -9.4e-17, 1.21e-16, -2.8e-17);
    float d = 0.0, dd = 0.0;
    for (int j = 27; j > 0; j--) { float tmp = d; d = ty * d - dd + c[j]; dd = tmp; }
    float r = t * exp(-z * z + 0.5 * (c[0] + ty * d) - dd);
    return x >= 0.0 ? r : 2.0 - r;
}
float vk_erf(float x) {
    if (abs(x) < 0.5) {
        // Maclaurin series avoids 1 - erfc cancellation near 0
        float x2 = x * x;
        return x * (1.1283791670955126 + x2 * (-0.37612638903183754 + x2 * (0.11283791670955126
               + x2 * (-0.026866170645131252 + x2 * (0.005223977625442188 + x2 * -0.0008548327023450852)))));
    }
    return 1.0 - vk_erfc(x);
}
float vk_pow(float a, float b) {
    if (b == 0.0) return 1.0;
    if (a < 0.0 && b == floor(b)) {
        float r = pow(-a, b);
        return mod(b, 2.0) == 1.0 ? -r : r;
    }
    if (a == 0.0) return b > 0.0 ? 0.0 : (1.0 / 0.0);
    return pow(a, b);
}

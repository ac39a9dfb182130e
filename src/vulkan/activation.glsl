// A routed expert's activation of its gate and up values, as
// backend/activation.cpp computes it (its expressions and their order):
// elementwise.comp's modes 3-5, and the grouped products that apply it to
// their input as they load it (the down products, GROUPED builds).
#define ACT_SILU_GLU 3u       // g / (1 + e^-g) · u
#define ACT_CLAMPED_SWIGLU 4u  // gpt-oss's: a = limit, b = alpha
#define ACT_SITU 5u           // Kimi K3's SiTU: a = beta, b = linear_beta

float activate(uint mode, float gate, float up, float a, float b) {
  if (mode == ACT_SILU_GLU) {
    precise float d = 1.0 + exp(-gate);
    precise float v = gate / d * up;
    return v;
  }
  if (mode == ACT_CLAMPED_SWIGLU) {
    const float g = min(gate, a);
    const float u = clamp(up, -a, a);
    precise float ga = g * b;
    precise float v = (u + 1.0) * (g * sigmoid(ga));
    return v;
  }
  precise float ta = gate / a;
  precise float act = a * tanh_f(ta) * sigmoid(gate);
  precise float tu = up / b;
  precise float v = act * (b * tanh_f(tu));
  return v;
}

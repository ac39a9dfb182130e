#version 450
// Elementwise ops over `count` values (backend.h): 0 add y += x; 1 copy
// y = x; 2 y *= sigmoid(x); 3 SiLU GLU y = y / (1 + e^-y) · x; 4 gpt-oss's
// clamped SwiGLU (a = limit, b = alpha); 5 Kimi K3's SiTU (a = beta, b =
// linear_beta); 6 split z's alternating gate, up values into y (gate) and x
// (up). The expressions and their order are backend/activation.cpp's.
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
  Floats y;
  Floats x;
  Floats z;
  uint count;
  uint mode;
  float a;
  float b;
} p;

void main() {
  const uint stride = gl_NumWorkGroups.x * 256;
  for (uint i = gl_GlobalInvocationID.x; i < p.count; i += stride) {
    if (p.mode == 0) {
      precise float v = p.y.v[i] + p.x.v[i];
      p.y.v[i] = v;
    } else if (p.mode == 1) {
      p.y.v[i] = p.x.v[i];
    } else if (p.mode == 2) {
      precise float v = p.y.v[i] * sigmoid(p.x.v[i]);
      p.y.v[i] = v;
    } else if (p.mode == 3) {
      const float g = p.y.v[i];
      precise float d = 1.0 + exp(-g);
      precise float v = g / d * p.x.v[i];
      p.y.v[i] = v;
    } else if (p.mode == 4) {
      const float g = min(p.y.v[i], p.a);
      const float u = clamp(p.x.v[i], -p.a, p.a);
      precise float ga = g * p.b;
      precise float v = (u + 1.0) * (g * sigmoid(ga));
      p.y.v[i] = v;
    } else if (p.mode == 5) {
      const float g = p.y.v[i];
      precise float ta = g / p.a;
      precise float act = p.a * tanh_f(ta) * sigmoid(g);
      precise float tu = p.x.v[i] / p.b;
      precise float v = act * (p.b * tanh_f(tu));
      p.y.v[i] = v;
    } else {
      p.y.v[i] = p.z.v[2 * i];
      p.x.v[i] = p.z.v[2 * i + 1];
    }
  }
}

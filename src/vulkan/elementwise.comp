#version 450
// Elementwise ops over `count` values (backend.h): 0 add y += x; 1 copy
// y = x; 2 y *= sigmoid(x); 3 SiLU GLU y = y / (1 + e^-y) · x; 4 gpt-oss's
// clamped SwiGLU (a = limit, b = alpha); 5 Kimi K3's SiTU (a = beta, b =
// linear_beta); 6 split z's alternating gate, up values into y (gate) and x
// (up). The expressions and their order are backend/activation.cpp's.
#include "common.glsl"
#include "activation.glsl"

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
    } else if (p.mode <= 5) {
      p.y.v[i] = activate(p.mode, p.y.v[i], p.x.v[i], p.a, p.b);
    } else {
      p.y.v[i] = p.z.v[2 * i];
      p.x.v[i] = p.z.v[2 * i + 1];
    }
  }
}

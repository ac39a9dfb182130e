// What every shader of the Vulkan backend shares: memory is reached by
// device address (buffer_reference), never by descriptor, so an op's push
// constants name every array it touches. Every result that the backend's
// bits depend on is `precise`: no contraction of a * b + c into one fused
// operation, no reassociation; where the CPU's expression is a fused
// multiply-add, the shader writes fma().
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require

// Loads a tiled kernel's loading loop issues together before storing them
// to shared memory: more wait on memory fewer times, fewer leave registers
// for more workgroups at once (measured on the H200: docs/PERFORMANCE.md).
#define LOADS_AT_ONCE 4u

layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Ints { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Uints { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer Halves { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 1) readonly buffer Bytes { uint8_t v[]; };

// A workgroup barrier after which one invocation's writes to device memory
// are seen by the others (barrier() alone orders shared variables only):
// for ops whose invocations hand each other results through a buffer.
void sync_workgroup() {
  memoryBarrierBuffer();
  barrier();
}

// The device address `bytes` past `a` (addresses as uvec2: low, high word).
uvec2 address_plus(uvec2 a, uint bytes) {
  uint carry;
  const uint low = uaddCarry(a.x, bytes, carry);
  return uvec2(low, a.y + carry);
}

float f16_value(uint h) { return unpackHalf2x16(h).x; }
float bf16_value(uint h) { return uintBitsToFloat(h << 16); }

float sigmoid(float x) {
  precise float d = 1.0 + exp(-x);
  return 1.0 / d;
}

// tanh for every x: drivers may compute it from exponentials that overflow
// (inf / inf) past |x| ~ 44; |x| >= 15 rounds to ±1 in f32 anyway.
float tanh_f(float x) { return tanh(clamp(x, -15.0, 15.0)); }

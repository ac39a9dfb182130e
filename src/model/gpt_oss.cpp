// gpt-oss: grouped-query attention with sinks and alternating sliding-window
// layers, and experts with a clamped SwiGLU whose gate and up projections are
// fused (rows interleaved gate, up, gate, up...) and carry biases. Experts
// come as MXFP4 (`*_blocks` + `*_scales`, as OpenAI ships them) or as BF16
// tensors stored [in, out] (transformers' save_pretrained). See docs/gpt_oss.md.
#include <cstring>
#include <deque>

#include "model/model.h"
#include "util/error.h"

namespace strata {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

const TensorView& expect(const TensorSource& src, const std::string& name, const std::vector<int64_t>& shape,
                         std::initializer_list<DType> types) {
  const TensorView& t = src.get(name);
  if (t.shape != shape)
    throw Error(t.file + ": tensor '" + name + "' has shape " + shape_str(t.shape) + " but the config implies " +
                shape_str(shape));
  for (DType d : types)
    if (t.dtype == d) return t;
  throw Error(t.file + ": tensor '" + name + "' has unsupported type " + dtype_name(t.dtype));
}

float load_scalar(const TensorView& t, size_t i) {
  uint16_t h;
  switch (t.dtype) {
    case DType::F32: {
      float f;
      std::memcpy(&f, t.data + 4 * i, 4);
      return f;
    }
    case DType::BF16: std::memcpy(&h, t.data + 2 * i, 2); return bf16_to_f32(h);
    default: std::memcpy(&h, t.data + 2 * i, 2); return f16_to_f32(h);
  }
}

// Binds gpt-oss experts; owns what had to be converted (biases to f32, and
// the [in, out] BF16 layout turned into rows of outputs).
class GptOssExperts {
 public:
  GptOssExperts(const TensorSource& src, const ModelConfig& c) : src_(src), c_(c), binder_(src, c) {}

  ExpertWeights bind(int64_t l, int64_t e) {
    const int64_t H = c_.hidden_size, I = c_.moe_intermediate_size;
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
    ExpertWeights w;
    const std::string one = p + std::to_string(e) + ".";
    if (src_.find(one + "gate_proj.weight")) {
      // GGUF (through its HF view): gate and up de-interleaved into separate
      // per-expert tensors, each with its bias.
      w.gate = binder_.linear(one + "gate_proj", I, H, true);
      w.up = binder_.linear(one + "up_proj", I, H, true);
      w.down = binder_.linear(one + "down_proj", H, I, true);
      return w;
    }
    w.gate_up = c_.mxfp4_experts ? binder_.mxfp4(p + "gate_up_proj", e, 2 * I, H)
                                 : transposed(p + "gate_up_proj", e, H, 2 * I);
    w.down = c_.mxfp4_experts ? binder_.mxfp4(p + "down_proj", e, H, I) : transposed(p + "down_proj", e, I, H);
    w.gate_up.bias = bias(p + "gate_up_proj_bias", e, 2 * I);
    w.down.bias = bias(p + "down_proj_bias", e, H);
    return w;
  }

 private:
  // `<name>` [E, in, out] in BF16/F16/F32: copied once into [out, in] rows,
  // the layout the kernels read (no change of precision).
  kernels::WeightMatrix transposed(const std::string& name, int64_t e, int64_t in, int64_t out) {
    const int64_t E = c_.n_routed_experts;
    const TensorView& t = expect(src_, name, {E, in, out}, {DType::BF16, DType::F16, DType::F32});
    const size_t elem = dtype_size(t.dtype);
    auto& buf = owned_bytes_.emplace_back(static_cast<size_t>(in * out) * elem);
    const uint8_t* base = t.data + static_cast<size_t>(e * in * out) * elem;
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o)
        std::memcpy(&buf[(o * in + i) * elem], base + (i * out + o) * elem, elem);
    kernels::WeightMatrix w;
    w.dtype = t.dtype;
    w.out = out;
    w.in = in;
    w.data = buf.data();
    return w;
  }

  const float* bias(const std::string& name, int64_t e, int64_t n) {
    const TensorView& t = expect(src_, name, {c_.n_routed_experts, n}, {DType::BF16, DType::F16, DType::F32});
    auto& v = owned_floats_.emplace_back(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = load_scalar(t, static_cast<size_t>(e * n + i));
    return v.data();
  }

  const TensorSource& src_;
  const ModelConfig& c_;
  WeightBinder binder_;
  std::deque<std::vector<uint8_t>> owned_bytes_;
  std::deque<std::vector<float>> owned_floats_;
};

}  // namespace

ExpertBindFn gpt_oss_experts(const TensorSource& src, const ModelConfig& c) {
  auto experts = std::make_shared<GptOssExperts>(src, c);
  return [experts](int64_t l, int64_t e) { return experts->bind(l, e); };
}

Layer bind_gpt_oss_layer(WeightBinder& w, const ModelConfig& c, int64_t l, ExpertProvider& experts) {
  const std::string p = "model.layers." + std::to_string(l);
  Layer layer;
  layer.attn_norm = w.vector(p + ".input_layernorm.weight", c.hidden_size);
  layer.mlp_norm = w.vector(p + ".post_attention_layernorm.weight", c.hidden_size);
  layer.attention = make_gqa_attention(w, c, p + ".self_attn", l);
  ExpertActivation act;
  act.kind = ExpertActivation::Kind::ClampedSwiGlu;
  act.limit = static_cast<float>(c.swiglu_limit);
  layer.moe = std::make_unique<MoeBlock>(l, c, make_topk_softmax_router(w, c, p + ".mlp.router"), std::nullopt,
                                         experts, act);
  return layer;
}

}  // namespace strata

#pragma once
// strata synth: random-weight checkpoints of any size in the real formats
// (docs/synth.md). A Plan is everything about the model to write (config,
// tensor list with names, types and shapes, output files and their exact
// sizes); write() streams it to disk in constant memory:
//
//   synth::Request r;
//   r.preset = "qwen3-30b-a3b";
//   r.size_gb = 10;
//   r.format = synth::Format::Gguf;
//   r.quant = "q8_0+mxfp4";
//   synth::Plan p = synth::make_plan(r);   // throws strata::Error on bad input
//   std::cout << synth::describe(p);
//   synth::write(p, "/models/qwen-10g.gguf", {});
//
// Presets (presets.cpp) are the released configs of the models they are named
// after; --size shrinks them (shape.cpp) keeping the shape class: experts per
// token, head width, GQA ratio, MLA head dims, the proportions of ranks and
// widths to the hidden size. Tensors are laid out exactly as the real
// checkpoints are (tensor_plan.cpp) and filled with seeded random values
// generated directly in the stored (possibly quantized) domain (fill.cpp).
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/dtype.h"
#include "model/model_config.h"

namespace strata::synth {

enum class Format { Safetensors, Gguf };

std::optional<Arch> arch_from_name(std::string_view name);

// What --quant picked: the stored type of the big trunk matrices (embedding,
// output head, attention, dense and shared-expert MLPs) and of the routed
// experts. Norms, biases, sinks and routers are never quantized.
//   safetensors: BF16/F16/F32 everywhere; F8_E4M3 = DeepSeek-V3's FP8 (every
//   linear inside the layers, router excepted, with 128x128 weight_scale_inv;
//   embedding and head stay BF16); experts U8 = gpt-oss MXFP4 (_blocks +
//   _scales, the rest BF16).
//   gguf: any of F32, F16, BF16, Q8_0, Q4_K, Q6_K, MXFP4 for each part; a
//   matrix whose rows are not whole blocks of its type falls back to Q8_0,
//   then F16 (Plan::notes says which).
struct Quant {
  std::string spec;  // normalized, e.g. "q8_0+mxfp4"
  DType trunk = DType::BF16;
  DType experts = DType::BF16;
};
Quant parse_quant(std::string_view spec, Format format, Arch arch);
std::string default_quant(Format format);

struct Preset {
  std::string name;
  Arch arch;
  std::string description;
  nlohmann::json config;  // config.json fields, as the released model spells them
};
const std::vector<Preset>& presets();
const Preset* find_preset(std::string_view name);

struct Request {
  std::optional<Arch> arch;       // required with config_file; must match a preset's
  std::string preset;             // exactly one of preset / config_file
  std::string config_file;        // a config.json to take the full-size shape from
  std::optional<double> size_gb;  // target size of the weight file(s), 1 GB = 1e9 bytes
  Format format = Format::Safetensors;
  std::string quant;  // "" → default_quant(format)
  uint64_t seed = 0;
  std::string tokenizer;  // tokenizer.json (or a directory with one); "" → synthetic vocabulary
  // Pin an axis at this value; --size then scales only the others.
  std::optional<int64_t> layers, experts, hidden;
  // The synthetic vocabulary's size (no --tokenizer): otherwise the base
  // model's, shrunk only when embeddings would take a fifth of the size. A
  // scaled-down model keeping a full 160k vocabulary has an output head far
  // larger, next to its experts, than the real model's.
  std::optional<int64_t> vocab;
  // GGUF deepseek2: write attn_kv_b as older converters did instead of
  // attn_k_b + attn_v_b (what convert_hf_to_gguf.py writes today).
  bool legacy_mla = false;
  // safetensors: the largest shard (HF's save_pretrained default, 5 GB).
  uint64_t shard_bytes = 5'000'000'000ull;
};

// How a tensor's values are drawn (fill.cpp); `scale` is their standard
// deviation (Gaussian) or the std of the weights a code/scale tensor encodes.
enum class Fill : uint8_t {
  Gaussian,     // N(0, scale²), in the stored type (block types: random codes, per-block scales)
  NormWeight,   // RMSNorm weights: 1 ± 5%
  Fp8Codes,     // E4M3 codes ~ N(0, 64²); the weight is code × weight_scale_inv
  Fp8ScaleInv,  // F32 scale_inv ≈ scale / 64 per 128x128 block
  Mxfp4Blocks,  // U8: two random E2M1 codes per byte (HF _blocks)
  Mxfp4Scales,  // U8: E8M0 exponents giving weights of std `scale` (HF _scales)
};

struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // row-major, outermost first (as TensorView)
  Fill fill = Fill::Gaussian;
  float scale = 1.0f;
  uint64_t nbytes = 0;
  uint32_t file = 0;  // index into Plan::files
};

// The vocabulary the written model uses: a real tokenizer, or a synthetic
// byte-level BPE one (256 byte tokens, some merges, three control tokens and
// padding) that llama.cpp and strata's tokenizer both load.
struct TokenizerInfo {
  bool synthetic = true;
  std::filesystem::path dir;                 // where the tokenizer files are (real)
  std::filesystem::path tokenizer_json;      // the file given (real)
  std::vector<std::filesystem::path> files;  // files to copy next to a safetensors model
  int64_t vocab = 0;                         // ids the tokenizer can produce (real)
  std::optional<int32_t> bos, pad;
  std::vector<int32_t> eos;
  bool add_bos = false;
};

struct Plan {
  Request request;
  std::string source;  // preset name or config file
  Format format = Format::Safetensors;
  ModelConfig config;        // the synthesized model, as strata will read it back
  nlohmann::json hf_config;  // its config.json
  Quant quant;
  TokenizerInfo tokenizer;
  std::vector<TensorSpec> tensors;   // in file order
  std::vector<std::string> files;    // safetensors shard names, or the .gguf's file name
  std::vector<uint64_t> file_bytes;  // exact size of each file
  uint64_t total_bytes = 0;          // their sum
  uint64_t full_bytes = 0;           // the unscaled shape in the same format (estimate)
  uint64_t params_total = 0, params_active = 0;
  std::vector<std::string> notes;  // type fallbacks, size warnings
};

// Throws strata::Error with a one-line message for bad requests.
Plan make_plan(const Request& r);
// A multi-line human summary (shape, sizes, files) and a JSON form of it.
std::string describe(const Plan& p);
nlohmann::json summary_json(const Plan& p);

struct WriteOptions {
  int threads = 0;        // generator threads; 0: all cores
  bool progress = false;  // progress bar on stderr
  bool force = false;     // overwrite an existing output
};
struct WriteStats {
  double seconds = 0;
  uint64_t bytes = 0;
};
// safetensors: `out` is a directory (created) receiving config.json,
// generation_config.json, model.safetensors or model-0000i-of-0000n.safetensors
// + model.safetensors.index.json, and the tokenizer files. gguf: `out` is the
// .gguf file. Files are written as <name>.partial and renamed when complete.
WriteStats write(const Plan& p, const std::filesystem::path& out, const WriteOptions& o);

// --- internals shared by the synth sources (and tests) -------------------

// The full-size ModelConfig of a request (preset or config file).
ModelConfig base_config(const Request& r, std::string* source);
// The config.json (as released checkpoints spell it) and generation_config.json.
nlohmann::json hf_config_json(const ModelConfig& c, const Quant& q, Format f);
nlohmann::json generation_config_json(const ModelConfig& c);
// Tensors of `c` in file order, names and layouts of `format`; appends type
// fallbacks to `notes` when given.
std::vector<TensorSpec> plan_tensors(const ModelConfig& c, Format format, const Quant& q, bool legacy_mla,
                                     std::vector<std::string>* notes);
// Parameter counts (all weights; weights one token uses).
void count_params(const ModelConfig& c, uint64_t* total, uint64_t* active);

}  // namespace strata::synth

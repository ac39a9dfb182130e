// Planning and writing synthesized checkpoints (see synth.h, docs/synth.md).
#include "synth/synth.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "formats/gguf_writer.h"
#include "model/arch.h"
#include "synth/output.h"
#include "synth/shape.h"
#include "synth/vocab.h"
#include "util/error.h"

namespace strata::synth {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// --- safetensors -------------------------------------------------------------

// The JSON header of one shard, padded with spaces so the data starts at a
// multiple of 8 (as the safetensors library writes it).
std::string safetensors_header(const Plan& p, const std::vector<size_t>& ids) {
  std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
  uint64_t off = 0;
  for (size_t id : ids) {
    const TensorSpec& t = p.tensors[id];
    h += ",\"" + t.name + "\":{\"dtype\":\"" + dtype_name(t.dtype) + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) h += (i ? "," : "") + std::to_string(t.shape[i]);
    h += "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + t.nbytes) + "]}";
    off += t.nbytes;
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

std::vector<std::vector<size_t>> files_of(const Plan& p) {
  std::vector<std::vector<size_t>> out(p.files.size());
  for (size_t i = 0; i < p.tensors.size(); ++i) out[p.tensors[i].file].push_back(i);
  return out;
}

void assign_shards(Plan& p) {
  uint64_t shard_bytes = 0;
  uint32_t shard = 0;
  for (TensorSpec& t : p.tensors) {
    if (shard_bytes > 0 && shard_bytes + t.nbytes > p.request.shard_bytes) {
      ++shard;
      shard_bytes = 0;
    }
    t.file = shard;
    shard_bytes += t.nbytes;
  }
  const uint32_t n = shard + 1;
  p.files.clear();
  if (n == 1) {
    p.files.push_back("model.safetensors");
  } else {
    for (uint32_t i = 0; i < n; ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05u-of-%05u.safetensors", i + 1, n);
      p.files.push_back(name);
    }
  }
}

// --- GGUF ----------------------------------------------------------------------

// llama_ftype of the file, as llama.cpp's tools report it.
uint32_t gguf_file_type(const Quant& q) {
  if (q.experts == DType::MXFP4 && q.trunk != DType::MXFP4) return 38;  // MOSTLY_MXFP4_MOE
  switch (q.trunk) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q8_0: return 7;
    case DType::Q4_K: return 15;  // MOSTLY_Q4_K_M
    case DType::Q6_K: return 18;
    case DType::BF16: return 32;
    case DType::MXFP4: return 38;
    default: return 0;
  }
}

// Metadata as convert_hf_to_gguf.py writes it for deepseek2 / qwen3moe /
// gpt-oss (conversion/{base,deepseek,qwen,gpt_oss}.py), read back by
// llama.cpp's load_hparams and strata's config_from_gguf.
GgufWriter gguf_writer(const Plan& p) {
  const ModelConfig& c = p.config;
  const std::string A = arch_spec(c.arch).gguf_arch;
  auto k = [&](const char* suffix) { return A + "." + suffix; };
  GgufWriter w;
  w.set_string("general.architecture", A);
  w.set_string("general.type", "model");
  w.set_string("general.name", "strata-synth " + p.source);
  w.set_u32("general.file_type", gguf_file_type(p.quant));
  w.set_u32("general.quantization_version", 2);
  w.set_u32(k("block_count"), static_cast<uint32_t>(c.num_layers + c.num_nextn_predict_layers));
  w.set_u32(k("context_length"), static_cast<uint32_t>(c.max_position_embeddings));
  w.set_u32(k("embedding_length"), static_cast<uint32_t>(c.hidden_size));
  w.set_u32(k("feed_forward_length"),
            static_cast<uint32_t>(arch_spec(c.arch).hf.expert_width_is_intermediate ? c.moe_intermediate_size
                                                                                    : c.intermediate_size));
  w.set_u32(k("attention.head_count"), static_cast<uint32_t>(c.num_heads));
  w.set_f32(k("rope.freq_base"), static_cast<float>(c.rope.theta));
  w.set_f32(k("attention.layer_norm_rms_epsilon"), static_cast<float>(c.rms_norm_eps));
  w.set_u32(k("expert_count"), static_cast<uint32_t>(c.n_routed_experts));
  w.set_u32(k("expert_used_count"), static_cast<uint32_t>(c.num_experts_per_tok));
  w.set_u32(k("expert_feed_forward_length"), static_cast<uint32_t>(c.moe_intermediate_size));
  w.set_u32(k("vocab_size"), static_cast<uint32_t>(c.vocab_size));
  if (c.rope.type == "yarn") {
    w.set_string(k("rope.scaling.type"), "yarn");
    w.set_f32(k("rope.scaling.factor"), static_cast<float>(c.rope.factor));
    w.set_u32(k("rope.scaling.original_context_length"),
              static_cast<uint32_t>(c.rope.original_max_position_embeddings));
    w.set_f32(k("rope.scaling.yarn_beta_fast"), static_cast<float>(c.rope.beta_fast));
    w.set_f32(k("rope.scaling.yarn_beta_slow"), static_cast<float>(c.rope.beta_slow));
    if (c.rope.attention_factor)
      w.set_f32(k("rope.scaling.yarn_attn_factor"), static_cast<float>(*c.rope.attention_factor));
  }
  arch_spec(c.arch).gguf.write(c, p.request.legacy_mla, w);
  add_gguf_vocab(w, p);
  for (const TensorSpec& t : p.tensors) w.add_tensor(t.name, t.dtype, t.shape);
  return w;
}

std::string gb(uint64_t bytes) {
  char buf[32];
  if (bytes >= 100'000'000)
    std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.2f MB", bytes / 1e6);
  return buf;
}

std::string billions(uint64_t n) {
  char buf[32];
  if (n >= 1'000'000'000)
    std::snprintf(buf, sizeof buf, "%.2f B", n / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.1f M", n / 1e6);
  return buf;
}

void write_json(const fs::path& path, const json& j) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << j.dump(2) << "\n";
  if (!f) throw Error(path.string() + ": cannot write");
}

}  // namespace

ModelConfig base_config(const Request& r, std::string* source) {
  if (r.preset.empty() == r.config_file.empty()) throw Error("give exactly one of --preset and --config");
  ModelConfig c;
  if (!r.preset.empty()) {
    const Preset* p = find_preset(r.preset);
    if (!p) {
      std::string names;
      for (const Preset& q : presets()) names += (names.empty() ? "" : ", ") + q.name;
      throw Error("unknown preset '" + r.preset + "' (presets: " + names + ")");
    }
    if (r.arch && *r.arch != p->arch)
      throw Error("preset '" + p->name + "' is a " + arch_name(p->arch) + " model, not " + arch_name(*r.arch));
    c = ModelConfig::from_json(p->config, "preset " + p->name);
    if (source) *source = p->name;
  } else {
    c = ModelConfig::from_file(r.config_file);
    if (r.arch && *r.arch != c.arch)
      throw Error(r.config_file + ": a " + arch_name(c.arch) + " config, not " + arch_name(*r.arch));
    if (source) *source = r.config_file;
  }
  // Storage types come from --quant, not from the config's quantization_config.
  c.fp8_block.reset();
  c.mxfp4_experts = false;
  if (c.arch == Arch::DeepseekV3 && c.moe_layer_freq != 1)
    throw Error("synth: moe_layer_freq other than 1 is not supported");
  return c;
}

Plan make_plan(const Request& r) {
  Plan p;
  p.request = r;
  p.format = r.format;
  if (r.size_gb && !(*r.size_gb > 0)) throw Error("--size must be positive");
  const ModelConfig base = base_config(r, &p.source);
  p.quant = parse_quant(r.quant, r.format, base.arch);
  if (!r.tokenizer.empty()) p.tokenizer = read_tokenizer(r.tokenizer);

  ShapeRequest sr;
  sr.format = r.format;
  sr.quant = p.quant;
  sr.legacy_mla = r.legacy_mla;
  if (r.size_gb) sr.target_bytes = *r.size_gb * 1e9;
  sr.layers = r.layers;
  sr.experts = r.experts;
  sr.hidden = r.hidden;
  sr.vocab = r.vocab;
  sr.min_vocab = kMinSyntheticVocab;
  sr.tokenizer_vocab = p.tokenizer.synthetic ? 0 : p.tokenizer.vocab;
  ShapeResult s = fit_shape(base, sr);
  ModelConfig c = s.config;
  p.full_bytes = s.full_bytes;

  if (p.tokenizer.synthetic) p.tokenizer = synthetic_tokenizer_info(c.vocab_size, c.arch);
  c.bos_token_id = p.tokenizer.bos;
  c.eos_token_ids = p.tokenizer.eos;
  c.num_nextn_predict_layers = 0;  // synth writes no next-token-prediction layer
  p.hf_config = hf_config_json(c, p.quant, r.format);
  // What strata reads back, validated as any config.json would be.
  p.config = ModelConfig::from_json(p.hf_config, "synthesized config.json");
  p.tensors = plan_tensors(p.config, r.format, p.quant, r.legacy_mla, &p.notes);
  count_params(p.config, &p.params_total, &p.params_active);

  if (r.format == Format::Safetensors) {
    assign_shards(p);
    const auto groups = files_of(p);
    for (size_t f = 0; f < p.files.size(); ++f) {
      uint64_t bytes = 8 + safetensors_header(p, groups[f]).size();
      for (size_t id : groups[f]) bytes += p.tensors[id].nbytes;
      p.file_bytes.push_back(bytes);
    }
  } else {
    // Shapes llama.cpp's loader does not take (strata reads them).
    const ModelConfig& c = p.config;
    if (c.arch == Arch::Qwen3Moe)
      for (int64_t l = 0; l < c.num_layers; ++l)
        if (!c.layer_is_moe(l)) {
          p.notes.push_back(
              "llama.cpp's qwen3moe has no dense layers (mlp_only_layers / decoder_sparse_step): "
              "only strata loads this GGUF");
          break;
        }
    if (c.arch == Arch::DeepseekV3 && !c.q_lora_rank && c.num_layers != 26 && c.num_layers != 27)
      p.notes.push_back(
          "llama.cpp reads a deepseek2 GGUF without q_lora_rank only at V2-Lite's 26/27 layers: "
          "only strata loads this GGUF");
    p.files = {"model.gguf"};
    for (TensorSpec& t : p.tensors) t.file = 0;
    p.file_bytes = {gguf_writer(p).file_size()};
  }
  for (uint64_t b : p.file_bytes) p.total_bytes += b;
  if (r.size_gb) {
    const double err = (static_cast<double>(p.total_bytes) - *r.size_gb * 1e9) / (*r.size_gb * 1e9);
    if (std::fabs(err) > 0.10)
      p.notes.push_back("the closest shape is " + gb(p.total_bytes) + ", " +
                        std::to_string(int(std::lround(err * 100))) + "% off the requested size");
  }
  return p;
}

std::string describe(const Plan& p) {
  const ModelConfig& c = p.config;
  std::ostringstream o;
  o << "strata synth: " << p.source << " -> " << arch_name(c.arch) << ", "
    << (p.format == Format::Gguf ? "gguf " : "safetensors ") << p.quant.spec << "\n";
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) moe_layers += c.layer_is_moe(l) ? 1 : 0;
  o << "  layers " << c.num_layers;
  if (moe_layers != c.num_layers) o << " (" << c.num_layers - moe_layers << " dense + " << moe_layers << " MoE)";
  o << ", hidden " << c.hidden_size << ", vocab " << c.vocab_size
    << (p.tokenizer.synthetic ? " (synthetic byte-level BPE)"
                              : " (tokenizer " + p.tokenizer.tokenizer_json.string() + ")")
    << "\n";
  if (c.arch == Arch::KimiK3) {
    int64_t kda = 0;
    for (int64_t l = 0; l < c.num_layers; ++l) kda += c.layer_is_kda(l) ? 1 : 0;
    o << "  attention: " << kda << " KDA layers (" << c.kda_heads << " heads of " << c.kda_head_dim << "), "
      << c.num_layers - kda << " gated NoPE MLA (" << c.num_heads << " heads, kv_lora " << c.kv_lora_rank
      << "); AttnRes blocks of " << c.attn_res_block_size << "\n";
  } else if (c.arch == Arch::DeepseekV3) {
    o << "  attention: MLA, " << c.num_heads << " heads, q_lora "
      << (c.q_lora_rank ? std::to_string(*c.q_lora_rank) : "none") << ", kv_lora " << c.kv_lora_rank << ", qk "
      << c.qk_nope_head_dim << " nope + " << c.qk_rope_head_dim << " rope, v " << c.v_head_dim << "\n";
  } else {
    o << "  attention: GQA, " << c.num_heads << " query / " << c.num_kv_heads << " KV heads of " << c.head_dim;
    if (c.arch == Arch::Qwen3Moe) o << ", q/k norms";
    if (c.arch == Arch::GptOss) o << ", sinks, sliding window " << c.sliding_window.value_or(0) << " on even layers";
    o << "\n";
  }
  o << "  experts: " << c.n_routed_experts << " routed, top-" << c.num_experts_per_tok;
  if (c.n_shared_experts) o << " + " << c.n_shared_experts << " shared";
  o << ", width " << c.moe_intermediate_size;
  if (c.latent_width > 0) o << " on a latent of " << c.latent_width;
  if (c.arch == Arch::DeepseekV3) o << ", groups " << c.n_group << "/" << c.topk_group;
  if (c.intermediate_size && c.arch != Arch::GptOss && moe_layers != c.num_layers)
    o << "; dense MLP width " << c.intermediate_size;
  o << "\n";
  o << "  parameters: " << billions(p.params_total) << " total, " << billions(p.params_active) << " active per token\n";
  o << "  " << (p.format == Format::Gguf ? "file:" : "files:");
  for (size_t i = 0; i < p.files.size(); ++i) {
    if (p.format == Format::Gguf) {
      o << " one .gguf of " << gb(p.file_bytes[i]) << ", " << p.tensors.size() << " tensors";
      continue;
    }
    if (p.files.size() > 3 && i == 2) {
      o << " ... (" << p.files.size() << " shards)";
      break;
    }
    o << (i ? ", " : " ") << p.files[i] << " " << gb(p.file_bytes[i]);
  }
  o << "\n  total " << gb(p.total_bytes);
  if (p.request.size_gb) {
    const double err = (static_cast<double>(p.total_bytes) / (*p.request.size_gb * 1e9) - 1) * 100;
    char buf[64];
    std::snprintf(buf, sizeof buf, " (target %.2f GB, %+.1f%%)", *p.request.size_gb, err);
    o << buf;
  }
  o << "; full-size shape " << gb(p.full_bytes) << "\n";
  for (const std::string& n : p.notes) o << "  note: " << n << "\n";
  return o.str();
}

json summary_json(const Plan& p) {
  json files = json::array();
  for (size_t i = 0; i < p.files.size(); ++i) files.push_back({{"name", p.files[i]}, {"bytes", p.file_bytes[i]}});
  json j = {{"source", p.source},
            {"arch", arch_name(p.config.arch)},
            {"format", p.format == Format::Gguf ? "gguf" : "safetensors"},
            {"quant", p.quant.spec},
            {"config", p.hf_config},
            {"files", files},
            {"total_bytes", p.total_bytes},
            {"full_bytes", p.full_bytes},
            {"params_total", p.params_total},
            {"params_active", p.params_active},
            {"tensors", p.tensors.size()},
            {"notes", p.notes}};
  j["target_bytes"] =
      p.request.size_gb ? json(static_cast<uint64_t>(std::llround(*p.request.size_gb * 1e9))) : json(nullptr);
  return j;
}

WriteStats write(const Plan& p, const fs::path& out, const WriteOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const int threads = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  std::error_code ec;

  // Where the bytes go, and whether there is room for them.
  fs::path dir = p.format == Format::Gguf ? out.parent_path() : out;
  if (dir.empty()) dir = ".";
  if (p.format == Format::Gguf) {
    if (fs::exists(out, ec) && !o.force) throw Error(out.string() + ": exists (use --force to overwrite)");
    if (fs::is_directory(out, ec)) throw Error(out.string() + ": is a directory; --format gguf writes one file");
    if (!fs::is_directory(dir, ec)) throw Error(dir.string() + ": no such directory");
  } else {
    if (fs::exists(out, ec) && !fs::is_directory(out, ec))
      throw Error(out.string() + ": exists and is not a directory");
    if (fs::exists(out / "config.json", ec) && !o.force)
      throw Error(out.string() + ": already holds a model (use --force to overwrite)");
    fs::create_directories(out, ec);
    if (ec) throw Error(out.string() + ": cannot create directory: " + ec.message());
    if (o.force) {
      // Shards of an earlier, differently sharded model would be picked up by readers.
      for (const auto& e : fs::directory_iterator(out, ec)) {
        const std::string name = e.path().filename().string();
        if (e.path().extension() == ".safetensors" && std::find(p.files.begin(), p.files.end(), name) == p.files.end())
          fs::remove(e.path(), ec);
      }
    }
  }
  const fs::space_info space = fs::space(dir, ec);
  if (!ec && space.available < p.total_bytes + (64u << 20))
    throw Error(dir.string() + ": not enough free space (" + gb(p.total_bytes) + " needed, " + gb(space.available) +
                " available)");

  Progress progress("synth", p.total_bytes, o.progress);
  if (p.format == Format::Gguf) {
    // GgufWriter lays the file out (header, aligned tensor offsets, padding);
    // the data is generated straight into the output buffers.
    GgufWriter w = gguf_writer(p);
    std::ostringstream header;
    w.write_header(header);
    FileLayout layout;
    layout.add_bytes(std::move(header).str());
    const uint64_t data_start = layout.size;  // the header, padded to the alignment
    for (size_t i = 0; i < p.tensors.size(); ++i) {
      layout.add_zeros(data_start + w.tensor_offset(i) - layout.size);
      layout.add_tensor(i, w.tensor_bytes(i));
    }
    const uint64_t file_size = p.file_bytes.at(0);
    if (data_start != w.header_size() || layout.size > file_size) throw Error("internal: GGUF layout mismatch");
    layout.add_zeros(file_size - layout.size);
    write_file(out, layout, p.tensors, p.request.seed, threads, progress);
  } else {
    const auto groups = files_of(p);
    json weight_map = json::object();
    for (size_t fi = 0; fi < p.files.size(); ++fi) {
      const std::string header = safetensors_header(p, groups[fi]);
      const uint64_t len = header.size();
      FileLayout layout;
      layout.add_bytes(std::string(reinterpret_cast<const char*>(&len), 8) + header);
      for (size_t id : groups[fi]) layout.add_tensor(id, p.tensors[id].nbytes);
      write_file(out / p.files[fi], layout, p.tensors, p.request.seed, threads, progress);
      for (size_t id : groups[fi]) weight_map[p.tensors[id].name] = p.files[fi];
    }
    if (p.files.size() > 1) {
      uint64_t data = 0;
      for (const TensorSpec& t : p.tensors) data += t.nbytes;
      write_json(out / "model.safetensors.index.json",
                 {{"metadata", {{"total_size", data}}}, {"weight_map", weight_map}});
    } else {
      fs::remove(out / "model.safetensors.index.json", ec);
    }
    write_json(out / "config.json", p.hf_config);
    write_json(out / "generation_config.json", generation_config_json(p.config));
    if (p.tokenizer.synthetic) {
      const SyntheticVocab v = synthetic_vocab(p.config.vocab_size, p.config.arch);
      write_json(out / "tokenizer.json", tokenizer_json(v));
      write_json(out / "tokenizer_config.json", tokenizer_config_json(v, p.config.max_position_embeddings));
    } else {
      for (const fs::path& src : p.tokenizer.files) {
        fs::copy_file(src, out / src.filename(), fs::copy_options::overwrite_existing, ec);
        if (ec) throw Error(src.string() + ": cannot copy to " + out.string() + ": " + ec.message());
      }
    }
  }
  progress.finish();
  WriteStats s;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.bytes = p.total_bytes;
  return s;
}

}  // namespace strata::synth

// parity_tool: the llama.cpp half of strata's parity check.
//
// Loads a GGUF through libllama's C API, evaluates the given prompt token ids
// verbatim (no BOS, no tokenizer), then decodes N tokens (greedy, or sampled with
// --temp T --seed S) and prints one JSON object on stdout:
//
//   {"model": "...", "n_vocab": V, "prompt_ids": [...],
//    "tokens": [...],          // greedy ids (lowest id wins a tie), or the sampled ids
//    "top1_prob": [...],       // softmax prob of the most likely id (the chosen one when greedy), T=1, full vocab
//    "top1_logit": [...],
//    "stats": {"prompt_tokens", "generated_tokens", "prefill_s", "decode_tok_s", ...},
//    "logits": [[...], ...]}   // only with --logits; row i = the row token i was chosen from
//
// Row 0 is the logits of the last prompt position, as in `strata generate --json --logits`.
// EOS is ignored: exactly N tokens are generated.
// Timing, as in strata's stats: prefill_s = prompt evaluation up to the first token's
// logits; decode_tok_s = (N - 1) / wall time from the first token chosen to the last.
// --temp T > 0 samples each token with libllama's sampler chain temp(T) -> dist(S).
//
// Built by bench/llama_cpp/build.sh against the llama.cpp checkout given to it (--dir DIR);
// not part of strata's build.

#include "llama.h"

#include <algorithm>
#include <chrono>
#include <clocale>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Args {
  std::string model;
  std::vector<llama_token> prompt;
  int n_predict = 32;
  int threads = 0;
  bool logits = false;
  bool verbose = false;
  bool progress = false;
  bool mmap = true;
  bool repack = true;  // llama.cpp's default: CPU weight repacking (extra buffer types)
  int n_ctx = 0;
  std::string kv_type = "f16";
  std::string flash_attn = "auto";
  float temp = 0.0f;  // 0: greedy (argmax)
  uint32_t seed = 0;
};

void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s -m MODEL.gguf --prompt-ids 1,2,3 [-n 32] [-t THREADS] [--logits]\n"
               "          [--kv-type f16|f32|bf16] [--flash-attn auto|on|off] [--ctx N]\n"
               "          [--no-mmap] [--no-repack] [--temp T --seed S] [--progress] [--verbose]\n"
               "  --temp 0 (default) decodes greedily; T > 0 samples with temp(T) -> dist(seed S)\n"
               "  --progress prints 'token I ID T' (T = seconds since the prompt started) to stderr per token\n",
               argv0);
}

bool parse_ids(const std::string& s, std::vector<llama_token>& out) {
  out.clear();
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string part = s.substr(i, j - i);
    if (part.empty()) return false;
    char* end = nullptr;
    long v = std::strtol(part.c_str(), &end, 10);
    if (*end != '\0' || v < 0) return false;
    out.push_back(static_cast<llama_token>(v));
    i = j + 1;
  }
  return !out.empty();
}

bool parse_args(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&](const char* what) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "parity_tool: %s needs a value\n", what);
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "-m" || k == "--model") a.model = next("--model");
    else if (k == "--prompt-ids" || k == "-p") {
      if (!parse_ids(next("--prompt-ids"), a.prompt)) {
        std::fprintf(stderr, "parity_tool: --prompt-ids wants comma-separated non-negative ids\n");
        return false;
      }
    } else if (k == "-n") a.n_predict = std::atoi(next("-n"));
    else if (k == "-t" || k == "--threads") a.threads = std::atoi(next("--threads"));
    else if (k == "--logits") a.logits = true;
    else if (k == "--verbose" || k == "-v") a.verbose = true;
    else if (k == "--progress") a.progress = true;
    else if (k == "--no-mmap") a.mmap = false;
    else if (k == "--no-repack" || k == "-nr") a.repack = false;
    else if (k == "--ctx") a.n_ctx = std::atoi(next("--ctx"));
    else if (k == "--kv-type") a.kv_type = next("--kv-type");
    else if (k == "--flash-attn" || k == "-fa") a.flash_attn = next("--flash-attn");
    else if (k == "--temp" || k == "--temperature") a.temp = static_cast<float>(std::atof(next("--temp")));
    else if (k == "--seed") a.seed = static_cast<uint32_t>(std::strtoul(next("--seed"), nullptr, 10));
    else if (k == "-h" || k == "--help") return false;
    else {
      std::fprintf(stderr, "parity_tool: unknown argument %s\n", k.c_str());
      return false;
    }
  }
  if (a.model.empty() || a.prompt.empty() || a.n_predict < 1 || !(a.temp >= 0)) return false;
  return true;
}

void quiet_log(enum ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
}

// JSON has no NaN/Inf; emit null for them so the consumer notices.
void put_float(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  out += buf;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') { o += '\\'; o += c; }
    else if (static_cast<unsigned char>(c) < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\u%04x", c); o += b; }
    else o += c;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  std::setlocale(LC_NUMERIC, "C");
  Args a;
  if (!parse_args(argc, argv, a)) {
    usage(argv[0]);
    return 2;
  }
  if (!a.verbose) {
    llama_log_set(quiet_log, nullptr);
  }

  ggml_type kv;
  if (a.kv_type == "f16") kv = GGML_TYPE_F16;
  else if (a.kv_type == "f32") kv = GGML_TYPE_F32;
  else if (a.kv_type == "bf16") kv = GGML_TYPE_BF16;
  else if (a.kv_type == "q8_0") kv = GGML_TYPE_Q8_0;
  else { std::fprintf(stderr, "parity_tool: bad --kv-type %s\n", a.kv_type.c_str()); return 2; }

  llama_flash_attn_type fa;
  if (a.flash_attn == "auto") fa = LLAMA_FLASH_ATTN_TYPE_AUTO;
  else if (a.flash_attn == "on") fa = LLAMA_FLASH_ATTN_TYPE_ENABLED;
  else if (a.flash_attn == "off") fa = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  else { std::fprintf(stderr, "parity_tool: bad --flash-attn %s\n", a.flash_attn.c_str()); return 2; }

  ggml_backend_load_all();
  llama_backend_init();

  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.load_mode = a.mmap ? LLAMA_LOAD_MODE_MMAP : LLAMA_LOAD_MODE_NONE;
  // Repacking (on by default, as in llama-cli's --repack) copies the weights it can
  // repack (e.g. MXFP4 experts on AVX-512) out of the mapping into anonymous memory;
  // --no-repack keeps every weight in the mmap'd file.
  mp.use_extra_bufts = a.repack;
  llama_model* model = llama_model_load_from_file(a.model.c_str(), mp);
  if (!model) {
    std::fprintf(stderr, "parity_tool: %s: llama.cpp could not load the model (rerun with --verbose)\n", a.model.c_str());
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  for (llama_token t : a.prompt) {
    if (t >= n_vocab) {
      std::fprintf(stderr, "parity_tool: prompt id %d is outside the vocabulary (%d)\n", t, n_vocab);
      return 2;
    }
  }

  const int n_prompt = static_cast<int>(a.prompt.size());
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = a.n_ctx > 0 ? a.n_ctx : n_prompt + a.n_predict + 8;
  cp.n_batch = std::max(n_prompt, 1);
  cp.n_ubatch = cp.n_batch;  // one physical batch for the whole prompt
  cp.n_seq_max = 1;
  cp.type_k = kv;
  cp.type_v = kv;
  cp.flash_attn_type = fa;
  cp.no_perf = true;
  if (a.threads > 0) {
    cp.n_threads = a.threads;
    cp.n_threads_batch = a.threads;
  }
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "parity_tool: could not create the llama.cpp context\n");
    return 1;
  }

  // Sampling (--temp > 0): libllama's own sampler chain. Greedy keeps the argmax below.
  llama_sampler* smpl = nullptr;
  if (a.temp > 0) {
    llama_sampler_chain_params sp = llama_sampler_chain_default_params();
    sp.no_perf = true;
    smpl = llama_sampler_chain_init(sp);
    llama_sampler_chain_add(smpl, llama_sampler_init_temp(a.temp));
    llama_sampler_chain_add(smpl, llama_sampler_init_dist(a.seed));
  }

  std::vector<llama_token> tokens;
  std::vector<double> top1_prob, top1_logit;
  std::vector<std::vector<float>> rows;

  using clk = std::chrono::steady_clock;
  double prefill_s = 0, decode_s = 0;
  clk::time_point t_first{};

  const clk::time_point t_start = clk::now();
  std::vector<llama_token> buf(a.prompt);
  llama_batch batch = llama_batch_get_one(buf.data(), n_prompt);
  llama_token cur = 0;
  for (int step = 0; step < a.n_predict; ++step) {
    auto t0 = clk::now();
    int rc = llama_decode(ctx, batch);
    const float* lg = rc == 0 ? llama_get_logits_ith(ctx, -1) : nullptr;
    if (step == 0) prefill_s = std::chrono::duration<double>(clk::now() - t0).count();
    if (rc != 0 || !lg) {
      std::fprintf(stderr, "parity_tool: llama_decode failed at step %d (rc=%d)\n", step, rc);
      return 1;
    }
    // greedy: first index of the maximum; softmax in double over the full vocabulary
    int best = 0;
    for (int i = 1; i < n_vocab; ++i)
      if (lg[i] > lg[best]) best = i;
    const double mx = lg[best];
    double z = 0;
    for (int i = 0; i < n_vocab; ++i) z += std::exp(static_cast<double>(lg[i]) - mx);
    // llama_sampler_sample reads the same logits row (idx -1 = the last output) and
    // accepts the token into the chain.
    const llama_token chosen = smpl ? llama_sampler_sample(smpl, ctx, -1) : best;
    tokens.push_back(chosen);
    top1_prob.push_back(1.0 / z);
    top1_logit.push_back(mx);
    if (a.logits) rows.emplace_back(lg, lg + n_vocab);
    cur = chosen;
    batch = llama_batch_get_one(&cur, 1);
    if (step == 0) t_first = clk::now();
    if (a.progress) {
      std::fprintf(stderr, "token %d %d %.6f\n", step, chosen,
                   std::chrono::duration<double>(clk::now() - t_start).count());
      std::fflush(stderr);
    }
  }
  if (a.n_predict > 1) decode_s = std::chrono::duration<double>(clk::now() - t_first).count();

  char desc[256] = {0};
  llama_model_desc(model, desc, sizeof desc);

  std::string out;
  out.reserve(a.logits ? rows.size() * n_vocab * 12 + 4096 : 4096);
  out += "{\"model\":\"" + json_escape(a.model) + "\",\"desc\":\"" + json_escape(desc) + "\"";
  out += ",\"n_vocab\":" + std::to_string(n_vocab);
  out += ",\"prompt_ids\":[";
  for (int i = 0; i < n_prompt; ++i) out += (i ? "," : "") + std::to_string(a.prompt[i]);
  out += "],\"tokens\":[";
  for (size_t i = 0; i < tokens.size(); ++i) out += (i ? "," : "") + std::to_string(tokens[i]);
  out += "],\"top1_prob\":[";
  for (size_t i = 0; i < top1_prob.size(); ++i) { if (i) out += ","; put_float(out, top1_prob[i]); }
  out += "],\"top1_logit\":[";
  for (size_t i = 0; i < top1_logit.size(); ++i) { if (i) out += ","; put_float(out, top1_logit[i]); }
  out += "],\"stats\":{\"prompt_tokens\":" + std::to_string(n_prompt);
  out += ",\"generated_tokens\":" + std::to_string(tokens.size());
  out += ",\"prefill_s\":"; put_float(out, prefill_s);
  out += ",\"decode_tok_s\":"; put_float(out, tokens.size() > 1 && decode_s > 0 ? (tokens.size() - 1) / decode_s : 0.0);
  out += ",\"threads\":" + std::to_string(llama_n_threads(ctx));
  out += ",\"decode_s\":"; put_float(out, decode_s);
  out += ",\"temp\":"; put_float(out, a.temp);
  out += ",\"seed\":" + std::to_string(a.seed);
  out += ",\"mmap\":"; out += a.mmap ? "true" : "false";
  out += ",\"repack\":"; out += a.repack ? "true" : "false";
  out += ",\"kv_type\":\"" + a.kv_type + "\",\"flash_attn\":\"" + a.flash_attn + "\"}";
  if (a.logits) {
    out += ",\"logits\":[";
    for (size_t r = 0; r < rows.size(); ++r) {
      out += r ? ",[" : "[";
      for (int i = 0; i < n_vocab; ++i) { if (i) out += ","; put_float(out, rows[r][i]); }
      out += "]";
    }
    out += "]";
  }
  out += "}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);

  if (smpl) llama_sampler_free(smpl);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}

#include "tokenizer/gguf_vocab.h"

#include <memory>

#include "tokenizer/tokenizer_state.h"

namespace strata::tok {

namespace {

// The regexes below are the "Split" patterns of each tokenizer.json, byte for
// byte (as C++ literals: "\r\n" inside DeepSeek-V3's third pattern are the
// raw CR/LF characters the JSON file holds, "\\r" elsewhere is the escape).
std::vector<GgufPre> make_pres() {
  std::vector<GgufPre> pres;
  // deepseek-ai/DeepSeek-V3 (also R1 and V3.1).
  pres.push_back({"deepseek-v3",
                  "DeepSeek-V3 tokenizer.json",
                  false,
                  {
                      "\\p{N}{1,3}",
                      "[一-龥぀-ゟ゠-ヿ]+",
                      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
                      "|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
                      "| ?[\\p{P}\\p{S}]+[\r\n]*"
                      "|\\s*[\r\n]+"
                      "|\\s+(?!\\S)"
                      "|\\s+",
                  },
                  false});
  // Qwen2 / Qwen2.5 / Qwen3 (NFC normalizer).
  pres.push_back({"qwen2",
                  "Qwen2/Qwen3 tokenizer.json",
                  true,
                  {
                      "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
                      "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
                      "|\\p{N}"
                      "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                      "|\\s*[\\r\\n]+"
                      "|\\s+(?!\\S)"
                      "|\\s+",
                  },
                  false});
  // o200k (Xenova/gpt-4o; openai/gpt-oss's o200k_harmony uses the same pattern).
  pres.push_back({"gpt-4o",
                  "gpt-4o / gpt-oss tokenizer.json",
                  false,
                  {
                      "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
                      "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                      "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
                      "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                      "|\\p{N}{1,3}"
                      "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*"
                      "|\\s*[\\r\\n]+"
                      "|\\s+(?!\\S)"
                      "|\\s+",
                  },
                  false});
  // GPT-2: ByteLevel with its built-in regex.
  pres.push_back({"gpt-2", "GPT-2 tokenizer.json", false, {}, true});
  // llama.cpp's fallback for files without a pre-tokenizer name; no
  // tokenizer.json has it, so these are llama.cpp's own regexes.
  pres.push_back({"default",
                  "llama.cpp's default BPE pre-tokenizer",
                  false,
                  {
                      "[\\p{P}\\$\\+<=>\\^~\\|]+",
                      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
                      "\\p{N}+",
                      "[0-9][0-9][0-9]",
                  },
                  false});
  return pres;
}

}  // namespace

const std::vector<GgufPre>& gguf_pres() {
  static const std::vector<GgufPre> pres = make_pres();
  return pres;
}

const GgufPre* find_gguf_pre(std::string_view name) {
  if (name == "deepseek-r1-qwen") name = "qwen2";
  if (name == "gpt2") name = "gpt-2";
  for (const auto& p : gguf_pres())
    if (name == p.name) return &p;
  return nullptr;
}

std::string gguf_pre_names() {
  std::string out;
  for (const auto& p : gguf_pres()) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

void apply_gguf_pre(const GgufPre& pre, TokenizerState& st, const std::string& origin) {
  st.nfc = pre.nfc;
  st.pre = PreTokenizer();
  for (std::size_t i = 0; i < pre.splits.size(); ++i) {
    const std::string where = origin + " (pre-tokenizer \"" + pre.name + "\" regex " + std::to_string(i) + ")";
    st.pre.add_split(std::make_shared<const Regex>(pre.splits[i], where), SplitBehavior::Isolated, /*invert=*/false);
  }
  st.pre.add_byte_level(/*add_prefix_space=*/false, pre.byte_level_regex);
}

bool gguf_token_looks_special(std::string_view t) {
  auto wraps = [&](std::string_view open, std::string_view close) {
    return t.starts_with(open) && t.ends_with(close);  // may overlap, as in Python
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wraps("<|", "|>") ||
         wraps("<｜", "｜>") || wraps("<unused", ">");
}

}  // namespace strata::tok

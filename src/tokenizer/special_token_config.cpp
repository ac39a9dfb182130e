// BOS/EOS and prompt decoration from tokenizer_config.json and
// generation_config.json, shared by both loaders.
#include <algorithm>

#include "tokenizer/tokenizer_state.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata::tok {

using nlohmann::json;

int64_t token_id_limit(std::size_t tokens_defined) {
  return std::min<int64_t>(kMaxTokenIds, static_cast<int64_t>(tokens_defined) + kMaxTokenIdGap);
}

int32_t token_id(const json& v, int64_t limit, const std::string& where, const std::string& bound) {
  if (!v.is_number_integer()) throw Error(where + " is not an integer token id");
  const std::optional<int64_t> id = json_int64(v);  // nullopt past INT64_MAX
  if (!id || *id < 0 || *id >= limit)
    throw Error(where + " has token id " + v.dump() + ", out of range (" + bound + ")");
  return static_cast<int32_t>(*id);
}

void TokenizerState::set_token(int32_t id, std::string bytes, std::string text) {
  const auto n = static_cast<std::size_t>(id) + 1;
  if (decode_bytes.size() < n) {
    decode_bytes.resize(n);
    token_texts.resize(n);
    known.resize(n, 0);
  }
  decode_bytes[id] = std::move(bytes);
  token_texts[id] = std::move(text);
  known[id] = 1;
}

namespace {

// A token field is a string, an AddedToken object {"content": ...}, or null.
std::optional<std::string> token_content(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return std::nullopt;
}

bool flag(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  return it != cfg.end() && it->is_boolean() && it->get<bool>();
}

// generation_config.json ids are an integer or a list of integers, each a
// token of the vocabulary (`vocab` ids); anything else is ignored.
std::vector<int32_t> id_list(const json& cfg, const char* key, std::size_t vocab, const std::filesystem::path& path) {
  std::vector<int32_t> out;
  auto it = cfg.find(key);
  if (it == cfg.end()) return out;
  const std::string where = path.string() + ": " + key;
  const std::string bound = "the vocabulary has " + std::to_string(vocab) + " ids";
  const auto limit = static_cast<int64_t>(vocab);
  if (it->is_number_integer()) out.push_back(token_id(*it, limit, where, bound));
  if (it->is_array())
    for (const auto& v : *it)
      if (v.is_number_integer()) out.push_back(token_id(v, limit, where, bound));
  return out;
}

// A chat_template value: a string, or a list of {"name", "template"} of
// which the one named "default" is used (as transformers and llama.cpp do).
std::optional<std::string> chat_template_of(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array())
    for (const auto& e : v)
      if (e.is_object() && e.value("name", json()) == "default" && e.contains("template") && e["template"].is_string())
        return e["template"].get<std::string>();
  return std::nullopt;
}

}  // namespace

void apply_special_token_config(const std::filesystem::path& dir, TokenizerState& st,
                                const std::vector<int32_t>& template_prefix,
                                const std::vector<int32_t>& template_suffix) {
  const auto cfg_path = dir / "tokenizer_config.json";
  const auto gen_path = dir / "generation_config.json";
  const json cfg = std::filesystem::exists(cfg_path) ? read_json_file(cfg_path) : json::object();
  const json gen = std::filesystem::exists(gen_path) ? read_json_file(gen_path) : json::object();

  auto lookup = [&](const char* key) -> std::optional<int32_t> {
    auto content = token_content(cfg, key);
    if (!content) return std::nullopt;
    auto it = st.ids_by_text.find(*content);
    if (it == st.ids_by_text.end())
      throw Error(cfg_path.string() + ": " + key + " \"" + *content + "\" is not a token of this vocabulary");
    return it->second;
  };

  st.bos = lookup("bos_token");
  if (!st.bos) {
    if (auto ids = id_list(gen, "bos_token_id", st.known.size(), gen_path); !ids.empty())
      st.bos = ids.front();
    else if (!template_prefix.empty())
      st.bos = template_prefix.front();
  }

  st.eos.clear();
  if (auto eos = lookup("eos_token")) st.eos.push_back(*eos);
  for (int32_t id : id_list(gen, "eos_token_id", st.known.size(), gen_path))
    if (std::find(st.eos.begin(), st.eos.end(), id) == st.eos.end()) st.eos.push_back(id);

  st.prompt_prefix = template_prefix;
  if (flag(cfg, "add_bos_token") && st.bos && (st.prompt_prefix.empty() || st.prompt_prefix.front() != *st.bos))
    st.prompt_prefix.insert(st.prompt_prefix.begin(), *st.bos);
  st.prompt_suffix = template_suffix;
  if (flag(cfg, "add_eos_token") && !st.eos.empty() &&
      (st.prompt_suffix.empty() || st.prompt_suffix.back() != st.eos.front()))
    st.prompt_suffix.push_back(st.eos.front());

  if (auto it = cfg.find("chat_template"); it != cfg.end()) {
    st.chat_template = chat_template_of(*it);
  } else if (std::filesystem::exists(dir / "chat_template.jinja")) {
    st.chat_template = read_text_file(dir / "chat_template.jinja");
  } else if (std::filesystem::exists(dir / "chat_template.json")) {
    const json j = read_json_file(dir / "chat_template.json");
    if (auto t = j.find("chat_template"); t != j.end()) st.chat_template = chat_template_of(*t);
  }

  for (const auto* ids : {&st.prompt_prefix, &st.prompt_suffix})
    for (int32_t id : *ids)
      if (id < 0 || static_cast<std::size_t>(id) >= st.known.size() || !st.known[id])
        throw Error(dir.string() + ": prompt token id " + std::to_string(id) + " is not in the vocabulary");
}

}  // namespace strata::tok

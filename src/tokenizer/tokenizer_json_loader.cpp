// Builds a TokenizerState from a HF tokenizer.json. Supported: model BPE over
// a byte-level vocabulary (merges as "a b" strings or [a, b] pairs,
// ignore_merges), normalizer null / NFC / Sequence of those, pre_tokenizer
// Split (Regex or String pattern, any behavior, invert) and ByteLevel
// (add_prefix_space, use_regex), alone or in a Sequence, decoder ByteLevel,
// post_processor ByteLevel / TemplateProcessing / Sequence. Anything else is
// rejected with an error naming the file rather than encoded differently.
//
// Nothing here copies a subtree or recurses deeper than kMaxSequenceDepth:
// a Sequence nested thousands deep is one error, not a stack overflow.
#include <cstdint>

#include "tokenizer/byte_level.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer_state.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata::tok {

namespace {

using nlohmann::json;

// obj[key] without copying (json::value() returns a copy, and the vocab and
// merges are large); a null json when absent.
const json& member(const json& obj, const char* key) {
  static const json null_json;
  if (!obj.is_object()) return null_json;
  auto it = obj.find(key);
  return it == obj.end() ? null_json : *it;
}

// Sequences inside Sequences: real files nest none or one.
constexpr int kMaxSequenceDepth = 16;

const json& empty_list() {
  static const json list = json::array();
  return list;
}

struct Loader {
  std::string file;  // for messages
  TokenizerState& st;
  int64_t id_limit = 0;  // token_id_limit() of the tokens the file defines
  std::string id_bound;  // what id_limit comes from, for messages

  [[noreturn]] void fail(const std::string& what) const { throw Error(file + ": " + what); }

  std::string type_of(const json& node, const std::string& where) const {
    if (!node.is_object() || !node.contains("type") || !node["type"].is_string())
      fail(where + " has no \"type\"");
    return node["type"].get<std::string>();
  }

  bool get_bool(const json& node, const char* key, bool fallback) const {
    auto it = node.find(key);
    if (it == node.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) fail(std::string("\"") + key + "\" is not a boolean");
    return it->get<bool>();
  }

  // The steps of a Sequence (by reference), refused past kMaxSequenceDepth.
  const json& steps(const json& seq, const char* key, const std::string& where, int depth) const {
    if (depth >= kMaxSequenceDepth)
      fail(where + ": Sequences nested more than " + std::to_string(kMaxSequenceDepth) + " deep");
    const json& list = member(seq, key);
    if (list.is_null()) return empty_list();
    if (!list.is_array()) fail(where + "." + key + " is not a list");
    return list;
  }

  int32_t id(const json& v, const std::string& where) const { return token_id(v, id_limit, file + ": " + where, id_bound); }

  void normalizer(const json& n, const std::string& where, int depth = 0) {
    if (n.is_null()) return;
    const std::string type = type_of(n, where);
    if (type == "NFC") {
      st.nfc = true;
    } else if (type == "Sequence") {
      std::size_t i = 0;
      for (const auto& sub : steps(n, "normalizers", where, depth))
        normalizer(sub, where + "[" + std::to_string(i++) + "]", depth + 1);
    } else {
      fail(where + " of type \"" + type + "\" is not supported (only NFC)");
    }
  }

  // Returns whether a ByteLevel step was seen.
  bool pre_tokenizer(const json& p, const std::string& where, int depth = 0) {
    if (p.is_null()) return false;
    const std::string type = type_of(p, where);
    if (type == "Sequence") {
      bool byte_level = false;
      std::size_t i = 0;
      for (const auto& sub : steps(p, "pretokenizers", where, depth))
        byte_level |= pre_tokenizer(sub, where + "[" + std::to_string(i++) + "]", depth + 1);
      return byte_level;
    }
    if (type == "ByteLevel") {
      st.pre.add_byte_level(get_bool(p, "add_prefix_space", true), get_bool(p, "use_regex", true));
      return true;
    }
    if (type == "Split") {
      const json& pat = member(p, "pattern");
      std::string regex;
      if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string())
        regex = pat["Regex"].get<std::string>();
      else if (pat.is_object() && pat.contains("String") && pat["String"].is_string())
        regex = escape_literal(pat["String"].get<std::string>());
      else
        fail(where + ": Split pattern must be {\"Regex\": ...} or {\"String\": ...}");
      const auto behavior = parse_split_behavior(p.value("behavior", std::string("Isolated")), file + " " + where);
      st.pre.add_split(std::make_shared<const Regex>(regex, file + " " + where), behavior, get_bool(p, "invert", false));
      return false;
    }
    fail(where + " of type \"" + type + "\" is not supported (only Split, ByteLevel, Sequence)");
  }

  void decoder(const json& d, const std::string& where, int depth = 0) const {
    if (d.is_null()) return;
    const std::string type = type_of(d, where);
    if (type == "Sequence") {
      std::size_t i = 0;
      for (const auto& sub : steps(d, "decoders", where, depth)) decoder(sub, where + "[" + std::to_string(i++) + "]", depth + 1);
    } else if (type != "ByteLevel") {
      fail(where + " of type \"" + type + "\" is not supported (only ByteLevel)");
    }
  }

  // The special tokens a TemplateProcessing "single" template puts before
  // and after the sequence.
  void post_processor(const json& p, const std::string& where, std::vector<int32_t>& prefix,
                      std::vector<int32_t>& suffix, int depth = 0) const {
    if (p.is_null()) return;
    const std::string type = type_of(p, where);
    if (type == "Sequence") {
      std::size_t i = 0;
      for (const auto& sub : steps(p, "processors", where, depth))
        post_processor(sub, where + "[" + std::to_string(i++) + "]", prefix, suffix, depth + 1);
      return;
    }
    if (type != "TemplateProcessing") return;  // ByteLevel etc. add no tokens
    const json& specials = member(p, "special_tokens");
    const json& single = member(p, "single");
    if (!single.is_null() && !single.is_array()) fail(where + ".single is not a list");
    bool after = false;
    std::size_t i = 0;
    for (const auto& piece : single.is_array() ? single : empty_list()) {
      const std::string at = where + ".single[" + std::to_string(i++) + "]";
      if (piece.contains("Sequence")) {
        after = true;
        continue;
      }
      if (!piece.contains("SpecialToken")) continue;
      const json& name_json = member(member(piece, "SpecialToken"), "id");
      if (!name_json.is_string()) fail(at + ".SpecialToken.id is not a string");
      const std::string name = name_json.get<std::string>();
      const json& special = member(specials, name.c_str());
      if (!special.is_object()) fail(where + " template uses undefined special token \"" + name + "\"");
      const json& ids = member(special, "ids");
      if (!ids.is_null() && !ids.is_array()) fail(where + ".special_tokens[\"" + name + "\"].ids is not a list");
      for (const auto& v : ids.is_array() ? ids : empty_list())
        (after ? suffix : prefix).push_back(id(v, where + ".special_tokens[\"" + name + "\"].ids"));
    }
  }

  std::unique_ptr<WordModel> model(const json& m) {
    if (!m.is_object()) fail("no \"model\"");
    const std::string type = m.value("type", std::string("BPE"));
    if (type != "BPE") fail("model type \"" + type + "\" is not supported (only byte-level BPE)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty())
        fail(std::string("model.") + key + " is not supported");
    if (get_bool(m, "byte_fallback", false)) fail("model.byte_fallback is not supported (not a byte-level BPE)");
    if (!m.contains("vocab") || !m["vocab"].is_object()) fail("model.vocab is missing");

    StringMap<int32_t> vocab;
    vocab.reserve(m["vocab"].size());
    st.ids_by_text.reserve(m["vocab"].size() + 1024);
    for (const auto& [text, id_json] : m["vocab"].items()) {
      const int32_t id = this->id(id_json, "model.vocab[\"" + text + "\"]");
      // Byte-level tokens decode to their bytes; anything else (e.g. a special
      // token stored in the vocab) decodes to its own text.
      auto bytes = from_byte_level(text);
      st.set_token(id, bytes ? std::move(*bytes) : text, text);
      st.ids_by_text.emplace(text, id);
      vocab.emplace(text, id);
    }

    std::vector<std::pair<std::string, std::string>> merges;
    const json& list = member(m, "merges");
    if (!list.is_null() && !list.is_array()) fail("model.merges is not a list");
    merges.reserve(list.size());
    for (std::size_t i = 0; list.is_array() && i < list.size(); ++i) {
      const json& e = list[i];
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const auto sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          fail("model.merges[" + std::to_string(i) + "] is not \"left right\"");
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      } else {
        fail("model.merges[" + std::to_string(i) + "] is neither \"a b\" nor [a, b]");
      }
    }
    std::optional<int32_t> unk;
    if (m.contains("unk_token") && m["unk_token"].is_string()) {
      auto it = vocab.find(m["unk_token"].get<std::string>());
      if (it == vocab.end()) fail("model.unk_token is not in the vocab");
      unk = it->second;
    }
    return std::make_unique<BpeModel>(std::move(vocab), merges, unk, get_bool(m, "ignore_merges", false), file);
  }

  void added_tokens(const json& list) {
    if (list.is_null()) return;
    if (!list.is_array()) fail("added_tokens is not a list");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const json& t = list[i];
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
          !t["content"].is_string())
        fail("added_tokens[" + std::to_string(i) + "] needs an integer id and a string content");
      AddedToken a;
      a.id = id(t["id"], "added_tokens[" + std::to_string(i) + "]");
      a.content = t["content"].get<std::string>();
      a.special = get_bool(t, "special", false);
      a.lstrip = get_bool(t, "lstrip", false);
      a.rstrip = get_bool(t, "rstrip", false);
      a.single_word = get_bool(t, "single_word", false);
      a.normalized = get_bool(t, "normalized", !a.special);
      // Added tokens decode to their literal text.
      st.set_token(a.id, a.content, a.content);
      st.ids_by_text[a.content] = a.id;
      (a.normalized ? st.normalized_added : st.raw_added).add(a);
    }
  }
};

}  // namespace

std::unique_ptr<TokenizerState> load_tokenizer_json(const std::filesystem::path& dir) {
  const auto path = dir / "tokenizer.json";
  const json root = read_json_file(path);
  auto st = std::make_unique<TokenizerState>();
  Loader l{path.string(), *st, {}, {}};
  if (!root.is_object()) l.fail("top level is not an object");
  // Ids are bounded by how many tokens the file defines (tokenizer_state.h).
  const json& vocab = member(member(root, "model"), "vocab");
  const json& added = member(root, "added_tokens");
  const std::size_t defined = (vocab.is_object() ? vocab.size() : 0) + (added.is_array() ? added.size() : 0);
  l.id_limit = token_id_limit(defined);
  l.id_bound = "the file defines " + std::to_string(defined) + " tokens, so ids must be below " + std::to_string(l.id_limit);

  st->model = l.model(member(root, "model"));
  l.added_tokens(member(root, "added_tokens"));
  l.normalizer(member(root, "normalizer"), "normalizer");
  if (!l.pre_tokenizer(member(root, "pre_tokenizer"), "pre_tokenizer"))
    l.fail("pre_tokenizer has no ByteLevel step; only byte-level BPE tokenizers are supported");
  l.decoder(member(root, "decoder"), "decoder");
  std::vector<int32_t> prefix, suffix;
  l.post_processor(member(root, "post_processor"), "post_processor", prefix, suffix);
  apply_special_token_config(dir, *st, prefix, suffix);
  return st;
}

}  // namespace strata::tok

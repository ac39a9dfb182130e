#include "tokenizer/gguf_tokenizer_writer.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "formats/gguf_writer.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer_state.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata {

namespace fs = std::filesystem;
using nlohmann::json;
using tok::GgufTokenType;
namespace key = tok::gguf_key;

namespace {

// Python truthiness of a JSON value, for the converter's `if x:` tests.
bool truthy(const json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();  // json::empty() is false for any string
  if (v.is_array() || v.is_object()) return !v.empty();
  return true;
}

// obj[k] without copying; null when obj is not an object or has no k.
const json& get_or_null(const json& obj, const std::string& k) {
  static const json null_json;
  if (!obj.is_object()) return null_json;
  auto it = obj.find(k);
  return it == obj.end() ? null_json : *it;
}

bool bool_or(const json& obj, const char* k, bool fallback) {
  const json& v = get_or_null(obj, k);
  return v.is_boolean() ? v.get<bool>() : fallback;
}

// CR and LF written as escapes, so that a pattern compares equal whether the
// JSON file held "\r" (the characters) or "\\r" (the regex escapes).
std::string canonical_regex(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\r')
      out += "\\r";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

struct Writer {
  fs::path dir;
  std::string file;  // tokenizer.json, for messages
  const json& root;
  const GgufTokenizerOptions& options;

  [[noreturn]] void fail(const std::string& what) const { throw Error(file + ": " + what); }

  // --- pre-tokenizer recognition ----------------------------------------------

  struct Shape {
    bool nfc = false;
    std::vector<std::string> splits;  // canonical regexes
    bool byte_level_regex = false;
  };

  bool normalizer_shape(const json& n, Shape& s) const {
    if (n.is_null()) return true;
    const std::string type = n.value("type", std::string());
    if (type == "NFC") {
      s.nfc = true;
      return true;
    }
    if (type == "Sequence") {
      for (const auto& sub : n.value("normalizers", json::array()))
        if (!normalizer_shape(sub, s)) return false;
      return true;
    }
    return false;
  }

  // Flattens Sequences; returns false for anything but Split(Regex, Isolated)
  // steps followed by one ByteLevel without a prefix space.
  bool pre_shape(const json& p, Shape& s, bool& byte_level_seen) const {
    if (!p.is_object() || byte_level_seen) return false;
    const std::string type = p.value("type", std::string());
    if (type == "Sequence") {
      for (const auto& sub : p.value("pretokenizers", json::array()))
        if (!pre_shape(sub, s, byte_level_seen)) return false;
      return true;
    }
    if (type == "Split") {
      const json& pattern = get_or_null(p, "pattern");
      if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string()) return false;
      if (get_or_null(p, "behavior") != "Isolated" || bool_or(p, "invert", false)) return false;
      s.splits.push_back(canonical_regex(pattern["Regex"].get<std::string>()));
      return true;
    }
    if (type == "ByteLevel") {
      byte_level_seen = true;
      if (bool_or(p, "add_prefix_space", true)) return false;
      s.byte_level_regex = bool_or(p, "use_regex", true);
      return true;
    }
    return false;
  }

  std::string pre_name() const {
    if (options.pre) {
      if (options.pre->empty()) throw Error("GgufTokenizerOptions::pre is empty");
      return *options.pre;
    }
    Shape s;
    bool byte_level = false;
    if (normalizer_shape(get_or_null(root, "normalizer"), s) &&
        pre_shape(get_or_null(root, "pre_tokenizer"), s, byte_level) && byte_level) {
      for (const auto& p : tok::gguf_pres()) {
        if (p.nfc != s.nfc || p.byte_level_regex != s.byte_level_regex || p.splits.size() != s.splits.size()) continue;
        bool same = true;
        for (std::size_t i = 0; i < s.splits.size() && same; ++i) same = canonical_regex(p.splits[i]) == s.splits[i];
        if (same) return p.name;
      }
    }
    fail("its normalizer and pre_tokenizer are not those of a GGUF pre-tokenizer strata knows (" +
         tok::gguf_pre_names() + "); name one with GgufTokenizerOptions::pre to write it anyway");
  }

  // --- vocabulary -------------------------------------------------------------

  const json& model() const {
    auto it = root.find("model");
    if (it == root.end() || !it->is_object()) fail("no \"model\"");
    const json& m = *it;
    if (m.value("type", std::string("BPE")) != "BPE") fail("model type is not BPE (GGUF \"gpt2\" is byte-level BPE)");
    if (truthy(get_or_null(m, "byte_fallback"))) fail("model.byte_fallback is set: not a byte-level BPE");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (truthy(get_or_null(m, k))) fail(std::string("model.") + k + " cannot be written to GGUF");
    // llama.cpp only sets ignore_merges for its llama-3 pre-tokenizer, which
    // strata does not read; writing such a tokenizer would change its ids.
    if (truthy(get_or_null(m, "ignore_merges")))
      fail("model.ignore_merges cannot be expressed in GGUF for these pre-tokenizers");
    if (!m.contains("vocab") || !m["vocab"].is_object()) fail("model.vocab is missing");
    return m;
  }

  static int64_t id_of(const json& v) { return v.is_number_integer() ? v.get<int64_t>() : -1; }

  void write(GgufWriter& out) const {
    const std::string pre = pre_name();
    const json& m = model();

    // HF's get_vocab(): the BPE vocab plus the added tokens.
    std::unordered_map<std::string, int64_t> all;
    all.reserve(m["vocab"].size() + 1024);
    for (const auto& [text, id] : m["vocab"].items()) {
      if (id_of(id) < 0) fail("model.vocab[\"" + text + "\"] is not a valid id");
      all[text] = id_of(id);
    }
    const json& added = get_or_null(root, "added_tokens");
    if (!added.is_null() && !added.is_array()) fail("added_tokens is not a list");
    std::unordered_set<std::string> added_contents;
    std::unordered_map<int64_t, const json*> added_by_id;
    for (std::size_t i = 0; added.is_array() && i < added.size(); ++i) {
      const json& t = added[i];
      if (!t.is_object() || id_of(get_or_null(t, "id")) < 0 || !get_or_null(t, "content").is_string())
        fail("added_tokens[" + std::to_string(i) + "] needs a non-negative id and a string content");
      const std::string content = t["content"].get<std::string>();
      all[content] = id_of(t["id"]);
      added_contents.insert(content);
      added_by_id[id_of(t["id"])] = &t;
    }
    int64_t max_id = -1;
    for (const auto& [text, id] : all) max_id = std::max(max_id, id);

    const json config = fs::exists(dir / "config.json") ? read_json_file(dir / "config.json") : json::object();
    int64_t n = static_cast<int64_t>(all.size());
    if (options.vocab_size) {
      n = *options.vocab_size;
    } else if (const json& v = get_or_null(config, "vocab_size"); v.is_number_integer()) {
      n = v.get<int64_t>();
    } else if (const json& tv = get_or_null(get_or_null(config, "text_config"), "vocab_size"); tv.is_number_integer()) {
      n = tv.get<int64_t>();
    }
    if (n <= max_id || n <= 0)
      fail("vocab_size " + std::to_string(n) + " does not cover the tokenizer's largest id " + std::to_string(max_id));
    if (n > INT32_MAX) fail("vocab_size " + std::to_string(n) + " is too large");

    // id -> text; an added token's content wins over a vocab entry of the same id.
    std::vector<const std::string*> text_of(static_cast<std::size_t>(n), nullptr);
    for (const auto& [text, id] : all)
      if (!text_of[id] || added_contents.count(text)) text_of[id] = &text;

    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    tokens.reserve(n);
    types.reserve(n);
    for (int64_t i = 0; i < n; ++i) {
      if (!text_of[i]) {
        tokens.push_back("[PAD" + std::to_string(i) + "]");
        types.push_back(static_cast<int32_t>(GgufTokenType::Unused));
        continue;
      }
      std::string text = *text_of[i];
      GgufTokenType type = GgufTokenType::Normal;
      if (added_contents.count(text)) {
        auto it = added_by_id.find(i);
        const bool special = it != added_by_id.end() && get_or_null(*it->second, "special") == true;
        if (special || tok::gguf_token_looks_special(text)) {
          type = GgufTokenType::Control;
        } else {
          type = GgufTokenType::UserDefined;
          // The converter pre-normalizes SentencePiece spaces in user-defined tokens.
          for (std::size_t p; (p = text.find("\xE2\x96\x81")) != std::string::npos;) text.replace(p, 3, " ");
        }
      }
      tokens.push_back(std::move(text));
      types.push_back(static_cast<int32_t>(type));
    }

    // Merges: "a b" strings as they are; [a, b] pairs joined, with a space
    // inside a part written as U+0120 (the converter's encoding).
    const json& merges_json = get_or_null(m, "merges");
    if (!merges_json.is_array() || merges_json.empty()) fail("model.merges is missing or empty");
    std::vector<std::string> merges;
    merges.reserve(merges_json.size());
    for (std::size_t i = 0; i < merges_json.size(); ++i) {
      const json& e = merges_json[i];
      if (e.is_string()) {
        merges.push_back(e.get<std::string>());
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        std::string joined;
        for (int k = 0; k < 2; ++k) {
          if (k) joined += ' ';
          for (char c : e[k].get<std::string>()) {
            if (c == ' ')
              joined += "\xC4\xA0";  // U+0120
            else
              joined += c;
          }
        }
        merges.push_back(std::move(joined));
      } else {
        fail("model.merges[" + std::to_string(i) + "] is neither \"a b\" nor [a, b]");
      }
    }

    out.set_string(key::kModel, "gpt2");
    out.set_string(key::kPre, pre);
    out.set_strings(key::kTokens, std::move(tokens));
    out.set(key::kTokenType, GgufMeta::array(types));
    out.set_strings(key::kMerges, std::move(merges));
    special_vocab(out, added, config, n);
  }

  // --- gguf.SpecialVocab --------------------------------------------------------

  void special_vocab(GgufWriter& out, const json& added, const json& config, int64_t n) const {
    const fs::path cfg_path = dir / "tokenizer_config.json";
    json cfg = fs::exists(cfg_path) ? read_json_file(cfg_path) : json(nullptr);
    const bool have_cfg = cfg.is_object() && !cfg.empty();

    std::vector<std::string> types = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
    std::vector<std::pair<std::string, int64_t>> ids;  // insertion order, first setting wins
    std::vector<std::pair<std::string, bool>> adds;    // insertion order, last setting wins
    auto set_id = [&](const std::string& typ, int64_t id) {
      if (id < 0) fail("special token " + typ + " has the negative id " + std::to_string(id));
      for (const auto& [t, v] : ids)
        if (t == typ) return;
      ids.emplace_back(typ, id);
    };
    auto set_add = [&](const std::string& typ, bool value) {
      for (auto& [t, v] : adds)
        if (t == typ) {
          v = value;
          return;
        }
      adds.emplace_back(typ, value);
    };
    auto has_type = [&](const char* t) { return std::find(types.begin(), types.end(), t) != types.end(); };

    // The post_processor's template decides add_bos / add_eos.
    json special_bos = get_or_null(cfg, "bos_token"), special_cls = get_or_null(cfg, "cls_token");
    json special_eos = get_or_null(cfg, "eos_token"), special_sep = get_or_null(cfg, "sep_token");
    if (!truthy(special_bos) && truthy(special_cls) && have_cfg) cfg["bos_token"] = special_bos = special_cls;
    if (!truthy(special_eos) && truthy(special_sep) && have_cfg) cfg["eos_token"] = special_eos = special_sep;
    const json pp = get_or_null(root, "post_processor");
    if (pp.is_object() && !pp.empty()) {
      const json processors = pp.contains("processors") ? pp["processors"] : json::array({pp});
      for (const json& proc : processors) {
        const std::string type = proc.is_object() ? proc.value("type", std::string()) : std::string();
        if (type == "RobertaProcessing") {
          set_add("bos", true);
          set_add("eos", true);
          set_add("sep", true);
          if (!truthy(special_cls) && have_cfg) {
            const json cls = get_or_null(proc, "cls");
            cfg["cls_token"] = special_cls = cls.is_array() && !cls.empty() ? cls[0] : special_bos;
          }
          if (!truthy(special_sep) && have_cfg) {
            const json sep = get_or_null(proc, "sep");
            cfg["sep_token"] = special_sep = sep.is_array() && !sep.empty() ? sep[0] : special_eos;
          }
          continue;
        }
        if (type != "TemplateProcessing") continue;
        const json single = get_or_null(proc, "single");
        if (!single.is_array() || single.size() <= 1) continue;
        const json first = get_or_null(get_or_null(single.front(), "SpecialToken"), "id");
        if (truthy(first)) {
          if (!have_cfg) {
            special_bos = first;
          } else if (first != special_bos && first != special_cls) {
            if (!truthy(special_bos)) cfg["bos_token"] = special_bos = first;
            if (!truthy(special_cls)) cfg["cls_token"] = special_cls = first;
          }
          set_add("bos", first == special_bos || first == special_cls);
        }
        const json last = get_or_null(get_or_null(single.back(), "SpecialToken"), "id");
        if (truthy(last)) {
          if (!have_cfg) {
            special_eos = last;
          } else if (last != special_eos) {
            if (!has_type("eot")) {
              types.push_back("eot");
              cfg["eot_token"] = special_eos;
            } else if (!has_type("eom")) {
              types.push_back("eom");
              cfg["eom_token"] = special_eos;
            }
            cfg["eos_token"] = special_eos = last;
          }
          set_add("eos", last == special_eos);
        }
      }
    }

    std::optional<json> chat_template;
    if (have_cfg) {
      if (cfg.contains("chat_template")) {
        chat_template = cfg["chat_template"];
      } else if (fs::exists(dir / "chat_template.jinja")) {
        chat_template = json(read_text_file(dir / "chat_template.jinja"));
      } else if (fs::exists(dir / "chat_template.json")) {
        chat_template = get_or_null(read_json_file(dir / "chat_template.json"), "chat_template");
      }
      for (const std::string& typ : types) {
        if (const json a = get_or_null(cfg, "add_" + typ + "_token"); a.is_boolean()) set_add(typ, a.get<bool>());
        const json entry = get_or_null(cfg, typ + "_token");
        std::string content;
        if (entry.is_string())
          content = entry.get<std::string>();
        else if (entry.is_object() && get_or_null(entry, "content").is_string())
          content = entry["content"].get<std::string>();
        else
          continue;
        // Only tokenizer.json's added tokens are searched, first match.
        for (std::size_t i = 0; added.is_array() && i < added.size(); ++i)
          if (added[i]["content"] == content) {
            set_id(typ, id_of(added[i]["id"]));
            break;
          }
      }
    }
    for (const std::string& typ : types) {
      json id = get_or_null(config, typ + "_token_id");
      if (id.is_null()) id = get_or_null(get_or_null(config, "text_config"), typ + "_token_id");
      if (id.is_number_integer()) set_id(typ, id.get<int64_t>());
    }

    static const std::vector<std::pair<std::string, const char*>> id_keys = {
        {"bos", key::kBos}, {"eos", key::kEos},   {"unk", key::kUnk}, {"sep", key::kSep},
        {"pad", key::kPad}, {"mask", key::kMask}, {"eot", key::kEot}, {"eom", key::kEom},
    };  // no GGUF key for cls: the converter skips it
    for (const auto& [typ, id] : ids) {
      for (const auto& [t, k] : id_keys) {
        if (t != typ) continue;
        if (id >= n)
          fail(typ + "_token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(n) +
               " tokens");
        out.set_u32(k, static_cast<uint32_t>(id));
      }
    }
    static const std::vector<std::pair<std::string, const char*>> add_keys = {
        {"bos", key::kAddBos}, {"eos", key::kAddEos}, {"sep", key::kAddSep}};
    for (const auto& [typ, value] : adds)
      for (const auto& [t, k] : add_keys)
        if (t == typ) out.set_bool(k, value);

    if (chat_template) write_chat_template(out, *chat_template);
  }

  // A string, or a list of {"name", "template"}: "default" becomes
  // tokenizer.chat_template, the others tokenizer.chat_template.<name> (name
  // reduced to [A-Za-z0-9_]) listed in tokenizer.chat_templates.
  static void write_chat_template(GgufWriter& out, const json& t) {
    if (t.is_string()) {
      out.set_string(key::kChatTemplate, t.get<std::string>());
      return;
    }
    if (!t.is_array()) return;  // the converter ignores other types
    std::optional<std::string> default_template;
    std::vector<std::string> names;
    for (const json& choice : t) {
      if (!choice.is_object()) continue;
      const json raw_name = get_or_null(choice, "name");
      std::string name;
      for (char c : raw_name.is_string() ? raw_name.get<std::string>() : std::string()) {
        const auto b = static_cast<unsigned char>(c);
        if ((b & 0xC0) == 0x80) continue;  // one '_' per non-ASCII character, as in Python
        name += b < 0x80 && std::isalnum(b) ? c : '_';
      }
      const json tmpl = get_or_null(choice, "template");
      if (name.empty() || !tmpl.is_string()) continue;
      if (name == "default") {
        default_template = tmpl.get<std::string>();
      } else if (std::find(names.begin(), names.end(), name) == names.end()) {
        names.push_back(name);
        out.set_string(std::string(key::kChatTemplate) + "." + name, tmpl.get<std::string>());
      }
    }
    if (!names.empty()) out.set_strings("tokenizer.chat_templates", names);
    if (default_template) out.set_string(key::kChatTemplate, *default_template);
  }
};

}  // namespace

void write_tokenizer_to_gguf(const fs::path& source, GgufWriter& out, const GgufTokenizerOptions& options) {
  std::error_code ec;
  const bool is_dir = fs::is_directory(source, ec);
  const fs::path dir = is_dir ? source : source.parent_path();
  const fs::path path = is_dir ? source / "tokenizer.json" : source;
  if (!fs::is_regular_file(path, ec)) {
    if (is_dir && fs::is_regular_file(dir / "tiktoken.model", ec))
      throw Error(dir.string() + ": tiktoken.model tokenizers cannot be written to GGUF (only tokenizer.json)");
    throw Error(path.string() + ": no such tokenizer.json");
  }
  const json root = read_json_file(path);
  if (!root.is_object()) throw Error(path.string() + ": top level is not an object");
  try {
    Writer{dir, path.string(), root, options}.write(out);
  } catch (const json::exception& e) {
    throw Error(path.string() + ": unexpected JSON structure: " + e.what());
  }
}

}  // namespace strata

#include "runtime/k3_chat.h"

#include <algorithm>
#include <limits>
#include <map>

#include "template/json.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata {
namespace {

using ojson = nlohmann::ordered_json;

constexpr const char* kOpen = "<|open|>";
constexpr const char* kClose = "<|close|>";
constexpr const char* kSep = "<|sep|>";
constexpr const char* kEndOfMsg = "<|end_of_msg|>";
constexpr const char* kImagePlaceholder = "<|kimi_image_placeholder|>";

// Python's truthiness, which the script uses for "is there a value".
bool truthy(const ojson& j) {
  if (j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  // json::empty() is false for every string (size() counts values, not bytes).
  if (j.is_string()) return !j.get_ref<const std::string&>().empty();
  if (j.is_array() || j.is_object()) return !j.empty();
  if (j.is_number_float()) return j.get<double>() != 0.0;
  if (j.is_number()) return j.get<int64_t>() != 0;
  return true;
}

// dict.get(key): null when absent (or when `j` is not an object).
ojson get(const ojson& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? ojson(nullptr) : *it;
}

std::string dumps(const ojson& j, bool compact) {
  tmpl::JsonDumpOptions o;
  o.ensure_ascii = false;
  if (compact) o.separators = std::make_pair(std::string(","), std::string(":"));
  return tmpl::json_dumps(tmpl::from_json(j), o);
}

// str(value) for what the script puts into attributes and text.
std::string str(const ojson& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
  if (j.is_null()) return "None";
  return dumps(j, false);
}

// Python's sorted(dict.items()) applied at every depth: nlohmann::json's
// std::map orders keys by their UTF-8 bytes, which is code point order, as
// Python compares str.
// Nested deeper than this is refused, not recursed into (hostile requests).
constexpr int kMaxSortDepth = 128;

ojson deep_sort(const ojson& j, int depth = 0) {
  if (depth > kMaxSortDepth) throw Error("Kimi K3 chat: tools or a schema nested deeper than 128 levels");
  if (j.is_object()) {
    std::map<std::string, const ojson*> sorted;
    for (auto it = j.begin(); it != j.end(); ++it) sorted[it.key()] = &it.value();
    ojson out = ojson::object();
    for (const auto& [k, v] : sorted) out[k] = deep_sort(*v, depth + 1);
    return out;
  }
  if (j.is_array()) {
    ojson out = ojson::array();
    for (const auto& v : j) out.push_back(deep_sort(v, depth + 1));
    return out;
  }
  return j;
}

std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const auto b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

std::string escape_attr(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

class Writer {
 public:
  std::vector<K3Segment> segments;

  void control(const std::string& t) { add(t, true); }
  void text(const std::string& t) { add(t, false); }

  void open(const std::string& tag, const std::vector<std::pair<std::string, std::string>>& attrs = {}) {
    control(kOpen);
    text(tag);
    for (const auto& [k, v] : attrs) text(" " + k + "=\"" + escape_attr(v) + "\"");
    control(kSep);
  }
  void close(const std::string& tag) {
    control(kClose);
    text(tag);
    control(kSep);
  }
  void end_of_msg() { control(kEndOfMsg); }

  // A string, or a list of parts: text parts as text, image parts as the
  // placeholder the vision processor expands later.
  void content(const ojson& c) {
    if (c.is_string()) return text(c.get<std::string>());
    if (c.is_null()) return;
    if (!c.is_array()) throw Error("Kimi K3 chat: message content must be a string, a list of parts or null");
    for (const auto& part : c) {
      const std::string type = get(part, "type").is_string() ? part["type"].get<std::string>() : "";
      if (type == "image" || type == "image_url") {
        control(kImagePlaceholder);
      } else {
        const ojson t = get(part, "text");
        if (t.is_null()) throw Error("Kimi K3 chat: a content part of type '" + type + "' has no text");
        text(str(t));
      }
    }
  }

  void internal_system(const std::string& kind, const std::string& body) {
    open("message", {{"role", "system"}, {"type", kind}});
    text(strip(body));
    close("message");
    end_of_msg();
  }

  void tool_declare(const ojson& tools, bool dynamic) {
    const std::string json = "```json\n" + dumps(tools, true) + "\n```";
    if (dynamic)
      internal_system("tool-declare",
                      "## New Tools Available\n"
                      "The system dynamically extends the toolset via lazy-loading.\n"
                      "You have access to all existing and extended tools.\n"
                      "Here are the specs for the extended tools.\n\n" +
                          json);
    else
      internal_system("tool-declare", "# Tools\nHere are the available tools, described in JSONSchema.\n\n" + json);
  }

 private:
  void add(const std::string& t, bool special) {
    if (!t.empty()) segments.push_back({t, special});
  }
};

std::string xtml_type(const ojson& v) {
  if (v.is_boolean()) return "boolean";
  if (v.is_null()) return "null";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_object()) return "object";
  return "array";
}

const ojson& function_of(const ojson& call) {
  auto it = call.find("function");
  return it == call.end() ? call : *it;
}

// One tool call's arguments: an object (rendered argument by argument), or
// the raw text when it is not JSON at all (rendered as one json block).
struct Arguments {
  ojson object = ojson::object();
  std::optional<std::string> raw;
};

Arguments normalize_arguments(const ojson& a) {
  Arguments out;
  if (a.is_null()) return out;
  if (a.is_object()) {
    out.object = a;
    return out;
  }
  if (!a.is_string()) throw Error("Kimi K3 tool call arguments must be a dict or a JSON object string");
  const std::string s = a.get<std::string>();
  if (strip(s).empty()) return out;
  // Arguments nested past the file limit are refused, not echoed raw: they
  // would be dumped recursively when rendered.
  check_json_depth(s, "Kimi K3 tool call arguments");
  ojson parsed = ojson::parse(s, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    out.raw = s;
    return out;
  }
  if (!parsed.is_object()) throw Error("Kimi K3 tool call arguments must be a JSON object");
  out.object = std::move(parsed);
  return out;
}

void render_assistant(Writer& w, const ojson& m, bool thinking) {
  if (thinking) {
    w.open("think");
    ojson reasoning = get(m, "reasoning_content");
    if (!truthy(reasoning)) reasoning = get(m, "reasoning");
    if (!reasoning.is_null() && !strip(str(reasoning)).empty()) w.text(str(reasoning));
    w.close("think");
  }
  w.open("response");
  w.content(get(m, "content"));
  w.close("response");
  const ojson calls = get(m, "tool_calls");
  if (!truthy(calls)) return;
  if (!calls.is_array()) throw Error("Kimi K3 chat: tool_calls must be a list");
  w.open("tools");
  int index = 0;
  for (const auto& call : calls) {
    const ojson& fn = function_of(call);
    if (!fn.contains("name")) throw Error("Kimi K3 chat: a tool call has no name");
    w.open("call", {{"tool", str(fn["name"])}, {"index", std::to_string(++index)}});
    const Arguments args = normalize_arguments(get(fn, "arguments"));
    if (args.raw) {
      w.open("json", {{"type", "object"}});
      w.text(*args.raw);
      w.close("json");
    } else {
      for (auto it = args.object.begin(); it != args.object.end(); ++it) {
        w.open("argument", {{"key", it.key()}, {"type", xtml_type(it.value())}});
        // Strings as they are; anything else as json.dumps with Python's
        // default separators (", ", ": "), keys in the caller's order.
        w.text(it.value().is_string() ? it.value().get<std::string>() : dumps(it.value(), false));
        w.close("argument");
      }
    }
    w.close("call");
  }
  w.close("tools");
}

// normalize_xtml_tool_result_messages: a run of tool results that all answer
// ids of the preceding assistant's tool_calls is put in the calls' order and
// named after the call; a run with any unknown id is left as it came.
ojson order_tool_results(const ojson& messages) {
  ojson out = ojson::array();
  std::map<std::string, std::pair<int, ojson>> call_index;  // id -> (position, name)
  auto id_text = [](const ojson& id) { return str(id); };
  std::size_t i = 0;
  while (i < messages.size()) {
    const ojson& m = messages[i];
    const std::string role = get(m, "role").is_string() ? m["role"].get<std::string>() : "";
    if (role == "assistant") {
      call_index.clear();
      const ojson calls = get(m, "tool_calls");
      if (calls.is_array()) {
        int position = 0;
        for (const auto& call : calls) {
          ++position;
          const ojson id = get(call, "id");
          if (!id.is_null()) call_index.emplace(id_text(id), std::make_pair(position, get(function_of(call), "name")));
        }
      }
      out.push_back(m);
      ++i;
      continue;
    }
    if (role != "tool") {
      out.push_back(m);
      ++i;
      continue;
    }
    std::vector<std::pair<int, ojson>> run;
    bool unresolved = false;
    for (; i < messages.size() && get(messages[i], "role") == "tool"; ++i) {
      const ojson& t = messages[i];
      const ojson id = t.contains("tool_call_id") ? t["tool_call_id"] : get(t, "id");
      auto target = id.is_null() ? call_index.end() : call_index.find(id_text(id));
      if (target == call_index.end()) {
        unresolved = true;
        run.emplace_back(0, t);
        continue;
      }
      ojson resolved = t;
      const auto& [position, name] = target->second;
      if (!name.is_null()) {
        resolved["tool"] = name;
        if (resolved.contains("name")) resolved["name"] = name;
      }
      run.emplace_back(position, std::move(resolved));
    }
    if (!unresolved)
      std::stable_sort(run.begin(), run.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [_, t] : run) out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

std::vector<K3Segment> k3_chat_segments(const ojson& messages_in, const ojson& tools, const K3ChatOptions& options) {
  if (!messages_in.is_array()) throw Error("Kimi K3 chat: messages must be an array");
  const ojson messages = order_tool_results(messages_in);
  Writer w;
  if (truthy(tools)) w.tool_declare(deep_sort(tools), false);

  const std::string effort = options.thinking_effort.value_or("");
  if (options.thinking && !effort.empty()) {
    if (effort != "low" && effort != "medium" && effort != "high" && effort != "max")
      throw Error("Kimi K3 chat: unsupported thinking_effort '" + effort +
                  "'; supported values are low, medium, high, max");
    w.internal_system("thinking-effort",
                      "`thinking_effort` guides on how much to think in your thinking channel (not including the "
                      "response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
                      "Now the system is invoked with `thinking_effort=" +
                          effort + "`.");
  }

  ojson prior_calls;
  int tool_index = 0;
  for (const auto& m : messages) {
    if (!m.is_object()) continue;
    if (!m.contains("role") || !m["role"].is_string()) throw Error("Kimi K3 chat: a message has no role");
    const std::string role = m["role"].get<std::string>();
    if (role == "system" && truthy(get(m, "tools"))) {
      w.tool_declare(deep_sort(m["tools"]), true);
    } else if (role == "user" || role == "system") {
      std::vector<std::pair<std::string, std::string>> attrs{{"role", role}};
      if (truthy(get(m, "name"))) attrs.emplace_back("name", str(m["name"]));
      w.open("message", attrs);
      w.content(get(m, "content"));
      w.close("message");
      w.end_of_msg();
    } else if (role == "assistant") {
      prior_calls = get(m, "tool_calls");
      tool_index = 0;
      w.open("message", {{"role", "assistant"}});
      render_assistant(w, m, options.thinking);
      w.close("message");
      w.end_of_msg();
    } else if (role == "tool") {
      ++tool_index;
      // dict.get("tool", dict.get("name")): a "tool" key set to null hides "name".
      ojson name = m.contains("tool") ? m["tool"] : get(m, "name");
      if (name.is_null() && truthy(prior_calls) && prior_calls.is_array() &&
          tool_index <= static_cast<int>(prior_calls.size()))
        name = get(function_of(prior_calls[tool_index - 1]), "name");
      if (name.is_null()) throw Error("Kimi K3 tool message has no resolvable tool name");
      w.open("message", {{"role", "tool"}, {"tool", str(name)}, {"index", std::to_string(tool_index)}});
      w.content(get(m, "content"));
      w.close("message");
      w.end_of_msg();
    }
  }

  if (options.tool_choice == "required" || options.tool_choice == "none") {
    const std::string& choice = *options.tool_choice;
    w.internal_system("tool-choice", "The system is invoked with `tool_choice=" + choice + "`.\nYou MUST " +
                                         (choice == "required" ? "call tools" : "NOT call any tools") +
                                         " in the next message.");
  }

  const ojson& rf = options.response_format;
  const ojson type = rf.is_object() ? get(rf, "type") : rf;
  const std::string raw_note =
      "Your response must be raw JSON data without markdown code blocks (```json) or any additional formatting.";
  if (type == "json_object") {
    w.internal_system("response-format", "The system is invoked with `response_format=json_object`.\n" + raw_note);
  } else if (type == "json_schema") {
    const ojson js = get(rf, "json_schema");
    ojson schema;
    if (!js.is_null()) {
      if (js.is_object() && js.contains("schema")) schema = js["schema"];
      else if (js.is_object() && js.contains("json_schema")) schema = js["json_schema"];
      else schema = js;
    }
    w.internal_system("response-format", "The system is invoked with `response_format=json_schema`.\n" + raw_note +
                                             "\nThe JSON data must match the following schema:\n```json\n" +
                                             dumps(deep_sort(schema), true) + "\n```");
  }

  if (options.add_generation_prompt) {
    w.open("message", {{"role", "assistant"}});
    w.open(options.thinking ? "think" : "response");
  }
  return std::move(w.segments);
}

std::vector<int32_t> k3_encode_segments(const Tokenizer& tok, const std::vector<K3Segment>& segments) {
  return *k3_encode_segments(tok, segments, std::numeric_limits<std::size_t>::max());
}

std::optional<std::vector<int32_t>> k3_encode_segments(const Tokenizer& tok, const std::vector<K3Segment>& segments,
                                                       std::size_t max_tokens) {
  std::vector<int32_t> ids;
  for (const auto& s : segments) {
    const std::size_t left = max_tokens - ids.size();
    const auto part = s.allow_special ? tok.encode(s.text, left) : tok.encode_ordinary(s.text, left);
    if (!part) return std::nullopt;
    ids.insert(ids.end(), part->begin(), part->end());
  }
  return ids;
}

std::string k3_segments_text(const std::vector<K3Segment>& segments) {
  std::string out;
  for (const auto& s : segments) out += s.text;
  return out;
}

}  // namespace strata

// strata tokenize: text -> token ids (or ids -> text with --ids), using the
// tokenizer of a checkpoint directory, GGUF file or pack. For checking
// prompts and comparing against other tokenizers.
//
//   strata tokenize MODEL --text "Hello"          -> 19923
//   strata tokenize MODEL --text "Hello" --json   -> {"ids":[19923],"tokens":["Hello"]}
//   strata tokenize MODEL --ids 19923,2058        -> Hello world
#include <climits>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace strata::cli {

namespace {

struct TokenizeArgs {
  std::string model;
  std::optional<std::string> text;
  std::optional<std::string> ids;
  bool json = false;
  bool prompt = false;
};

// "1,2,3" or "1 2 3" (or a mix) -> ids.
std::vector<int32_t> parse_id_list(const std::string& s) {
  std::vector<int32_t> ids;
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ',' || s[i] == ' ') {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < s.size() && s[j] != ',' && s[j] != ' ') ++j;
    const std::string item = s.substr(i, j - i);
    long long v = -1;
    std::size_t used = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 0 || v > INT32_MAX)
      throw Error("--ids: '" + item + "' is not a token id (expected comma-separated non-negative integers)");
    ids.push_back(static_cast<int32_t>(v));
    i = j;
  }
  if (ids.empty()) throw Error("--ids: no token ids given");
  return ids;
}

// JSON output must be valid UTF-8; decoded text may end inside a character.
std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

int run_tokenize(const TokenizeArgs& a) {
  if (a.text.has_value() == a.ids.has_value()) throw Error("give exactly one of --text and --ids");
  std::error_code ec;
  if (!std::filesystem::exists(a.model, ec))
    throw Error(a.model + ": no such model directory, GGUF file or pack (no tokenizer.json or tiktoken.model)");
  const auto tok = Tokenizer::for_model(a.model);
  if (!tok)
    throw Error(a.model + (std::filesystem::is_directory(a.model, ec)
                               ? ": no tokenizer.json or tiktoken.model in this directory"
                               : ": no tokenizer metadata (tokenizer.ggml.model) in this GGUF file"));

  if (a.text) {
    const std::vector<int32_t> ids = a.prompt ? tok->encode_prompt(*a.text) : tok->encode(*a.text);
    if (a.json) {
      nlohmann::json tokens = nlohmann::json::array();
      for (int32_t id : ids) tokens.push_back(tok->token_text(id));
      std::printf("%s\n", dump({{"ids", ids}, {"tokens", tokens}}).c_str());
    } else {
      std::string line;
      for (int32_t id : ids) line += (line.empty() ? "" : " ") + std::to_string(id);
      std::printf("%s\n", line.c_str());
    }
    return 0;
  }

  const std::vector<int32_t> ids = parse_id_list(*a.ids);
  const std::string text = tok->decode(ids);
  if (a.json) {
    nlohmann::json tokens = nlohmann::json::array();
    for (int32_t id : ids) tokens.push_back(tok->token_text(id));
    std::printf("%s\n", dump({{"text", text}, {"tokens", tokens}}).c_str());
  } else {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
  }
  return 0;
}

}  // namespace

void register_tokenize(CLI::App& app, Action& run) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Encode text to token ids, or decode ids to text");
  add_model_argument(cmd, args->model,
                     "HF model directory or pack (its tokenizer.json or tiktoken.model), or GGUF file (its tokenizer "
                     "metadata)");
  cmd->add_option("--text", args->text, "Text to encode (special tokens written in it are recognized)");
  cmd->add_option("--ids", args->ids, "Token ids to decode, comma-separated");
  cmd->add_flag("--json", args->json, "Print JSON: {\"ids\", \"tokens\"} when encoding, {\"text\", \"tokens\"} when decoding");
  cmd->add_flag("--prompt", args->prompt, "Encode as a prompt: add BOS/EOS as the checkpoint's tokenizer config says");
  cmd->callback([args, &run] { run = [args] { return run_tokenize(*args); }; });
}

}  // namespace strata::cli

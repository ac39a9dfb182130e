#include "formats/hf_checkpoint.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <system_error>

#include "util/error.h"
#include "util/json_file.h"
#include "util/mapped_file.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

using json = nlohmann::json;

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

[[noreturn]] void fail(const std::string& where, const std::string& what) { throw Error(where + ": " + what); }

// Follows symlinks, and treats unreadable entries as absent rather than throwing.
bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

json read_json(const fs::path& path) {
  MappedFile f(path);
  return parse_json(std::string_view(reinterpret_cast<const char*>(f.data()), f.size()), f.path());
}

// Shards must live in the model directory itself: an index that points
// elsewhere ("../x", "/etc/x") is either broken or hostile.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && fs::path(name).filename() == fs::path(name);
}

// *.safetensors directly in `dir`, sorted so that the load order (and so
// which file a duplicate-name error blames first) does not depend on the
// filesystem. Dot files are skipped: they are editor or OS droppings such
// as macOS "._model.safetensors".
std::vector<fs::path> list_safetensors(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    std::string name = p.filename().string();
    if (p.extension() == ".safetensors" && name[0] != '.' && is_file(p)) out.push_back(p);
  }
  if (ec) fail(dir.string(), "cannot list directory: " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

HfCheckpoint::HfCheckpoint(const fs::path& dir) : dir_(dir) {
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) fail(describe(), "not a directory");
  if (fs::path index = dir_ / kIndexName; is_file(index)) {
    load_index(index);
  } else if (fs::path single = dir_ / kSingleName; is_file(single)) {
    load_files({single});
  } else {
    std::vector<fs::path> found = list_safetensors(dir_);
    if (found.empty()) fail(describe(), "no model.safetensors or model.safetensors.index.json");
    load_files(found);
  }
}

void HfCheckpoint::load_index(const fs::path& index_path) {
  const std::string where = index_path.string();
  const json index = read_json(index_path);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    fail(where, "has no \"weight_map\" object");
  const json& weight_map = index["weight_map"];
  if (weight_map.empty()) fail(where, "weight_map is empty");

  // Validate every entry and find the distinct shards before opening any, so
  // a typo in the index is reported as such and not as an I/O error.
  std::map<std::string, std::string> first_user;  // shard -> a tensor mapped to it
  for (const auto& [tensor, shard] : weight_map.items()) {
    if (!shard.is_string()) fail(where, "weight_map entry for tensor " + quote_name(tensor) + " is not a string");
    const auto& name = shard.get_ref<const std::string&>();
    if (!is_plain_file_name(name))
      fail(where, "weight_map entry for tensor " + quote_name(tensor) + " names " + quote_name(name) +
                      ", which is not a file name in the model directory");
    first_user.try_emplace(name, tensor);
  }

  std::map<std::string, const SafetensorsFile*> shards;
  for (const auto& [name, tensor] : first_user) {
    fs::path p = dir_ / name;
    if (!is_file(p))
      fail(where, "shard " + quote_name(name) + " (holding tensor " + quote_name(tensor) + ") not found: " +
                      p.string());
    files_.push_back(std::make_unique<SafetensorsFile>(p));
    shards.emplace(name, files_.back().get());
  }

  for (const auto& [tensor, shard] : weight_map.items()) {
    const SafetensorsFile& file = *shards.at(shard.get_ref<const std::string&>());
    const TensorView* t = file.find(tensor);
    if (!t)
      fail(where, "tensor " + quote_name(tensor) + " is mapped to shard " + quote_name(shard.get<std::string>()) +
                      " but " + file.path() + " does not contain it");
    tensors_.emplace(tensor, t);
  }
}

void HfCheckpoint::load_files(const std::vector<fs::path>& paths) {
  for (const fs::path& p : paths) {
    files_.push_back(std::make_unique<SafetensorsFile>(p));
    for (const TensorView& t : files_.back()->tensors()) {
      auto [it, inserted] = tensors_.emplace(t.name, &t);
      if (!inserted)
        fail(describe(), "tensor " + quote_name(t.name) + " is in both " + it->second->file + " and " + t.file);
    }
  }
}

const TensorView* HfCheckpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

std::vector<std::string> HfCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace strata

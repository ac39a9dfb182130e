#include "runtime/session.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "storage/checksum.h"
#include "util/error.h"

namespace strata {

namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'S', 'S'};
constexpr uint32_t kVersion = 1;

// What must match for a cache to be reused: what the weights are (not where:
// model/weights_identity.h) and the cache geometry (context, ring sizes).
uint64_t fingerprint(const Model& m) {
  nlohmann::json j = {{"weights", m.identity()}, {"context", m.context()}, {"batch", m.max_batch_rows()}};
  const std::string s = j.dump();
  return xxh3_64(s.data(), s.size());
}

}  // namespace

size_t Session::reusable(const std::vector<int32_t>& prompt) const {
  if (!cache || prompt.empty()) return 0;
  size_t n = 0;
  while (n < tokens.size() && n + 1 < prompt.size() && tokens[n] == prompt[n]) ++n;
  return cache->can_rewind_to(static_cast<int64_t>(n)) ? n : 0;
}

Session load_session(const std::filesystem::path& path, const Model& model, std::string* why) {
  Session s;
  std::ifstream in(path, std::ios::binary);
  if (!in) return s;
  char magic[8];
  uint32_t version = 0;
  uint64_t fp = 0, n = 0;
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(&version), 4);
  in.read(reinterpret_cast<char*>(&fp), 8);
  in.read(reinterpret_cast<char*>(&n), 8);
  if (!in || std::memcmp(magic, kMagic, 8) != 0) throw Error(path.string() + ": not a strata session file");
  if (version != kVersion || fp != fingerprint(model)) {
    if (why) *why = path.string() + " was made for other weights, another context or file version; starting afresh";
    return s;
  }
  if (n > static_cast<uint64_t>(model.context())) throw Error(path.string() + ": damaged session file");
  s.tokens.resize(n);
  in.read(reinterpret_cast<char*>(s.tokens.data()), static_cast<std::streamsize>(n * sizeof(int32_t)));
  s.cache = model.new_cache();
  try {
    s.cache->load(in);
  } catch (const Error& e) {
    throw Error(path.string() + ": damaged session file: " + e.what());
  }
  if (s.cache->length() != static_cast<int64_t>(n)) throw Error(path.string() + ": damaged session file");
  return s;
}

void save_session(const std::filesystem::path& path, const Model& model, const Session& s) {
  if (!s.cache) return;
  const std::string tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const uint64_t fp = fingerprint(model), n = s.tokens.size();
    out.write(kMagic, 8);
    out.write(reinterpret_cast<const char*>(&kVersion), 4);
    out.write(reinterpret_cast<const char*>(&fp), 8);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(reinterpret_cast<const char*>(s.tokens.data()), static_cast<std::streamsize>(n * sizeof(int32_t)));
    s.cache->save(out);
    out.flush();
    if (!out) throw Error(tmp + ": cannot write the session");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace strata

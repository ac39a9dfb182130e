#include "runtime/tune_profile.h"

#include <fstream>

#include "storage/atomic_file.h"
#include "util/cache_dir.h"
#include "util/error.h"
#include "util/thread_pool.h"
#include "util/json_file.h"
#include "util/machine_info.h"
#include "util/utc_time.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

// Letters, digits, '.' and '-' only; runs of anything else become one '-'.
std::string file_safe(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) || c == '.';
    if (keep)
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "unknown" : out;
}

}  // namespace

std::string machine_key() {
  const MachineInfo m = this_machine();
  // Memory in whole GiB, rounded: MemTotal moves by a few MiB between boots.
  return file_safe(m.host + "-" + (m.cpu.empty() ? "cpu" : m.cpu) + "-" + std::to_string(m.cores) + "c-" +
                   std::to_string((m.memory_bytes + (1ull << 29)) >> 30) + "g");
}

fs::path default_profile_path() { return strata_cache_dir() / "tune" / (machine_key() + ".json"); }

void save_profile(const TuneProfile& p, const fs::path& path) {
  nlohmann::json j = {{"version", 1},
                      {"machine", p.machine},
                      {"created", p.created.empty() ? utc_now() : p.created},
                      {"threads", p.threads},
                      {"io_depth", p.io_depth},
                      {"piece_bytes", p.piece_bytes},
                      {"prefetch", p.prefetch},
                      {"max_batch", p.max_batch},
                      {"measured", p.measured}};
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  write_file_atomically(path, j.dump(2) + "\n");
}

std::optional<TuneProfile> load_profile(const fs::path& path, const std::string& machine) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  const std::string what = path.string();
  const nlohmann::json j = parse_json(read_text_file(path), what);
  auto bad = [&](const std::string& why) { return Error(what + ": not a tuned profile strata reads: " + why); };
  if (!j.is_object()) throw bad("not a JSON object");
  if (j.value("version", nlohmann::json()) != 1) throw bad("version is not 1");
  TuneProfile p;
  // A whole number in [0, hi] (absent: 0); not a fraction, nor a number
  // past what the field's type holds.
  auto whole = [&](const char* key, int64_t hi) -> int64_t {
    if (!j.contains(key)) return 0;
    const nlohmann::json& v = j.at(key);
    if (!v.is_number_integer()) throw bad(std::string(key) + " is not a whole number");
    if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(hi) : v.get<int64_t>() < 0 || v.get<int64_t>() > hi)
      throw bad(std::string(key) + " out of range (0 to " + std::to_string(hi) + ")");
    return v.get<int64_t>();
  };
  try {
    p.machine = j.at("machine").get<std::string>();
    p.created = j.value("created", "");
    p.prefetch = j.value("prefetch", "");
    p.measured = j.value("measured", nlohmann::json::object());
  } catch (const nlohmann::json::exception&) {
    throw bad("a field has the wrong type");
  }
  p.threads = static_cast<int>(whole("threads", kMaxThreads));
  p.io_depth = static_cast<unsigned>(whole("io_depth", 1024));
  p.piece_bytes = static_cast<uint64_t>(whole("piece_bytes", int64_t{1} << 30));
  p.max_batch = whole("max_batch", 4096);
  if (p.piece_bytes % 4096 != 0) throw bad("piece_bytes must be a multiple of 4096 up to 1 GiB");
  if (!p.prefetch.empty() && p.prefetch != "on" && p.prefetch != "off") throw bad("prefetch must be on or off");
  if (p.machine != machine)
    throw Error(what + ": tuned on another machine (" + p.machine + ", this is " + machine +
                "): run strata tune here, or --profile none");
  return p;
}

void apply_profile(const TuneProfile& p, const fs::path& path, LoadOptions& o) {
  if (o.threads == 0 && p.threads > 0) o.threads = p.threads;
  if (o.io_depth == 0 && p.io_depth > 0) o.io_depth = p.io_depth;
  if (o.piece_bytes == 0 && p.piece_bytes > 0) o.piece_bytes = p.piece_bytes;
  if (o.prefetch == LoadOptions::Prefetch::Auto && !p.prefetch.empty())
    o.prefetch = p.prefetch == "on" ? LoadOptions::Prefetch::On : LoadOptions::Prefetch::Off;
  if (o.max_batch == 0 && p.max_batch > 0) o.max_batch_cap = p.max_batch;
  o.profile = path.string();
}

std::string describe_profile(const TuneProfile& p) {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (p.threads > 0) add("threads " + std::to_string(p.threads));
  if (p.io_depth > 0) add("io depth " + std::to_string(p.io_depth));
  if (p.piece_bytes > 0) add("pieces " + std::to_string(p.piece_bytes >> 10) + " KiB");
  if (!p.prefetch.empty()) add("prefetch " + p.prefetch);
  if (p.max_batch > 0) add("prefill rows " + std::to_string(p.max_batch));
  return s.empty() ? "nothing tuned" : s;
}

}  // namespace strata

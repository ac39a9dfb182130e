#include "storage/probe.h"
#include "util/cache_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "storage/storage.h"
#include "util/error.h"
#include "util/utc_time.h"
#include "util/json_file.h"
#include "util/median.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  return buf;
}

std::string size_label(uint64_t bytes) {
  if (bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

// ---- test files, removed on every exit path, signals included ----

constexpr int kMaxTempFiles = 64;
char g_temp_paths[kMaxTempFiles][4096];
volatile sig_atomic_t g_temp_used[kMaxTempFiles];
struct sigaction g_old_int, g_old_term;
int g_handlers_installed = 0;

void remove_temp_files_and_reraise(int sig) {
  for (int i = 0; i < kMaxTempFiles; ++i)
    if (g_temp_used[i]) unlink(g_temp_paths[i]);
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  raise(sig);
}

class TempFile {
 public:
  explicit TempFile(const std::string& path) {
    for (int i = 0; i < kMaxTempFiles; ++i) {
      if (!g_temp_used[i] && path.size() < sizeof g_temp_paths[i]) {
        std::strcpy(g_temp_paths[i], path.c_str());
        g_temp_used[i] = 1;
        slot_ = i;
        break;
      }
    }
    if (g_handlers_installed++ == 0) {
      struct sigaction sa;
      std::memset(&sa, 0, sizeof sa);
      sa.sa_handler = remove_temp_files_and_reraise;
      sigemptyset(&sa.sa_mask);
      sigaction(SIGINT, &sa, &g_old_int);
      sigaction(SIGTERM, &sa, &g_old_term);
    }
    path_ = path;
  }
  ~TempFile() {
    unlink(path_.c_str());
    if (slot_ >= 0) g_temp_used[slot_] = 0;
    if (--g_handlers_installed == 0) {
      sigaction(SIGINT, &g_old_int, nullptr);
      sigaction(SIGTERM, &g_old_term, nullptr);
    }
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int slot_ = -1;
};

void drop_from_page_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Writes `bytes` of incompressible, non-repeating data, fsyncs, drops it from
// the page cache. Throws strata::Error naming `dir` on failure.
void write_test_file(const std::string& dir, const std::string& path, uint64_t bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
  if (fd < 0 && errno == EINVAL) fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw Error(dir + ": cannot create a probe file: " + std::strerror(errno));
  constexpr uint64_t kChunk = 16ull << 20;
  AlignedBuffer buf(kChunk, false);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  auto* words = reinterpret_cast<uint64_t*>(buf.data());
  for (size_t i = 0; i < kChunk / 8; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    words[i] = x;
  }
  for (uint64_t done = 0, chunk = 0; done < bytes; ++chunk) {
    // A different stamp in every 4 KiB block, so no two blocks are equal.
    for (size_t b = 0; b < kChunk / kIoAlign; ++b) words[b * (kIoAlign / 8)] = (chunk << 32) | b;
    const uint64_t n = std::min(kChunk, bytes - done);
    uint64_t off = 0;
    while (off < n) {
      ssize_t w = ::pwrite(fd, buf.data() + off, n - off, static_cast<off_t>(done + off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        int e = w < 0 ? errno : ENOSPC;
        ::close(fd);
        if (e == ENOSPC) throw Error(dir + ": no space left on the drive for the probe file (a smaller one: strata probe --size, strata tune --test-file-mib)");
        throw Error(dir + ": cannot write the probe file: " + std::strerror(e));
      }
      off += static_cast<uint64_t>(w);
    }
    done += n;
  }
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    throw Error(dir + ": cannot fsync the probe file: " + std::strerror(e));
  }
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

struct Target {
  std::string given;    // path as the user gave it
  std::string file;     // what is read
  uint64_t size = 0;
  uint64_t dev = 0;
  bool created = false;
  std::unique_ptr<TempFile> temp;
};

// Reads random block-sized extents from every target at `depth` each, for
// `seconds`; returns GB/s over all of them.
double measure(std::vector<Target*> targets, uint64_t block, unsigned depth, double seconds,
               const std::string& backend, std::string* used_backend, bool* all_direct, uint64_t seed) {
  StorageOptions so;
  so.queue_depth = depth;
  so.piece_bytes = 0;  // the drive sees exactly `block`-sized reads
  so.backend = backend;
  auto storage = make_storage(so);
  if (used_backend) *used_backend = std::string(storage->backend());
  const size_t n = targets.size();
  BufferPool pool(block, n * depth);
  storage->register_buffers(pool.regions());
  std::vector<FileId> ids;
  for (Target* t : targets) {
    drop_from_page_cache(t->file);
    ids.push_back(storage->open(t->file, OpenMode::Auto));
    if (all_direct && !storage->file(ids.back()).direct) *all_direct = false;
  }
  std::mt19937_64 rng(seed);
  auto extent_for = [&](size_t slot) {
    const size_t t = slot / depth;
    const uint64_t span = (targets[t]->size - block) / kIoAlign;
    const uint64_t off = (span == 0 ? 0 : rng() % (span + 1)) * kIoAlign;
    return Extent{ids[t], off, block, pool.buffer(slot), slot, pool.buffer_bytes()};
  };
  std::vector<Extent> first;
  for (size_t s = 0; s < n * depth; ++s) first.push_back(extent_for(s));

  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto deadline = start + std::chrono::duration<double>(seconds);
  storage->submit(first);
  uint64_t bytes = 0;
  auto last = start;
  std::vector<Completion> done;
  while (storage->pending() > 0) {
    done.clear();
    storage->wait(done, 1);
    const auto now = clock::now();
    for (const auto& c : done) {
      if (!c.ok()) throw Error(c.message);
      bytes += c.bytes;
      last = now;
      if (now < deadline) {
        Extent e = extent_for(c.tag);
        storage->submit({&e, 1});
      }
    }
  }
  const double elapsed = std::chrono::duration<double>(last - start).count();
  return elapsed > 0 ? static_cast<double>(bytes) / elapsed / 1e9 : 0.0;
}

void pick_best(ProbeDrive& d) {
  d.best_gbps = 0;
  for (const auto& m : d.results)
    if (m.gbps > d.best_gbps) {
      d.best_gbps = m.gbps;
      d.best_block = m.block;
      d.best_depth = m.depth;
    }
}

std::string block_device_name(uint64_t dev) {
  const std::string link = "/sys/dev/block/" + device_string(dev);
  std::error_code ec;
  fs::path target = fs::read_symlink(link, ec);
  if (ec) return "dev " + device_string(dev);
  return target.filename().string();
}

nlohmann::json drive_json(const ProbeDrive& d) {
  nlohmann::json results = nlohmann::json::array();
  for (const auto& m : d.results)
    results.push_back({{"block", m.block}, {"depth", m.depth}, {"gbps", m.gbps}, {"samples", m.samples}});
  return {{"path", d.path},
          {"device", d.device},
          {"name", d.name},
          {"file_bytes", d.file_bytes},
          {"created_file", d.created_file},
          {"direct", d.direct},
          {"best_gbps", d.best_gbps},
          {"best_block", d.best_block},
          {"best_depth", d.best_depth},
          {"results", results}};
}

ProbeDrive drive_from_json(const nlohmann::json& j) {
  ProbeDrive d;
  d.path = j.at("path").get<std::string>();
  d.device = j.at("device").get<std::string>();
  d.name = j.value("name", std::string());
  d.file_bytes = j.value("file_bytes", uint64_t{0});
  d.created_file = j.value("created_file", false);
  d.direct = j.value("direct", true);
  d.best_gbps = j.at("best_gbps").get<double>();
  d.best_block = j.at("best_block").get<uint64_t>();
  d.best_depth = j.at("best_depth").get<unsigned>();
  for (const auto& m : j.at("results"))
    d.results.push_back({m.at("block").get<uint64_t>(), m.at("depth").get<unsigned>(), m.at("gbps").get<double>(),
                         m.value("samples", std::vector<double>{})});
  return d;
}

}  // namespace

double ProbeDrive::best_gbps_for(uint64_t block) const {
  double best = 0;
  for (const auto& m : results)
    if (m.block == block) best = std::max(best, m.gbps);
  return best;
}

std::string device_string(uint64_t dev) { return std::to_string(major(dev)) + ":" + std::to_string(minor(dev)); }

std::string device_of(const fs::path& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "";
  return device_string(S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev);
}

const ProbeDrive* ProbeResult::drive_for(const fs::path& path) const {
  const std::string dev = device_of(path);
  if (dev.empty()) return nullptr;
  for (const auto& d : drives)
    if (d.device == dev) return &d;
  return nullptr;
}

ProbeResult run_probe(const ProbeOptions& o) {
  if (o.paths.empty()) throw Error("probe: give at least one path (a directory on each drive)");
  if (o.blocks.empty() || o.depths.empty()) throw Error("probe: need at least one block size and one depth");
  const uint64_t max_block = *std::max_element(o.blocks.begin(), o.blocks.end());
  for (uint64_t b : o.blocks)
    if (b == 0 || b % kIoAlign != 0) throw Error("probe: block size must be a positive multiple of 4 KiB");
  for (unsigned d : o.depths)
    if (d == 0 || d > 1024) throw Error("probe: queue depths must be between 1 and 1024");
  if (!(o.seconds > 0)) throw Error("probe: --seconds must be positive");
  if (o.rounds == 0 || o.rounds > 100) throw Error("probe: --rounds must be between 1 and 100");
  auto say = [&](const std::string& line) {
    if (o.progress) o.progress(line);
  };

  // Validate every path before writing anything.
  std::vector<Target> targets(o.paths.size());
  for (size_t i = 0; i < o.paths.size(); ++i) {
    const std::string& p = o.paths[i];
    struct stat st;
    if (::stat(p.c_str(), &st) != 0) throw Error(p + ": " + std::strerror(errno));
    Target& t = targets[i];
    t.given = p;
    if (S_ISDIR(st.st_mode)) {
      t.dev = st.st_dev;
      if (o.file_bytes < max_block) throw Error(p + ": --size must be at least the block size");
      struct statvfs vfs;
      if (::statvfs(p.c_str(), &vfs) != 0) throw Error(p + ": cannot stat the filesystem: " + std::strerror(errno));
      const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
      if (free_bytes < o.file_bytes + (64ull << 20))
        throw Error(p + ": not enough free space for a " + gib(o.file_bytes) + " probe file (" + gib(free_bytes) +
                    " free); a smaller one fits: strata probe --size, strata tune --test-file-mib");
      if (::access(p.c_str(), W_OK) != 0) throw Error(p + ": directory is not writable");
      t.size = align_down(o.file_bytes);
    } else if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) {
      t.dev = S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev;
      t.file = p;
      t.size = static_cast<uint64_t>(st.st_size);
      if (S_ISBLK(st.st_mode)) {
        auto s = make_storage();
        FileId id = s->open(p, OpenMode::Auto);
        t.size = s->file(id).size;
      }
      if (t.size < max_block)
        throw Error(p + ": file is too small to probe (" + std::to_string(t.size) + " bytes; need at least " +
                    size_label(max_block) + ")");
    } else {
      throw Error(p + ": not a directory, regular file or block device");
    }
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    Target& t = targets[i];
    if (!t.file.empty()) continue;
    const std::string file = (fs::path(t.given) / (".strata-probe-" + std::to_string(getpid()) + "-" +
                                                   std::to_string(i) + ".bin"))
                                 .string();
    t.temp = std::make_unique<TempFile>(file);
    say("writing " + gib(t.size) + " test file in " + t.given);
    write_test_file(t.given, file, t.size);
    t.file = file;
    t.created = true;
  }

  ProbeResult r;
  r.created = utc_now();
  r.seconds_per_point = o.seconds;
  r.rounds = o.rounds;
  uint64_t seed = 1;
  auto sweep = [&](std::vector<Target*> ts, ProbeDrive& d, const std::string& label) {
    for (uint64_t block : o.blocks)
      for (unsigned depth : o.depths) d.results.push_back({block, depth, 0.0, {}});
    // Round after round over every point, so a slow spell of the drive falls
    // on all of them alike rather than on one.
    for (unsigned round = 1; round <= o.rounds; ++round)
      for (auto& m : d.results) {
        const double g = measure(ts, m.block, m.depth, o.seconds / o.rounds, o.backend, &r.backend, &d.direct, seed++);
        m.samples.push_back(g);
        char line[192];
        std::snprintf(line, sizeof line, "%s: %s reads, depth %u, round %u/%u: %.2f GB/s", label.c_str(),
                      size_label(m.block).c_str(), m.depth, round, o.rounds, g);
        say(line);
      }
    for (auto& m : d.results) m.gbps = median(m.samples);
    pick_best(d);
  };
  for (Target& t : targets) {
    ProbeDrive d;
    d.path = t.given;
    d.device = device_string(t.dev);
    d.name = block_device_name(t.dev);
    d.file_bytes = t.size;
    d.created_file = t.created;
    sweep({&t}, d, t.given);
    r.drives.push_back(std::move(d));
  }
  if (targets.size() == 1) {
    r.combined = r.drives[0];
  } else {
    r.combined.name = "all";
    std::vector<Target*> all;
    for (Target& t : targets) {
      all.push_back(&t);
      r.combined.file_bytes += t.size;
      r.combined.created_file = r.combined.created_file || t.created;
    }
    sweep(all, r.combined, "all " + std::to_string(targets.size()) + " paths");
  }
  r.combined.path = "all";
  r.combined.device.clear();
  r.combined.name = "all";
  return r;  // temp files go with `targets`
}

fs::path default_probe_path() { return strata_cache_dir() / "probe.json"; }

std::string probe_to_json(const ProbeResult& r) {
  nlohmann::json drives = nlohmann::json::array();
  for (const auto& d : r.drives) drives.push_back(drive_json(d));
  nlohmann::json j = {{"version", r.version},
                      {"created", r.created},
                      {"backend", r.backend},
                      {"seconds_per_point", r.seconds_per_point},
                      {"rounds", r.rounds},
                      {"drives", drives},
                      {"combined", drive_json(r.combined)}};
  return j.dump(2) + "\n";
}

void save_probe(const ProbeResult& r, const fs::path& path) {
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  if (ec) throw Error(path.parent_path().string() + ": cannot create directory: " + ec.message());
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error(tmp.string() + ": cannot write: " + std::strerror(errno));
    f << probe_to_json(r);
    if (!f.flush()) throw Error(tmp.string() + ": cannot write: " + std::strerror(errno));
  }
  fs::rename(tmp, path, ec);
  if (ec) throw Error(path.string() + ": cannot write: " + ec.message());
}

std::optional<ProbeResult> load_probe(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    if (errno == ENOENT || !fs::exists(path)) return std::nullopt;
    throw Error(path.string() + ": cannot read: " + std::strerror(errno));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = parse_json_or_discarded(ss.str());
  if (j.is_discarded() || !j.is_object()) throw Error(path.string() + ": not a strata probe file (invalid JSON)");
  try {
    ProbeResult r;
    r.version = j.at("version").get<int>();
    if (r.version != 1)
      throw Error(path.string() + ": probe file version " + std::to_string(r.version) + " is not supported");
    r.created = j.value("created", std::string());
    r.backend = j.value("backend", std::string());
    r.seconds_per_point = j.value("seconds_per_point", 0.0);
    r.rounds = j.value("rounds", 1u);
    for (const auto& d : j.at("drives")) r.drives.push_back(drive_from_json(d));
    r.combined = drive_from_json(j.at("combined"));
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw Error(path.string() + ": not a strata probe file (" + e.what() + ")");
  }
}

std::optional<ProbeResult> load_probe() { return load_probe(default_probe_path()); }

std::string format_probe_table(const ProbeResult& r) {
  std::vector<unsigned> depths;
  std::vector<uint64_t> blocks;
  auto collect = [&](const ProbeDrive& d) {
    for (const auto& m : d.results) {
      if (std::find(depths.begin(), depths.end(), m.depth) == depths.end()) depths.push_back(m.depth);
      if (std::find(blocks.begin(), blocks.end(), m.block) == blocks.end()) blocks.push_back(m.block);
    }
  };
  for (const auto& d : r.drives) collect(d);
  collect(r.combined);
  std::sort(depths.begin(), depths.end());

  size_t w = 14;  // "all together"
  for (const auto& d : r.drives) w = std::max(w, d.name.size() + d.path.size() + 3);
  std::ostringstream out;
  char cell[64];
  out << "O_DIRECT random reads through " << r.backend << ", " << r.seconds_per_point << " s per point";
  if (r.rounds > 1) out << " in " << r.rounds << " rounds, the median of each";
  out << ", GB/s (10^9 B/s)\n";
  out << std::string(w, ' ') << "   block";
  for (unsigned d : depths) {
    std::snprintf(cell, sizeof cell, "  %6s", ("qd " + std::to_string(d)).c_str());
    out << cell;
  }
  out << "  best\n";
  auto rows = [&](const ProbeDrive& d, const std::string& label) {
    bool first = true;
    for (uint64_t b : blocks) {
      out << (first ? label : "") << std::string(w - (first ? label.size() : 0), ' ');
      std::snprintf(cell, sizeof cell, "%8s", size_label(b).c_str());
      out << cell;
      for (unsigned q : depths) {
        double g = -1;
        for (const auto& m : d.results)
          if (m.block == b && m.depth == q) g = m.gbps;
        if (g < 0)
          std::snprintf(cell, sizeof cell, "  %6s", "-");
        else
          std::snprintf(cell, sizeof cell, "  %6.2f", g);
        out << cell;
      }
      if (first) {
        std::snprintf(cell, sizeof cell, "  %.2f (%s, qd %u)", d.best_gbps, size_label(d.best_block).c_str(),
                      d.best_depth);
        out << cell;
      }
      out << "\n";
      first = false;
    }
  };
  for (const auto& d : r.drives) rows(d, d.name + " (" + d.path + ")");
  if (r.drives.size() > 1) rows(r.combined, "all together");
  return out.str();
}

}  // namespace strata

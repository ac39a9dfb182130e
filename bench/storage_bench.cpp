// storage_bench: what the Storage layer achieves for expert reads, next to
// what `strata probe` calls the drive's ceiling, measured side by side in one
// run (rounds interleave the variants; medians are reported, since these
// disks swing ~2x between runs). Not run in CI.
//
//   storage_bench DIR_OR_FILE [--size GiB] [--rounds N] [--seconds S] [--depth D] [--experts K]
//                 [--blob MiB] [--piece MiB]
//
// DIR: a test file of --size GiB (default 4) is written there and removed at
// the end. FILE: read as is (a pack's strata-experts-*.bin with --blob set to
// its expert length rounded up to 4 KiB measures that pack's reads). The file
// is cut into --blob MiB "expert blobs" (default 16; as `pack` lays them out:
// 4 KiB-aligned, contiguous); every blob's xxh3 is computed once up front so
// verification can be measured too. Storage splits each blob into --piece MiB
// reads (default: Storage's own piece size; 0 = whole blobs).
//
// Variants (all O_DIRECT, blob-sized reads unless said):
//   probe        run_probe(): depth D kept full the whole time (the ceiling)
//   probe pieces run_probe() with piece-sized reads at random offsets, depth D:
//                what the drive gives to reads of that size that are not adjacent
//   stream       Storage (io_uring), depth D kept full, random blobs, registered pool
//   layers       Storage (io_uring): K blobs per "layer" submitted at once, wait for all, next layer
//   layers+xxh3  as layers, each blob verified against its checksum on landing
//   layers x2    as layers, but the next layer is submitted before waiting (2 layers in flight)
//   layers x2+xxh3  both
//   pread layers as layers on the pread thread pool
//   fio          (when fio is installed) fio --ioengine=io_uring --direct=1 --rw=randread
//                --bs=BLOB --iodepth=D on the same file: an independent reference
//   fio fixedbufs  the same with --fixedbufs --registerfiles
//
// Measured on the 2-core dev VM (virtio disk, 4 GiB file that the host has
// partly cached; load average ~3 from other builds), 16 MiB blobs, whole, 5 rounds x 3 s, GB/s:
//   variant         median  min   max   vs probe
//   probe            1.61   1.60  1.77   100%
//   stream           1.60   1.59  1.84    99%
//   layers           1.64   1.42  1.71   102%
//   layers+xxh3      1.27   1.21  1.38    79%   hashes of one layer run serially after it lands
//   layers x2        1.74   1.63  1.83   108%
//   layers x2+xxh3   1.69   1.62  1.88   105%   the next layer's reads hide the hashing
//   pread layers     1.61   1.59  1.71   100%
//   fio              1.00   0.94  1.41    62%   4 KiB-page buffers: pinning costs ~1/3
//   fio fixedbufs    1.51   1.24  1.66    94%
//
// On the stream bench's pack (2.74 MiB experts, 1 MiB pieces, depth 4, 8 per layer,
// 3 rounds x 2 s; 2026-11-29 sixth session; fio still read 16 MiB then):
//   storage_bench <pack>/strata-experts-<tag>-0.bin --blob 2.7421875 --piece 1 --depth 4 --rounds 3 --seconds 2
//   probe 1.48, probe pieces 1.95 (131%), stream 1.85 (125%), layers 1.54 (104%),
//   layers x2 1.47 (99%), pread layers 1.55 (105%). This virtual disk serves random
//   1 MiB reads ~1.3x faster than contiguous 2.74 MiB blobs, read whole or as adjacent
//   pieces; at depth 16 the gap closes (probe 1.43, probe pieces 1.55, stream 1.41).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "storage/checksum.h"
#include "storage/probe.h"
#include "storage/storage.h"
#include "util/error.h"
#include "util/median.h"

using namespace strata;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kFileChunk = 16ull << 20;  // the test file is written in these

struct Args {
  std::string path;
  double size_gib = 4;
  int rounds = 5;
  double seconds = 3;
  unsigned depth = 8;
  unsigned experts = 8;
  uint64_t blob = 16ull << 20;   // one expert blob (4 KiB multiple)
  uint64_t piece = kDefaultPieceBytes;  // Storage's piece size for the storage variants
};

void drop_cache(const std::string& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd >= 0) {
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

void write_file(const std::string& path, uint64_t bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  if (fd < 0) throw Error(path + ": cannot create: " + std::strerror(errno));
  AlignedBuffer buf(kFileChunk, false);
  std::mt19937_64 rng(7);
  auto* w = reinterpret_cast<uint64_t*>(buf.data());
  for (uint64_t done = 0; done < bytes; done += kFileChunk) {
    for (size_t i = 0; i < kFileChunk / 8; i += 512) w[i] = rng();  // every 4 KiB block differs
    if (done == 0)
      for (size_t i = 0; i < kFileChunk / 8; ++i) w[i] = rng();
    if (::pwrite(fd, buf.data(), kFileChunk, static_cast<off_t>(done)) != static_cast<ssize_t>(kFileChunk))
      throw Error(path + ": write failed: " + std::strerror(errno));
  }
  fsync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

struct Setup {
  std::string file;
  uint64_t blob = 0;
  uint64_t blobs = 0;
  std::vector<uint64_t> hashes;
};

// Reads random blobs for `seconds`: in "layers" of `experts` (each layer
// submitted at once and waited for, `layers_in_flight` layers outstanding), or
// as a stream that keeps `depth` reads in flight (layers_in_flight = 0).
double run_storage(const Setup& s, const std::string& backend, unsigned depth, unsigned experts, int layers_in_flight,
                   bool verify, double seconds, uint64_t seed, uint64_t piece) {
  StorageOptions o;
  o.backend = backend;
  o.queue_depth = depth;
  o.piece_bytes = piece;
  auto st = make_storage(o);
  const unsigned slots = layers_in_flight == 0 ? depth : experts * static_cast<unsigned>(layers_in_flight);
  BufferPool pool(s.blob, slots);
  st->register_buffers(pool.regions());
  drop_cache(s.file);
  FileId f = st->open(s.file, OpenMode::Direct);
  std::mt19937_64 rng(seed);
  auto extent = [&](uint64_t slot) {
    uint64_t b = rng() % s.blobs;
    return Extent{f, b * s.blob, s.blob, pool.buffer(slot), slot, 0, verify, verify ? s.hashes[b] : 0};
  };
  uint64_t bytes = 0;
  std::vector<Completion> done;
  auto check = [&] {
    for (const auto& c : done) {
      if (!c.ok()) throw Error(c.message);
      bytes += c.bytes;
    }
  };
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(seconds);
  auto last = start;
  if (layers_in_flight == 0) {
    std::vector<Extent> first;
    for (unsigned i = 0; i < depth; ++i) first.push_back(extent(i));
    st->submit(first);
    while (st->pending() > 0) {
      done.clear();
      st->wait(done, 1);
      check();
      last = Clock::now();
      if (last < deadline)
        for (const auto& c : done) {
          Extent e = extent(c.tag);
          st->submit({&e, 1});
        }
    }
  } else {
    // Layer n uses slots [(n % L) * K, (n % L + 1) * K); a new layer is
    // submitted only when the oldest one has fully landed (its slots are free).
    std::map<uint64_t, unsigned> remaining;  // layer -> reads not landed
    auto submit_layer = [&](uint64_t n) {
      std::vector<Extent> layer;
      for (unsigned i = 0; i < experts; ++i) {
        Extent e = extent((n % layers_in_flight) * experts + i);
        e.tag = n;
        layer.push_back(e);
      }
      remaining[n] = experts;
      st->submit(layer);
    };
    uint64_t next = 0;
    for (int i = 0; i < layers_in_flight; ++i) submit_layer(next++);
    while (!remaining.empty()) {
      done.clear();
      st->wait(done, remaining.begin()->second);  // the rest of the oldest layer, at least
      check();
      last = Clock::now();
      for (const auto& c : done) --remaining[c.tag];
      while (!remaining.empty() && remaining.begin()->second == 0) {
        remaining.erase(remaining.begin());
        if (last < deadline) submit_layer(next++);
      }
    }
  }
  return static_cast<double>(bytes) / std::chrono::duration<double>(last - start).count() / 1e9;
}

bool have_fio() { return std::system("fio --version >/dev/null 2>&1") == 0; }

double run_fio(const std::string& file, uint64_t block, unsigned depth, double seconds, bool fixedbufs) {
  drop_cache(file);
  const std::string cmd = "fio --name=probe --filename=" + file +
                          " --readonly --direct=1 --rw=randread --bs=" + std::to_string(block) + " --ioengine=io_uring" + (fixedbufs ? " --fixedbufs --registerfiles" : "") + " --iodepth=" +
                          std::to_string(depth) + " --time_based --runtime=" + std::to_string(seconds) +
                          "s --output-format=json 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw Error("cannot run fio");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded()) throw Error("fio: unreadable output");
  return j["jobs"][0]["read"]["bw_bytes"].get<double>() / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", k.c_str());
        std::exit(2);
      }
      return std::string(argv[++i]);
    };
    if (k == "--size") a.size_gib = std::stod(val());
    else if (k == "--blob" || k == "--piece") {
      const double mib = std::stod(val());
      if (!(mib >= 0 && mib <= 1024)) {
        std::fprintf(stderr, "%s must be between 0 and 1024 MiB\n", k.c_str());
        return 2;
      }
      (k == "--blob" ? a.blob : a.piece) = static_cast<uint64_t>(mib * (1 << 20));
    }
    else if (k == "--rounds") a.rounds = std::stoi(val());
    else if (k == "--seconds") a.seconds = std::stod(val());
    else if (k == "--depth") a.depth = static_cast<unsigned>(std::stoi(val()));
    else if (k == "--experts") a.experts = static_cast<unsigned>(std::stoi(val()));
    else if (a.path.empty() && k[0] != '-') a.path = k;
    else {
      std::fprintf(stderr, "usage: storage_bench DIR_OR_FILE [--size GiB] [--rounds N] [--seconds S] [--depth D] [--experts K] [--blob MiB] [--piece MiB]\n");
      return 2;
    }
  }
  if (a.path.empty() || a.rounds < 1 || a.seconds <= 0 || a.depth < 1 || a.experts < 1 || a.blob == 0 || a.blob % 4096 != 0 ||
      a.piece % 4096 != 0 || a.piece > a.blob) {
    std::fprintf(stderr, "usage: storage_bench DIR_OR_FILE [--size GiB] [--rounds N] [--seconds S] [--depth D] [--experts K] [--blob MiB] [--piece MiB]\n");
    return 2;
  }
  try {
    Setup s;
    bool created = false;
    struct stat st;
    if (::stat(a.path.c_str(), &st) != 0) throw Error(a.path + ": " + std::strerror(errno));
    if (S_ISDIR(st.st_mode)) {
      s.file = a.path + "/.storage-bench-" + std::to_string(getpid()) + ".bin";
      uint64_t bytes = static_cast<uint64_t>(a.size_gib * (1ull << 30)) / kFileChunk * kFileChunk;
      std::fprintf(stderr, "writing %.1f GiB to %s\n", static_cast<double>(bytes) / (1ull << 30), s.file.c_str());
      write_file(s.file, bytes);
      created = true;
    } else {
      s.file = a.path;
    }
    struct FileGuard {
      std::string p;
      bool on;
      ~FileGuard() {
        if (on) unlink(p.c_str());
      }
    } guard{s.file, created};

    s.blob = a.blob;
    {
      auto storage = make_storage();
      FileId f = storage->open(s.file, OpenMode::Direct);
      s.blobs = storage->file(f).size / s.blob;
      if (s.blobs < 2) throw Error(s.file + ": need at least two blobs");
      std::fprintf(stderr, "hashing %llu blobs\n", static_cast<unsigned long long>(s.blobs));
      BufferPool pool(s.blob, 8);
      for (uint64_t b = 0; b < s.blobs; b += 8) {
        std::vector<Extent> ext;
        for (uint64_t i = b; i < std::min(s.blobs, b + 8); ++i) ext.push_back({f, i * s.blob, s.blob, pool.buffer(i - b), i});
        storage->read_all(ext);
        for (uint64_t i = b; i < std::min(s.blobs, b + 8); ++i) s.hashes.push_back(xxh3_64(pool.buffer(i - b), s.blob));
      }
    }

    std::vector<std::string> names = {"probe",     "probe pieces", "stream",         "layers",      "layers+xxh3",
                                      "layers x2", "layers x2+xxh3", "pread layers"};
    if (have_fio()) {
      names.push_back("fio");
      names.push_back("fio fixedbufs");
    }
    // The drive alone, random reads of `block` bytes kept at depth D.
    auto probe_at = [&](uint64_t block) {
      ProbeOptions po;
      po.paths = {s.file};
      po.blocks = {block};
      po.depths = {a.depth};
      po.seconds = a.seconds;
      return run_probe(po).drives[0].results[0].gbps;
    };
    std::map<std::string, std::vector<double>> r;
    uint64_t seed = 1;
    for (int round = 0; round < a.rounds; ++round) {
      for (const auto& n : names) {
        double g = 0;
        if (n == "probe") {
          g = probe_at(s.blob);
        } else if (n == "probe pieces") {
          g = probe_at(a.piece ? a.piece : s.blob);  // the size Storage splits blobs into
        } else if (n == "stream") {
          g = run_storage(s, "io_uring", a.depth, a.experts, 0, false, a.seconds, seed++, a.piece);
        } else if (n == "layers") {
          g = run_storage(s, "io_uring", a.depth, a.experts, 1, false, a.seconds, seed++, a.piece);
        } else if (n == "layers+xxh3") {
          g = run_storage(s, "io_uring", a.depth, a.experts, 1, true, a.seconds, seed++, a.piece);
        } else if (n == "layers x2") {
          g = run_storage(s, "io_uring", a.depth, a.experts, 2, false, a.seconds, seed++, a.piece);
        } else if (n == "layers x2+xxh3") {
          g = run_storage(s, "io_uring", a.depth, a.experts, 2, true, a.seconds, seed++, a.piece);
        } else if (n == "pread layers") {
          g = run_storage(s, "pread", a.depth, a.experts, 1, false, a.seconds, seed++, a.piece);
        } else if (n == "fio") {
          g = run_fio(s.file, s.blob, a.depth, a.seconds, false);
        } else if (n == "fio fixedbufs") {
          g = run_fio(s.file, s.blob, a.depth, a.seconds, true);
        }
        r[n].push_back(g);
        std::fprintf(stderr, "round %d %-13s %.2f GB/s\n", round + 1, n.c_str(), g);
      }
    }
    const double ceiling = median(r["probe"]);
    std::printf("%.2f MiB O_DIRECT blobs read as %.2f MiB pieces, depth %u, %u experts per layer, %d rounds x %.1f s, file %.1f GiB\n",
                static_cast<double>(s.blob) / (1 << 20), static_cast<double>(a.piece ? a.piece : s.blob) / (1 << 20), a.depth,
                a.experts, a.rounds, a.seconds, static_cast<double>(s.blobs * s.blob) / (1ull << 30));
    std::printf("%-14s %8s %8s %8s %9s   samples\n", "variant", "median", "min", "max", "vs probe");
    for (const auto& n : names) {
      const auto& v = r[n];
      std::printf("%-14s %8.2f %8.2f %8.2f %8.0f%%  ", n.c_str(), median(v), *std::min_element(v.begin(), v.end()),
                  *std::max_element(v.begin(), v.end()), 100.0 * median(v) / ceiling);
      for (double x : v) std::printf(" %.2f", x);
      std::printf("\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "storage_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

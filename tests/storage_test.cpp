// Storage: every read the engine makes goes through it. The expected bytes
// come from pread(2) of the same file (an independent path); each case runs on
// both backends (io_uring and the pread pool) and both open modes (O_DIRECT and
// the page cache). Faults (short reads, EIO, corrupt bytes, a slow drive) are
// injected below the shared logic by FaultInjectingStorage.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#define XXH_INLINE_ALL  // an independent build of xxh3 (no run-time dispatch) to compare against
#include <xxhash.h>

#include "storage/checksum.h"
#include "storage/fault_injecting_storage.h"
#include "storage/io_uring_storage.h"
#include "storage/pread_storage.h"
#include "storage/storage.h"
#include "storage_test_support.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using storage_test::make_file;
using storage_test::TempDir;

std::vector<uint8_t> pread_bytes(const fs::path& p, uint64_t offset, uint64_t length) {
  int fd = ::open(p.c_str(), O_RDONLY);
  std::vector<uint8_t> out(length);
  ssize_t n = ::pread(fd, out.data(), length, static_cast<off_t>(offset));
  ::close(fd);
  EXPECT_EQ(n, static_cast<ssize_t>(length));
  return out;
}

std::unique_ptr<Storage> make(const std::string& backend, unsigned qd = 8, uint64_t piece_bytes = kDefaultPieceBytes) {
  StorageOptions o;
  o.backend = backend;
  o.queue_depth = qd;
  o.piece_bytes = piece_bytes;
  return make_storage(o);
}

struct Case {
  std::string backend;
  OpenMode mode;
  uint64_t piece_bytes = kDefaultPieceBytes;  // small pieces: one extent becomes many reads in flight
};

std::string case_name(const testing::TestParamInfo<Case>& i) {
  return i.param.backend + (i.param.mode == OpenMode::Buffered ? "_buffered" : "_direct") +
         (i.param.piece_bytes == kDefaultPieceBytes ? "" : "_pieces" + std::to_string(i.param.piece_bytes / 1024) + "k");
}

class StorageCase : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (GetParam().backend == "io_uring" && !IoUringStorage::available()) GTEST_SKIP() << "no io_uring here";
    file_size_ = 3 * 1024 * 1024 + 1234;
    path_ = make_file(dir_.path(), "blob.bin", file_size_, 42);
  }
  std::unique_ptr<Storage> storage(unsigned qd = 8) { return make(GetParam().backend, qd, GetParam().piece_bytes); }
  // The reads a 64 KiB extent takes (storage.h's rule): one with 1 MiB
  // pieces; four of 16 KiB with 16 KiB pieces; with 12 KiB pieces
  // round(64 / 12) = 5 pieces of 13107.2 bytes, rounded up to whole 4 KiB:
  // 16 KiB each, so four reads too.
  uint64_t pieces_of_64k() const {
    if (GetParam().piece_bytes == kDefaultPieceBytes) return 1;
    if (GetParam().piece_bytes == 16 * 1024 || GetParam().piece_bytes == 12 * 1024) return 4;
    ADD_FAILURE() << "no hand-computed piece count for pieces of " << GetParam().piece_bytes << " bytes";
    return 0;
  }
  FileId open(Storage& s) { return s.open(path_, GetParam().mode); }

  TempDir dir_;
  fs::path path_;
  uint64_t file_size_ = 0;
};

// Random extents, every alignment combination, checked against pread.
void check_random_extents(Storage& s, FileId f, const fs::path& path, uint64_t file_size, bool aligned, int count,
                          uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<AlignedBuffer> bufs;
  std::vector<Extent> ext;
  for (int i = 0; i < count; ++i) {
    uint64_t len = 1 + rng() % (256 * 1024);
    uint64_t off = rng() % (file_size - len);
    size_t shift = 0;
    if (aligned) {
      off = align_down(off);
      len = align_up(len);
      if (off + len > file_size) off = align_down(file_size - len);
    } else {
      shift = rng() % 3 == 0 ? 0 : 1 + rng() % 4000;  // destination misaligned too, mostly
    }
    bufs.emplace_back(len + shift + 8192);
    Extent e{f, off, len, bufs.back().data() + shift, static_cast<uint64_t>(i)};
    ext.push_back(e);
  }
  s.submit(ext);
  std::vector<Completion> done;
  while (done.size() < ext.size()) ASSERT_GT(s.wait(done, ext.size() - done.size()), 0u);
  std::set<uint64_t> tags;
  for (const auto& c : done) {
    ASSERT_TRUE(c.ok()) << c.message;
    const Extent& e = ext[c.tag];
    ASSERT_EQ(c.bytes, e.length);
    tags.insert(c.tag);
    auto want = pread_bytes(path, e.offset, e.length);
    ASSERT_EQ(std::memcmp(e.dest, want.data(), e.length), 0) << "extent " << c.tag << " offset " << e.offset;
  }
  EXPECT_EQ(tags.size(), ext.size());
  EXPECT_EQ(s.pending(), 0u);
}

TEST_P(StorageCase, AlignedExtentsMatchPread) {
  auto s = storage();
  FileId f = open(*s);
  EXPECT_EQ(s->file(f).size, file_size_);
  EXPECT_EQ(s->file(f).direct, GetParam().mode != OpenMode::Buffered);
  check_random_extents(*s, f, path_, file_size_, true, 40, 1);
}

TEST_P(StorageCase, UnalignedExtentsMatchPread) {
  auto s = storage();
  FileId f = open(*s);
  check_random_extents(*s, f, path_, file_size_, false, 60, 2);
}

TEST_P(StorageCase, ExtentsAtEndOfFile) {
  auto s = storage();
  FileId f = open(*s);
  // The last bytes of a file whose size is not a 4 KiB multiple: aligned start,
  // unaligned end, with and without room for the rounded-up read.
  const uint64_t off = align_down(file_size_ - 5000);
  const uint64_t len = file_size_ - off;
  AlignedBuffer roomy(len), tight(len), odd(len + 1);
  std::vector<uint8_t> heap(len);
  std::vector<Extent> ext = {
      {f, off, len, roomy.data(), 0, roomy.size()},
      {f, off, len, tight.data(), 1, len},
      {f, file_size_ - 1, 1, odd.data() + 1, 2},
      {f, off + 17, len - 17, heap.data(), 3},
  };
  s->read_all(ext);
  auto want = pread_bytes(path_, off, len);
  EXPECT_EQ(std::memcmp(roomy.data(), want.data(), len), 0);
  EXPECT_EQ(std::memcmp(tight.data(), want.data(), len), 0);
  EXPECT_EQ(odd.data()[1], want.back());
  EXPECT_EQ(std::memcmp(heap.data(), want.data() + 17, len - 17), 0);
}

TEST_P(StorageCase, ManyExtentsInFlight) {
  auto s = storage(4);
  FileId f = open(*s);
  BufferPool pool(64 * 1024, 600);
  EXPECT_EQ(pool.buffer_bytes(), 64u * 1024);
  s->register_buffers(pool.regions());  // may be false (pread): reads work either way
  std::vector<Extent> ext;
  std::mt19937_64 rng(3);
  for (uint64_t i = 0; i < 600; ++i) {
    uint64_t off = align_down(rng() % (file_size_ - 65536));
    ext.push_back({f, off, 65536, pool.try_acquire(), i, pool.buffer_bytes()});
  }
  EXPECT_EQ(pool.available(), 0u);
  EXPECT_EQ(pool.try_acquire(), nullptr);
  // Submitted in three batches from two threads, drained with poll and wait.
  std::thread other([&] { s->submit(std::span(ext).subspan(0, 200)); });
  s->submit(std::span(ext).subspan(200, 200));
  other.join();
  s->submit(std::span(ext).subspan(400));
  std::vector<Completion> done;
  while (done.size() < ext.size()) {
    if (s->poll(done) == 0) s->wait(done, 1, std::chrono::milliseconds(100));
  }
  for (const auto& c : done) {
    ASSERT_TRUE(c.ok()) << c.message;
    const Extent& e = ext[c.tag];
    auto want = pread_bytes(path_, e.offset, e.length);
    ASSERT_EQ(std::memcmp(e.dest, want.data(), e.length), 0);
    pool.release(static_cast<uint8_t*>(e.dest));
  }
  EXPECT_EQ(pool.available(), 600u);
  EXPECT_EQ(s->pending(), 0u);
}

TEST_P(StorageCase, LargeExtentIntoRegisteredPool) {
  auto s = storage();
  FileId f = open(*s);
  BufferPool pool(file_size_, 2);
  bool registered = s->register_buffers(pool.regions());
  if (GetParam().backend == "pread") {
    EXPECT_FALSE(registered);
  }
  uint8_t* b = pool.acquire();
  Extent e{f, 0, file_size_, b, 9, pool.buffer_bytes(), true, xxh3_64(pread_bytes(path_, 0, file_size_).data(), file_size_)};
  s->read_all({&e, 1});
  pool.release(b);
}

TEST_P(StorageCase, ShortReadsAreResubmitted) {
  auto inner = storage();
  FaultInjectingStorage s(std::move(inner));
  FileId f = open(s);
  s.short_reads(GetParam().mode == OpenMode::Buffered ? 1000 : 4096);
  check_random_extents(s, f, path_, file_size_, false, 10, 4);
  EXPECT_GT(s.stats().short_reads, 10u);
}

TEST_P(StorageCase, InjectedEioNamesFileAndOffset) {
  FaultInjectingStorage s(storage());
  FileId f = open(s);
  s.fail_tag(7, EIO);
  std::vector<AlignedBuffer> bufs;
  std::vector<Extent> ext;
  for (uint64_t i = 0; i < 10; ++i) {
    bufs.emplace_back(65536);
    ext.push_back({f, i * 65536, 65536, bufs.back().data(), i});
  }
  s.submit(ext);
  std::vector<Completion> done;
  while (done.size() < ext.size()) s.wait(done, ext.size() - done.size());
  for (const auto& c : done) {
    if (c.tag == 7) {
      EXPECT_EQ(c.error, EIO);
      EXPECT_EQ(c.bytes, 0u);
      EXPECT_NE(c.message.find(path_.string() + " offset 458752 length 65536"), std::string::npos) << c.message;
      EXPECT_NE(c.message.find("Input/output error"), std::string::npos) << c.message;
    } else {
      EXPECT_TRUE(c.ok()) << c.message;
    }
  }
  // Every piece of extent 7 was failed.
  EXPECT_EQ(s.stats().errors, pieces_of_64k());
  // read_all turns it into a strata::Error with the same line.
  s.fail_range(f, 100000, 1, EIO);
  Extent e{f, 99000, 5000, bufs[0].data(), 1};
  try {
    s.read_all({&e, 1});
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find(path_.string() + " offset 99000 length 5000: read failed"),
              std::string::npos)
        << err.what();
  }
}

TEST_P(StorageCase, ShortReadsThenErrorMidExtent) {
  FaultInjectingStorage s(storage());
  FileId f = open(s);
  s.short_reads(8192);
  s.fail_range(f, 40000, 1, EIO);  // the fourth or fifth piece fails
  AlignedBuffer b(65536);
  Extent e{f, 0, 65536, b.data(), 1};
  s.submit({&e, 1});
  std::vector<Completion> done;
  s.wait(done, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].error, EIO);
  EXPECT_NE(done[0].message.find("offset 0 length 65536: read failed at byte "), std::string::npos) << done[0].message;
}

TEST_P(StorageCase, CorruptBytesCaughtByChecksum) {
  FaultInjectingStorage s(storage());
  FileId f = open(s);
  const uint64_t off = 8192, len = 100000;
  const auto good = pread_bytes(path_, off, len);
  const uint64_t want = xxh3_64(good.data(), len);
  s.corrupt(f, off + 5000);
  AlignedBuffer a(len), b(len);
  std::vector<Extent> ext = {{f, off, len, a.data(), 1, 0, true, want},  // verified on landing
                             {f, off, len, b.data(), 2}};               // not verified
  s.submit(ext);
  std::vector<Completion> done;
  while (done.size() < 2) s.wait(done, 2 - done.size());
  for (const auto& c : done) {
    if (c.tag == 1) {
      EXPECT_EQ(c.error, EBADMSG);
      EXPECT_EQ(c.message.rfind(path_.string() + " offset 8192 length 100000: checksum mismatch (expected " +
                                    hash_hex(want) + ", got 0x",
                                0),
                0u)
          << c.message;
    } else {
      EXPECT_TRUE(c.ok());
    }
  }
  EXPECT_GE(s.stats().corruptions, 2u);
  // The standalone helper says the same for the unverified copy.
  EXPECT_EQ(b.data()[5000], good[5000] ^ 0x5a);
  try {
    verify_xxh3(b.data(), len, want, path_.string(), off);
    FAIL() << "expected a checksum error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("offset 8192 length 100000: checksum mismatch (expected " + hash_hex(want)),
              std::string::npos);
  }
  EXPECT_NO_THROW(verify_xxh3(good.data(), len, want, path_.string(), off));
}

TEST_P(StorageCase, SlowDriveStillDeliversEverything) {
  FaultInjectingStorage s(storage(4));
  FileId f = open(s);
  s.slow_drive(s.file(f).drive, std::chrono::microseconds(2000));
  check_random_extents(s, f, path_, file_size_, true, 12, 5);
  EXPECT_GE(s.stats().delays, 12u);
}

// Completions until `count` have landed, in the order they were delivered.
std::vector<Completion> wait_for(Storage& s, size_t count) {
  std::vector<Completion> done;
  while (done.size() < count) s.wait(done, count - done.size());
  return done;
}

size_t landed_at(const std::vector<Completion>& done, uint64_t tag) {
  for (size_t i = 0; i < done.size(); ++i)
    if (done[i].tag == tag) return i;
  ADD_FAILURE() << "tag " << tag << " never landed";
  return done.size();
}

TEST_P(StorageCase, BackgroundReadsWaitForOrdinaryOnes) {
  FaultInjectingStorage s(storage(2));
  FileId f = open(s);
  s.slow_drive(s.file(f).drive, std::chrono::microseconds(20000));
  BufferPool pool(65536, 8);
  std::vector<Extent> bg, fg;
  for (uint64_t i = 0; i < 4; ++i) bg.push_back({f, i * 65536, 65536, pool.buffer(i), 100 + i});
  for (uint64_t i = 0; i < 2; ++i) fg.push_back({f, (8 + i) * 65536, 65536, pool.buffer(4 + i), i});
  for (auto& e : bg) e.background = true;
  std::vector<Extent> all = bg;  // background first in the same call: order of submission does not matter
  all.insert(all.end(), fg.begin(), fg.end());
  s.submit(all);
  auto done = wait_for(s, 6);
  for (const auto& c : done) EXPECT_TRUE(c.ok()) << c.message;
  for (uint64_t b = 100; b < 104; ++b)
    for (uint64_t o : {0u, 1u}) EXPECT_GT(landed_at(done, b), landed_at(done, o)) << b << " vs " << o;
  const auto drives = s.drives();
  ASSERT_EQ(drives.size(), 1u);
  EXPECT_EQ(drives[0].bytes_read, 6u * 65536);
  EXPECT_GT(drives[0].busy_s, 0.055);  // six reads of 20 ms, at most two at a time
}

// The reads in flight, integrated over the busy time: eight slow reads at
// depth 4 keep four in flight until the queue runs dry, then three, two, one;
// a lone read keeps exactly one.
TEST_P(StorageCase, ADrivesMeanQueueDepthIsMeasuredOverItsBusyTime) {
  FaultInjectingStorage s(storage(4));
  FileId f = open(s);
  s.slow_drive(s.file(f).drive, std::chrono::microseconds(20000));
  BufferPool pool(4096, 8);  // one page: a single piece in every case
  std::vector<Extent> one{{f, 0, 4096, pool.buffer(0), 0}};
  s.submit(one);
  wait_for(s, 1);
  auto drives = s.drives();
  ASSERT_EQ(drives.size(), 1u);
  EXPECT_NEAR(drives[0].in_flight_s / drives[0].busy_s, 1.0, 1e-6);
  const double busy = drives[0].busy_s, in_flight = drives[0].in_flight_s;
  std::vector<Extent> eight;
  for (uint64_t i = 0; i < 8; ++i) eight.push_back({f, i * 4096, 4096, pool.buffer(i), i});
  s.submit(eight);
  wait_for(s, 8);
  drives = s.drives();
  const double mean = (drives[0].in_flight_s - in_flight) / (drives[0].busy_s - busy);
  EXPECT_GT(mean, 2.0);
  EXPECT_LE(mean, 4.0 + 1e-6);
}

TEST_P(StorageCase, CancelledBackgroundReadsNeverReachTheDrive) {
  FaultInjectingStorage s(storage(1));
  FileId f = open(s);
  s.slow_drive(s.file(f).drive, std::chrono::microseconds(20000));
  BufferPool pool(65536, 8);
  // Three ordinary reads keep the drive busy for 60 ms, so the background ones queue.
  std::vector<Extent> all;
  for (uint64_t i = 0; i < 3; ++i) all.push_back({f, i * 65536, 65536, pool.buffer(i), i});
  for (uint64_t i = 0; i < 4; ++i) {
    all.push_back({f, (3 + i) * 65536, 65536, pool.buffer(3 + i), 20 + i});
    all.back().background = true;
  }
  s.submit(all);
  const std::vector<uint64_t> drop = {21, 22, 99};
  EXPECT_EQ(s.cancel(drop), 2u);
  auto done = wait_for(s, 7);
  for (const auto& c : done) {
    if (c.tag == 21 || c.tag == 22) {
      EXPECT_EQ(c.error, ECANCELED);
      EXPECT_EQ(c.bytes, 0u);
      EXPECT_NE(c.message.find(path_.string() + " offset " + std::to_string((c.tag - 17) * 65536) + " length 65536: cancelled"),
                std::string::npos)
          << c.message;
    } else {
      EXPECT_TRUE(c.ok()) << c.message;
    }
  }
  EXPECT_EQ(s.drives()[0].bytes_read, 5u * 65536);
  EXPECT_EQ(s.stats().reads, 5 * pieces_of_64k());  // the cancelled ones were never issued
  EXPECT_EQ(s.pending(), 0u);
}

TEST_P(StorageCase, PromotedBackgroundReadGoesFirst) {
  FaultInjectingStorage s(storage(1));
  FileId f = open(s);
  s.slow_drive(s.file(f).drive, std::chrono::microseconds(50000));
  BufferPool pool(65536, 8);
  std::vector<Extent> all = {{f, 0, 65536, pool.buffer(0), 1},
                             {f, 65536, 65536, pool.buffer(1), 2},
                             {f, 2 * 65536, 65536, pool.buffer(2), 31},
                             {f, 3 * 65536, 65536, pool.buffer(3), 32}};
  all[2].background = all[3].background = true;
  s.submit(all);  // 1 goes out; 2 waits for it; 31 and 32 wait for both
  const std::vector<uint64_t> up = {32};
  s.promote(up);
  auto done = wait_for(s, 4);
  for (const auto& c : done) EXPECT_TRUE(c.ok()) << c.message;
  EXPECT_LT(landed_at(done, 32), landed_at(done, 31));
  EXPECT_LT(landed_at(done, 2), landed_at(done, 32));  // behind the ordinary read already waiting
  for (uint64_t i = 0; i < 4; ++i)
    EXPECT_EQ(std::memcmp(pool.buffer(i), pread_bytes(path_, i * 65536, 65536).data(), 65536), 0) << i;
}

TEST_P(StorageCase, PastEndOfFileIsAnError) {
  auto s = storage();
  FileId f = open(*s);
  AlignedBuffer b(16384);
  std::vector<Extent> ext = {{f, file_size_ - 100, 101, b.data(), 1},
                             {f, file_size_ + 4096, 10, b.data(), 2},
                             {f, 0, 0, nullptr, 3}};  // empty: fine
  s->submit(ext);
  std::vector<Completion> done;
  while (done.size() < 3) s->wait(done, 3 - done.size());
  for (const auto& c : done) {
    if (c.tag == 3) {
      EXPECT_TRUE(c.ok());
      continue;
    }
    EXPECT_EQ(c.error, ENODATA);
    EXPECT_NE(c.message.find("past end of file (file is " + std::to_string(file_size_) + " bytes)"),
              std::string::npos)
        << c.message;
  }
}

TEST_P(StorageCase, FileShrunkAfterOpenIsAnError) {
  auto s = storage();
  FileId f = open(*s);
  fs::resize_file(path_, 100000);
  AlignedBuffer b(200704);
  Extent e{f, 0, 200000, b.data(), 1};
  s->submit({&e, 1});
  std::vector<Completion> done;
  s->wait(done, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].error, ENODATA);
  EXPECT_NE(done[0].message.find("the file shrank: it ends at byte 100000"), std::string::npos) << done[0].message;
}

TEST_P(StorageCase, MissingFileAndDirectoryAreClearErrors) {
  auto s = storage();
  try {
    s->open(dir_.path() / "no-such-drive" / "experts.bin", GetParam().mode);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              (dir_.path() / "no-such-drive" / "experts.bin").string() + ": cannot open: No such file or directory");
  }
  try {
    s->open(dir_.path(), GetParam().mode);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos);
  }
  // An unknown file id is a completion error, not a crash.
  AlignedBuffer b(4096);
  Extent e{77, 0, 10, b.data(), 5};
  s->submit({&e, 1});
  std::vector<Completion> done;
  s->wait(done, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].error, EBADF);
}

TEST_P(StorageCase, DestroyWithReadsInFlight) {
  auto s = storage(2);
  FileId f = open(*s);
  BufferPool pool(256 * 1024, 32);
  std::vector<Extent> ext;
  for (uint64_t i = 0; i < 32; ++i) ext.push_back({f, i * 65536, 256 * 1024, pool.buffer(i), i, pool.buffer_bytes()});
  s->submit(ext);
  s.reset();  // waits for the reads to land, then stops its threads
  SUCCEED();
}

INSTANTIATE_TEST_SUITE_P(Backends, StorageCase,
                         testing::Values(Case{"io_uring", OpenMode::Auto}, Case{"io_uring", OpenMode::Buffered},
                                         Case{"pread", OpenMode::Auto}, Case{"pread", OpenMode::Buffered},
                                         Case{"io_uring", OpenMode::Auto, 16384},
                                         Case{"io_uring", OpenMode::Buffered, 12288},
                                         Case{"pread", OpenMode::Auto, 16384}),
                         case_name);

TEST(Storage, BackendChoice) {
  const char* old = std::getenv("STRATA_IO");
  std::string saved = old ? old : "";
  setenv("STRATA_IO", "pread", 1);
  EXPECT_EQ(make_storage()->backend(), "pread");
  setenv("STRATA_IO", "bogus", 1);
  EXPECT_THROW(make_storage(), Error);
  unsetenv("STRATA_IO");
  if (IoUringStorage::available()) {
    EXPECT_EQ(make_storage()->backend(), "io_uring");
  }
  if (old) setenv("STRATA_IO", saved.c_str(), 1);
}

// Pieces of equal length (storage.h): with 1 MiB pieces a 1072 KiB extent
// is one read (cut at exactly 1 MiB it was a 1 MiB read and a 48 KiB one)
// and a 2200 KiB extent two of 1100 KiB (it was three); the bytes are the
// file's.
TEST(Storage, AnExtentIsCutIntoPiecesOfEqualLength) {
  TempDir dir;
  const fs::path path = make_file(dir.path(), "blob.bin", 3u << 20, 9);
  for (const std::string backend : {"pread", "io_uring"}) {
    if (backend == "io_uring" && !IoUringStorage::available()) continue;
    FaultInjectingStorage s(make(backend));  // counts the reads
    const FileId f = s.open(path, OpenMode::Buffered);
    AlignedBuffer a(1072 * 1024), b(2200 * 1024);
    Extent e[2] = {{f, 0, 1072 * 1024, a.data(), 0}, {f, 4096, 2200 * 1024, b.data(), 1}};
    s.read_all(e);
    EXPECT_EQ(s.stats().reads, 3u) << backend;
    EXPECT_EQ(std::memcmp(a.data(), pread_bytes(path, 0, 1072 * 1024).data(), 1072 * 1024), 0) << backend;
    EXPECT_EQ(std::memcmp(b.data(), pread_bytes(path, 4096, 2200 * 1024).data(), 2200 * 1024), 0) << backend;
  }
  // The length the pieces have, as budget and bench measure drives at.
  EXPECT_EQ(piece_length(1072 * 1024, kDefaultPieceBytes), 1072u * 1024);
  EXPECT_EQ(piece_length(2200 * 1024, kDefaultPieceBytes), 1100u * 1024);
  EXPECT_EQ(piece_length(2200 * 1024, 0), 2200u * 1024);           // 0: the extent whole
  EXPECT_EQ(piece_length(64 * 1024, 12 * 1024), 16u * 1024);       // 13107.2 bytes, up to whole pages: 4 reads
}

TEST(Storage, FilesOnTmpfsFallBackToBufferedWithANote) {
  if (!fs::exists("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  fs::path p = "/dev/shm/strata-storage-test-" + std::to_string(getpid());
  make_file("/dev/shm", p.filename().string(), 10000, 7);
  auto s = make_storage();
  FileId f = s->open(p);
  FileInfo info = s->file(f);
  if (!info.direct) {
    EXPECT_NE(info.note.find("page cache"), std::string::npos);
    ASSERT_EQ(s->notes().size(), 1u);
    EXPECT_EQ(s->notes()[0].rfind(p.string() + ": ", 0), 0u);
  }
  std::vector<uint8_t> buf(777);
  Extent e{f, 1001, 777, buf.data(), 0};
  s->read_all({&e, 1});
  EXPECT_EQ(buf, pread_bytes(p, 1001, 777));
  try {
    s->open(p, OpenMode::Direct);
    if (!info.direct) ADD_FAILURE() << "O_DIRECT open on tmpfs should fail";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("O_DIRECT"), std::string::npos);
  }
  fs::remove(p);
}

TEST(Storage, BufferPoolAcquireRelease) {
  BufferPool pool(5000, 3);
  EXPECT_EQ(pool.buffer_bytes(), 8192u);
  uint8_t* a = pool.acquire();
  uint8_t* b = pool.acquire();
  EXPECT_TRUE(is_aligned(a));
  EXPECT_TRUE(is_aligned(b));
  EXPECT_NE(a, b);
  EXPECT_EQ(pool.available(), 1u);
  std::thread t([&] {
    uint8_t* c = pool.acquire();
    uint8_t* d = pool.acquire();  // blocks until the main thread releases
    pool.release(c);
    pool.release(d);
  });
  pool.release(a);
  t.join();
  pool.release(b);
  EXPECT_EQ(pool.available(), 3u);
  EXPECT_THROW(pool.release(b), Error);       // twice
  EXPECT_THROW(pool.release(b + 1), Error);   // not a buffer start
  EXPECT_EQ(pool.regions().size(), 3u);
  AlignedBuffer ab(1);
  EXPECT_EQ(ab.size(), 4096u);
  EXPECT_TRUE(is_aligned(ab.data()));
}

TEST(Storage, Xxh3KnownValues) {
  // Reference values from the xxHash project's own sanity tests (XXH3_64bits, seed 0).
  EXPECT_EQ(xxh3_64(nullptr, 0), 0x2D06800538D394C2ull);
  EXPECT_EQ(hash_hex(0x2D06800538D394C2ull), "0x2d06800538d394c2");
  // The dispatched (AVX2/AVX-512) path gives the same values as the portable one.
  std::vector<uint8_t> data(3 * 1024 * 1024 + 5);
  std::mt19937_64 rng(11);
  for (auto& b : data) b = static_cast<uint8_t>(rng() >> 7);
  for (size_t n : {size_t(1), size_t(17), size_t(240), size_t(241), size_t(4096), size_t(1 << 20), data.size()})
    EXPECT_EQ(xxh3_64(data.data(), n), XXH3_64bits(data.data(), n)) << n;
}

}  // namespace
}  // namespace strata

// A streaming install's range filling (remote/remote_mirror.h) against nginx:
// reads of missing ranges wait off the caller's thread while the mirror
// fetches them, many at once and each byte once however many reads ask;
// the bytes read are the source's; what was fetched is served from the
// drive afterwards, also by a new mirror of the same folder (present.log);
// a guess cancelled while its fetch runs completes as cancelled; a failed
// fetch is an EIO completion naming the range.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <set>
#include <thread>

#include "fault_http_server.h"
#include "fault_proxy.h"
#include "local_nginx.h"
#include "remote/block_sums.h"
#include "remote/range_filling_storage.h"
#include "remote/remote_mirror.h"
#include "remote/source.h"
#include "safetensors_writer.h"
#include "storage/aligned_buffer.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(g());
  return s;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A file of `size` bytes with none written (a new install's shard).
void make_sparse(const fs::path& p, size_t size) {
  std::ofstream sparse(p, std::ios::binary | std::ios::trunc);
  sparse.seekp(static_cast<std::streamoff>(size - 1));
  sparse.put('\0');
}

// A streaming install in `dir` of the one file `server` serves, as blob.bin
// with none of its bytes.
void install_blob(const fs::path& dir, const testnet::FaultHttpServer& server, size_t size) {
  const std::string source = server.url("/m");
  RemoteSource src(parse_source(source));
  RemoteMirror::create(dir, source, {{"blob.bin", src.stat("blob.bin")}}, "");
  make_sparse(dir / "blob.bin", size);
}

class MirrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    body_ = random_bytes(6 << 20, 21);
    fs::create_directories(root_.path() / "model");
    root_.write("model/blob.bin", body_);
    nginx_ = std::make_unique<testnet::LocalNginx>(root_.path());
    ASSERT_TRUE(nginx_->running()) << nginx_->log();
    source_ = nginx_->url() + "/model";
    RemoteSource src(parse_source(source_));
    std::map<std::string, RemoteFileInfo> files{{"blob.bin", src.stat("blob.bin")}};
    RemoteMirror::create(dir_.path(), source_, files, "");
    const fs::path sparse = dir_.path() / "blob.bin";
    const int fd = ::open(sparse.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(body_.size())), 0);
    ::close(fd);
  }

  // Reads `ranges` of blob.bin through a RangeFillingStorage over `mirror`;
  // returns the bytes read, or the completions' errors.
  std::vector<std::string> read(const std::shared_ptr<RemoteMirror>& mirror,
                                const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
                                std::vector<std::string>* errors = nullptr) {
    RangeFillingStorage storage(make_storage(), mirror);
    const FileId f = storage.open(dir_.path() / "blob.bin");
    std::vector<AlignedBuffer> bufs;
    std::vector<Extent> extents;
    for (size_t i = 0; i < ranges.size(); ++i) {
      bufs.emplace_back(ranges[i].second + 8192);
      Extent e;
      e.file = f;
      e.offset = ranges[i].first;
      e.length = ranges[i].second;
      e.dest = bufs.back().data();
      e.capacity = bufs.back().size();
      e.tag = i;
      extents.push_back(e);
    }
    storage.submit(extents);
    std::vector<Completion> done;
    while (done.size() < extents.size()) {
      const size_t before = done.size();
      storage.wait(done, extents.size() - done.size(), std::chrono::milliseconds(20000));
      if (done.size() == before) break;
    }
    EXPECT_EQ(done.size(), extents.size());
    EXPECT_EQ(storage.pending(), 0u);
    std::vector<std::string> out(ranges.size());
    for (const Completion& c : done) {
      if (!c.ok()) {
        if (errors) errors->push_back(c.message);
        continue;
      }
      out[c.tag].assign(static_cast<const char*>(extents[c.tag].dest), ranges[c.tag].second);
    }
    return out;
  }

  testfiles::TempDir root_{"strata-mirror-root"}, dir_{"strata-mirror"};
  std::unique_ptr<testnet::LocalNginx> nginx_;
  std::string body_, source_;
};

TEST_F(MirrorTest, OverlappingReadsFetchEachByteOnceAndAreTheSourcesBytes) {
  auto mirror = std::make_shared<RemoteMirror>(dir_.path());
  mirror->set_connections(6);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::mt19937 g(3);
  for (int i = 0; i < 40; ++i) {
    const uint64_t off = g() % (body_.size() - 1), len = 1 + g() % std::min<uint64_t>(body_.size() - off, 700000);
    ranges.emplace_back(off, len);
  }
  ranges.emplace_back(ranges[0]);  // the same range twice in one submit
  const std::vector<std::string> got = read(mirror, ranges);
  std::map<uint64_t, uint64_t> covered;  // the union, to count the bytes that had to come
  for (size_t i = 0; i < ranges.size(); ++i) {
    EXPECT_TRUE(got[i] == body_.substr(ranges[i].first, ranges[i].second)) << i;
    covered[ranges[i].first] = std::max(covered[ranges[i].first], ranges[i].first + ranges[i].second);
  }
  uint64_t unique = 0, at = 0;
  for (const auto& [b, e] : covered) {
    if (e <= at) continue;
    unique += e - std::max(b, at);
    at = e;
  }
  const RemoteFetchStats s = mirror->stats();
  EXPECT_EQ(s.bytes, unique) << "each byte fetched once";
  EXPECT_EQ(s.remote_reads + s.local_reads, ranges.size());
  EXPECT_GT(s.remote_reads, 0u);
  EXPECT_GE(s.requests, 2u);

  // The same reads again: all from the drive, nothing fetched.
  const std::vector<std::string> again = read(mirror, ranges);
  for (size_t i = 0; i < ranges.size(); ++i) EXPECT_TRUE(again[i] == got[i]) << i;
  EXPECT_EQ(mirror->stats().bytes, unique);
  EXPECT_EQ(mirror->stats().local_reads, s.local_reads + ranges.size());

  // A new mirror of the folder knows what is there from present.log, even
  // with the source gone.
  nginx_.reset();
  auto reopened = std::make_shared<RemoteMirror>(dir_.path());
  const std::vector<std::string> third = read(reopened, ranges);
  for (size_t i = 0; i < ranges.size(); ++i) EXPECT_TRUE(third[i] == got[i]) << i;
  EXPECT_EQ(reopened->stats().bytes, 0u);
  EXPECT_EQ(reopened->stats().local_reads, ranges.size());
}

TEST_F(MirrorTest, AFailedFetchIsAnErrorCompletionAndOthersStillLand) {
  RetryPolicy quick;  // a source that is gone is given up on after a few quick tries
  quick.attempts = 3;
  quick.first_delay_s = 0.01;
  auto mirror = std::make_shared<RemoteMirror>(dir_.path(), process_env, quick);
  mirror->ensure("blob.bin", 0, 4096);  // the source checked and a first range there
  nginx_.reset();                        // then the source goes away
  std::vector<std::string> errors;
  const std::vector<std::string> got = read(mirror, {{0, 4096}, {100000, 5000}}, &errors);
  EXPECT_TRUE(got[0] == body_.substr(0, 4096));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("is a streaming install; fetching blob.bin bytes 100000-104999 failed"), std::string::npos)
      << errors[0];
}

TEST_F(MirrorTest, AGuessCancelledWhileFetchingCompletesAsCancelled) {
  auto mirror = std::make_shared<RemoteMirror>(dir_.path());
  RangeFillingStorage storage(make_storage(), mirror);
  const FileId f = storage.open(dir_.path() / "blob.bin");
  AlignedBuffer buf(4 << 20);
  Extent e;
  e.file = f;
  e.offset = 1 << 20;
  e.length = 3 << 20;
  e.dest = buf.data();
  e.capacity = buf.size();
  e.tag = 7;
  e.background = true;
  storage.submit(std::span<const Extent>(&e, 1));
  const uint64_t tag = 7;
  const size_t cancelled = storage.cancel(std::span<const uint64_t>(&tag, 1));
  std::vector<Completion> done;
  storage.wait(done, 1, std::chrono::milliseconds(20000));
  ASSERT_EQ(done.size(), 1u);
  if (cancelled == 1) {
    EXPECT_EQ(done[0].error, ECANCELED);
  } else {
    EXPECT_TRUE(done[0].ok());  // it had landed before the cancel: read as usual
  }
  // The fetch itself went on: its bytes end up on the drive.
  mirror->ensure("blob.bin", e.offset, e.length);
  std::ifstream in(dir_.path() / "blob.bin", std::ios::binary);
  in.seekg(static_cast<std::streamoff>(e.offset));
  std::string back(e.length, '\0');
  in.read(back.data(), static_cast<std::streamsize>(back.size()));
  EXPECT_TRUE(back == body_.substr(e.offset, e.length));
}

// With the source's block sums published, wrong bytes from the source (a
// proxy changes one byte of every second answer) are never read nor logged:
// the block is fetched again. A block wrong every time is one error naming
// both sums, and stays missing.
TEST_F(MirrorTest, WithBlockSumsWrongBytesAreFetchedAgainAndNeverUsed) {
  // Blocks of many sizes: cut as `strata checksums` cuts tensors (a small
  // one, a large one, one byte), then 64 KiB ones and a short last one.
  const std::vector<uint64_t> cuts =
      cut_blocks(body_.size() - 1000, {{0, 100}, {100, 3000000}, {3000000, 3000001}}, 64 << 10);
  std::vector<uint64_t> ends = cuts;
  ends.push_back(body_.size());
  write_block_sums(dir_.path() / kBlockSumsFile,
                   compute_block_sums(root_.path() / "model", {"blob.bin"}, 64 << 10, {{"blob.bin", ends}}));
  const std::set<uint64_t> edges(ends.begin(), ends.end());
  testnet::FaultProxy proxy(nginx_->port(), 2, {testnet::ProxyFault::WrongBytes});
  RemoteSource src(parse_source(source_));
  RemoteMirror::create(dir_.path(), proxy.url("/model"), {{"blob.bin", src.stat("blob.bin")}}, "");
  auto mirror = std::make_shared<RemoteMirror>(dir_.path());
  ASSERT_TRUE(mirror->checks_blocks());
  // One read at a time over one connection: a block spoiled by one answer
  // is fetched again by the next, which the proxy leaves alone.
  mirror->set_connections(1);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::mt19937 g(5);
  for (int i = 0; i < 30; ++i) {
    const uint64_t off = g() % (body_.size() - 1), len = 1 + g() % std::min<uint64_t>(body_.size() - off, 300000);
    ranges.emplace_back(off, len);
  }
  std::vector<std::string> errors, got;
  for (const auto& r : ranges) got.push_back(read(mirror, {r}, &errors)[0]);
  EXPECT_EQ(errors.size(), 0u) << errors[0];
  for (size_t i = 0; i < ranges.size(); ++i) EXPECT_TRUE(got[i] == body_.substr(ranges[i].first, ranges[i].second)) << i;
  EXPECT_GT(proxy.injected()[testnet::ProxyFault::WrongBytes], 0);
  EXPECT_GT(mirror->stats().rejected_bytes, 0u);
  // Whole blocks were fetched, and everything the log says is there is the source's.
  std::istringstream log(read_all(dir_.path() / kRemoteMirrorLog));
  const std::string on_drive = read_all(dir_.path() / "blob.bin");
  std::string name;
  uint64_t offset = 0, length = 0, logged = 0;
  while (log >> name >> offset >> length) {
    EXPECT_TRUE(offset == 0 || edges.contains(offset)) << offset;
    EXPECT_TRUE(edges.contains(offset + length)) << offset + length;
    EXPECT_TRUE(on_drive.substr(offset, length) == body_.substr(offset, length)) << offset << "+" << length;
    logged += length;
  }
  EXPECT_GT(logged, 0u);

  // Every answer wrong: one error naming the block's sums, nothing logged.
  proxy.set_every(1);
  errors.clear();
  uint64_t missing_at = 0;
  for (const auto& r : mirror->missing())
    if (r.length >= 2000) {
      missing_at = r.offset;
      break;
    }
  ASSERT_FALSE(mirror->present("blob.bin", missing_at, 1000));
  read(mirror, {{missing_at, 1000}}, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("twice, both times other than the source's strata-blocks.json says"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("checksum mismatch (expected 0x"), std::string::npos) << errors[0];
  EXPECT_FALSE(mirror->present("blob.bin", missing_at, 1000));
}

// A block larger than a background piece: a piece of it that fails for
// good ends the waits it was fetched for, even one for bytes in another
// piece of the block.
TEST(MirrorFaults, AFailedPieceOfABlockEndsTheWaitsForTheBlock) {
  const std::string body = random_bytes(4 << 20, 41);
  testnet::FaultHttpServer server(body);
  testfiles::TempDir dir("strata-mirror-block-fault");
  dir.write("blob.bin", body);  // to sum it; then emptied
  write_block_sums(dir.path() / kBlockSumsFile, compute_block_sums(dir.path(), {"blob.bin"}, 2 << 20));
  install_blob(dir.path(), server, body.size());
  auto mirror = std::make_shared<RemoteMirror>(dir.path());
  mirror->set_connections(1);
  server.then(testnet::Fault::NewEtag);  // the first piece: the file "changed" (final)
  std::mutex m;
  std::condition_variable cv;
  std::string ended = "not yet";
  EXPECT_FALSE(mirror->request("blob.bin", (2 << 20) + (3 << 19), 1000, FetchPriority::Background,
                               [&](const std::string& error) {
                                 std::lock_guard<std::mutex> lock(m);
                                 ended = error;
                                 cv.notify_all();
                               }));
  std::unique_lock<std::mutex> lock(m);
  EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return ended != "not yet"; }))
      << "the wait never ended";
  EXPECT_NE(ended.find("changed at the source"), std::string::npos) << ended;
  lock.unlock();
  mirror.reset();  // (ends a wait that never did)
}

TEST(BlockSums, WrittenReadAndCheckedAndBadFilesAreOneClearError) {
  testfiles::TempDir dir("strata-block-sums");
  const std::string body = random_bytes((3 << 16) + 123, 9);
  dir.write("w.safetensors", body);
  const BlockSums sums = compute_block_sums(dir.path(), {"w.safetensors"}, 1 << 16);
  ASSERT_EQ(sums.files.at("w.safetensors").xxh3.size(), 4u);
  write_block_sums(dir.path() / kBlockSumsFile, sums);
  const BlockSums back = read_block_sums(dir.path() / kBlockSumsFile);
  EXPECT_EQ(back.block_bytes, 1u << 16);
  EXPECT_EQ(back.files.at("w.safetensors").xxh3, sums.files.at("w.safetensors").xxh3);
  EXPECT_EQ(back.files.at("w.safetensors").size, body.size());
  EXPECT_FALSE(first_bad_block(dir.path() / "w.safetensors", "w.safetensors", back));
  // One byte changed in the third block; then a shorter file.
  std::string changed = body;
  changed[(2 << 16) + 5] ^= 1;
  dir.write("w.safetensors", changed);
  auto bad = first_bad_block(dir.path() / "w.safetensors", "w.safetensors", back);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->offset, 2u << 16);
  EXPECT_NE(bad->message.find("checksum mismatch"), std::string::npos) << bad->message;
  dir.write("w.safetensors", body.substr(0, body.size() - 200));
  bad = first_bad_block(dir.path() / "w.safetensors", "w.safetensors", back);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->offset, 2u << 16);  // the last block it has is short
  // Blocks cut at given ends (a safetensors file's tensors): the same checks.
  dir.write("w.safetensors", body);
  const std::vector<uint64_t> ends = cut_blocks(body.size(), {{0, 100}, {100, 90000}, {90000, 90001}}, 1 << 16);
  // A tensor's last block is at most 64 KiB, the bytes after the last tensor in blocks of B.
  EXPECT_EQ(ends, (std::vector<uint64_t>{100, 90000 - 65536, 90000, 90001, 90001 + 65536, body.size()}));
  const BlockSums cut = compute_block_sums(dir.path(), {"w.safetensors"}, 1 << 16, {{"w.safetensors", ends}});
  EXPECT_EQ(cut.files.at("w.safetensors").ends, ends);
  write_block_sums(dir.path() / "cut.json", cut);
  const BlockSums cut_back = read_block_sums(dir.path() / "cut.json");
  EXPECT_TRUE(cut_back.files.at("w.safetensors").cut);
  EXPECT_EQ(cut_back.files.at("w.safetensors").ends, ends);
  EXPECT_FALSE(first_bad_block(dir.path() / "w.safetensors", "w.safetensors", cut_back));
  changed = body;
  changed[95000] ^= 1;
  dir.write("w.safetensors", changed);
  bad = first_bad_block(dir.path() / "w.safetensors", "w.safetensors", cut_back);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->offset, 90001u);  // the block after the one-byte tensor
  dir.write("w.safetensors", body + "x");
  bad = first_bad_block(dir.path() / "w.safetensors", "w.safetensors", cut_back);
  ASSERT_TRUE(bad);
  EXPECT_NE(bad->message.find("bytes, strata-blocks.json says"), std::string::npos) << bad->message;
  // Files that are not sums.
  const std::string good = read_all(dir.path() / kBlockSumsFile);
  const nlohmann::json cut_json = nlohmann::json::parse(read_all(dir.path() / "cut.json"));
  auto with_units = [&](nlohmann::json units) {
    nlohmann::json j = cut_json;
    j["files"]["w.safetensors"]["units"] = std::move(units);
    return j.dump();
  };
  nlohmann::json short_units = cut_json["files"]["w.safetensors"]["units"];
  short_units.erase(short_units.size() - 1);
  nlohmann::json big_unit = cut_json["files"]["w.safetensors"]["units"];
  big_unit[0] = 1 << 17;
  nlohmann::json changed_unit = cut_json["files"]["w.safetensors"]["units"];
  changed_unit[0] = changed_unit[0].get<int64_t>() - 1;
  changed_unit[1] = changed_unit[1].get<int64_t>() + 1;
  const std::string digits = nlohmann::json::parse(good)["files"]["w.safetensors"]["xxh3"];
  struct Case {
    std::string text, says;
  };
  auto with = [&](const char* key, nlohmann::json v) {
    nlohmann::json j = nlohmann::json::parse(good);
    j[key] = std::move(v);
    return j.dump();
  };
  auto with_file = [&](const std::string& name, nlohmann::json v) {
    nlohmann::json j = nlohmann::json::parse(good);
    j["files"] = {{name, std::move(v)}};
    return j.dump();
  };
  for (const Case& c : {Case{"[1, 2]", "not a strata-blocks file"}, Case{with("version", 2), "of version 1"},
                        Case{with("block_bytes", 3000), "power of two"}, Case{with("block_bytes", -1), "power of two"},
                        Case{with_file("w.safetensors", {{"size", body.size()}, {"xxh3", digits.substr(16)}}), "need"},
                        Case{with_file("w.safetensors", {{"size", body.size()}, {"xxh3", "zz" + digits.substr(2)}}),
                             "not 16 hex digits"},
                        Case{with_file("../w", {{"size", 1}, {"xxh3", digits.substr(0, 16)}}), "not a file of the folder"},
                        Case{with_file("w.safetensors", {{"size", "big"}, {"xxh3", digits}}), "has no size"},
                        Case{"{\"format\": \"strata-blocks\"", "strata-blocks.json"},
                        Case{with_units(short_units), "add up to"}, Case{with_units(big_unit), "units are 1 to block_bytes"},
                        Case{with_units("all"), "not a list"}, Case{with_units(changed_unit), "damaged"}}) {
    dir.write(kBlockSumsFile, c.text);
    try {
      read_block_sums(dir.path() / kBlockSumsFile);
      ADD_FAILURE() << "accepted: " << c.text.substr(0, 200);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    }
  }
}

// A guess whose fetch is stalled at the source: cancelled, it completes at
// once as cancelled, and the mirror stops waiting for it. Warm-up's
// Background requests end with "stopped" when dropped.
TEST(MirrorFaults, ACancelledGuessAndADroppedWarmUpEndAtOnce) {
  const std::string body = random_bytes(1 << 20, 31);
  testnet::FaultHttpServer server(body);
  testfiles::TempDir dir("strata-mirror-faults");
  install_blob(dir.path(), server, body.size());
  RetryPolicy slow_stall;
  slow_stall.stall_seconds = 30;  // the stall lasts: nothing ends it but the cancel
  auto mirror = std::make_shared<RemoteMirror>(dir.path(), process_env, slow_stall);
  server.then(testnet::Fault::Stall, 4);
  RangeFillingStorage storage(make_storage(), mirror);
  const FileId f = storage.open(dir.path() / "blob.bin");
  AlignedBuffer buf(1 << 20);
  Extent e;
  e.file = f;
  e.offset = 0;
  e.length = 1 << 19;
  e.dest = buf.data();
  e.capacity = buf.size();
  e.tag = 3;
  e.background = true;
  storage.submit(std::span<const Extent>(&e, 1));
  for (int i = 0; i < 100 && server.gets() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GT(server.gets(), 0) << "the fetch started";
  const uint64_t tag = 3;
  EXPECT_EQ(storage.cancel(std::span<const uint64_t>(&tag, 1)), 1u);
  std::vector<Completion> done;
  const auto t0 = std::chrono::steady_clock::now();
  storage.wait(done, 1, std::chrono::milliseconds(5000));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].error, ECANCELED);
  EXPECT_EQ(storage.pending(), 0u);

  // Warm-up's requests behind the stalled piece: dropped, they end now.
  std::string ended = "not yet";
  EXPECT_FALSE(mirror->request("blob.bin", 600000, 1000, FetchPriority::Background,
                               [&](const std::string& error) { ended = error; }));
  mirror->drop_background();
  EXPECT_EQ(ended, "stopped");
  // One mirror per folder in a process.
  EXPECT_EQ(RemoteMirror::open_shared(dir.path()), RemoteMirror::open_shared(dir.path() / "."));
}

}  // namespace
}  // namespace strata

// pack/shard_feed.h against nginx: a shard arrives whole and verified, a
// packed range is freed on disk (the file keeps its size, its blocks go)
// and is fetched again, the same bytes, when asked for once more.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <random>

#include "local_nginx.h"
#include "pack/shard_feed.h"
#include "safetensors_writer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string read_range(const fs::path& p, uint64_t offset, uint64_t n) {
  std::ifstream f(p, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  std::string s(n, '\0');
  f.read(s.data(), static_cast<std::streamsize>(n));
  return s;
}

uint64_t allocated_bytes(const fs::path& p) {
  struct stat st {};
  ::stat(p.c_str(), &st);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

TEST(ShardFeed, PackedBytesAreFreedAndFetchedAgainWhenWanted) {
  testfiles::TempDir root("strata-feed-root"), work("strata-feed-work");
  std::mt19937 g(3);
  std::string weights(4 << 20, '\0');
  for (char& c : weights) c = static_cast<char>(g());
  // An expert's bytes ("b") between two trunk tensors, the one after it
  // starting mid-block: freeing b must not touch a byte of "c".
  const std::string file = testfiles::safetensors_bytes({{"a", "U8", {1 << 20}, weights.substr(0, 1 << 20)},
                                                          {"b", "U8", {(3 << 20) - 100}, weights.substr(1 << 20, (3 << 20) - 100)},
                                                          {"c", "U8", {100}, weights.substr((4 << 20) - 100)}},
                                                         {}, 4096);
  root.write("model.safetensors", file);
  testnet::LocalNginx nginx(root.path());
  ASSERT_TRUE(nginx.running()) << nginx.log();
  RetryPolicy quick;
  quick.first_delay_s = 0;
  RemoteSource src(parse_source(nginx.url(), process_env), quick);
  const RemoteFileInfo info = src.stat("model.safetensors");
  ASSERT_TRUE(info.exists);
  const fs::path dir = work / "files";
  fs::create_directories(dir);
  const fs::path shard = dir / "model.safetensors";
  const uint64_t b_len = (3u << 20) - 100, b_at = file.size() - 100 - b_len;
  {
    uint64_t seen = 0;
    ShardFeed feed(src, {{"model.safetensors", info}}, dir, 2, [&](uint64_t n) { seen += n; });
    feed.prepare();
    EXPECT_EQ(fs::file_size(shard), file.size()) << "the header first, the file at its size";
    feed.start();
    feed.wait_all();
    EXPECT_EQ(read_range(shard, 0, file.size()), file);
    EXPECT_EQ(feed.fetched_bytes(), file.size());
    const uint64_t before = allocated_bytes(shard);
    feed.release({{"model.safetensors", b_at, b_len}});
    EXPECT_EQ(fs::file_size(shard), file.size());
    EXPECT_LE(allocated_bytes(shard), before - b_len + 8192) << "the packed range's blocks are freed";
    EXPECT_EQ(read_range(shard, b_at, 16), std::string(16, '\0'));
    EXPECT_EQ(read_range(shard, 0, b_at), file.substr(0, b_at)) << "nothing before it is touched";
    EXPECT_EQ(read_range(shard, b_at + b_len, 100), file.substr(b_at + b_len)) << "nor after it, in its last block";
    const uint64_t header = b_at - (1u << 20);  // fetched by prepare(), before the progress counts
    EXPECT_EQ(seen, file.size() - header) << "every byte the downloads fetched is reported";
  }
  // A later run (the pack started over) asks for the freed range again.
  ShardFeed again(src, {{"model.safetensors", info}}, dir, 1, {});
  again.prepare();
  again.start();
  again.wait_for({{"model.safetensors", b_at, b_len}});
  EXPECT_EQ(read_range(shard, 0, file.size()), file);
  EXPECT_EQ(again.fetched_bytes(), b_len) << "only the freed range is fetched again";
}

}  // namespace
}  // namespace strata

// A mapped file's pages leave this process's resident set when released: a
// row read from a large table (the token table, streaming) takes with it the
// rest of its 64 KiB block, which the kernel's fault-around maps beside it.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "gguf_writer.h"
#include "safetensors_writer.h"
#include "util/mapped_file.h"

namespace strata {
namespace {

// The resident kilobytes of the mapping that starts at `base` (/proc/self/smaps).
int64_t mapping_rss_kb(const void* base) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in = false;
  char want[32];
  std::snprintf(want, sizeof want, "%lx-", static_cast<unsigned long>(reinterpret_cast<uintptr_t>(base)));
  while (std::getline(smaps, line)) {
    if (line.rfind(want, 0) == 0) in = true;
    else if (in && line.rfind("Rss:", 0) == 0) return std::stoll(line.substr(4));
  }
  return -1;
}

TEST(MappedFile, ReleasingARowDropsItsFaultAroundBlock) {
  testfiles::TempDir tmp("strata-mapped");
  const auto path = tmp / "table.bin";
  constexpr size_t kSize = 1 << 20;  // under a huge page: mapped by 4 KiB pages
  {
    std::ofstream out(path, std::ios::binary);
    std::vector<char> bytes(kSize, 7);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  MappedFile f(path);
  ASSERT_EQ(f.size(), kSize);
  volatile uint8_t sum = 0;
  for (size_t i = 0; i < f.size(); i += 4096) sum = static_cast<uint8_t>(sum + f.data()[i]);
  ASSERT_EQ(mapping_rss_kb(f.data()), 1024);
  // The blocks are of the address space (as the kernel's fault-around's):
  // offsets from the first 64 KiB boundary in the mapping.
  const uintptr_t start = reinterpret_cast<uintptr_t>(f.data());
  const uint8_t* base = f.data() + (((start + 65535) & ~uintptr_t{65535}) - start);
  // A 100-byte row at 300000: its block is [262144, 327680), 64 KiB.
  release_mapped_pages_touched(base + 300000, 100);
  EXPECT_EQ(mapping_rss_kb(f.data()), 1024 - 64);
  // A row across two blocks (at 393200, 100 bytes): [327680, 458752), 128 KiB.
  release_mapped_pages_touched(base + 393200, 100);
  EXPECT_EQ(mapping_rss_kb(f.data()), 1024 - 64 - 128);
  // The file's last bytes: their block, only as far as the mapping goes.
  const uintptr_t end = start + f.size();
  release_mapped_pages_touched(f.data() + f.size() - 10, 10);
  EXPECT_EQ(mapping_rss_kb(f.data()), 1024 - 64 - 128 - static_cast<int64_t>((end - ((end - 10) & ~uintptr_t{65535})) / 1024));
  // Bounded by a table within the file ([base + 700000, base + 800000)): a
  // row at its start lets go of its block's pages from the table's first
  // page on: [696320, 720896), 24 KiB (not the block's [655360, 696320)).
  const int64_t now = mapping_rss_kb(f.data());
  release_mapped_pages_touched(base + 700000, 100, std::span<const uint8_t>(base + 700000, 100000));
  EXPECT_EQ(mapping_rss_kb(f.data()), now - (720896 - (700000 / 4096) * 4096) / 1024);
  // Memory that is not a mapped file: nothing happens.
  std::vector<uint8_t> heap(1 << 16, 1);
  release_mapped_pages_touched(heap.data() + 100, 100);
  EXPECT_EQ(heap[100], 1);
}

// The resident pages of mapped checkpoints are counted apart (a budget's
// baseline leaves them out: they are weights): this file's 1 MiB once
// touched, none of it once released or unmapped.
TEST(MappedFile, ItsResidentPagesAreCountedApart) {
  testfiles::TempDir tmp("strata-mapped");
  const auto path = tmp / "weights.bin";
  constexpr size_t kSize = 1 << 20;
  {
    std::ofstream out(path, std::ios::binary);
    std::vector<char> bytes(kSize, 3);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const uint64_t before = resident_mapped_file_bytes();
  {
    MappedFile f(path);
    volatile uint8_t sum = 0;
    for (size_t i = 0; i < f.size(); i += 4096) sum = static_cast<uint8_t>(sum + f.data()[i]);
    EXPECT_EQ(resident_mapped_file_bytes() - before, kSize);
    release_mapped_pages(f.data(), f.size());
    EXPECT_EQ(resident_mapped_file_bytes(), before);
    for (size_t i = 0; i < f.size(); i += 4096) sum = static_cast<uint8_t>(sum + f.data()[i]);
  }
  EXPECT_EQ(resident_mapped_file_bytes(), before);
}

// Once a GGUF's header is parsed, its pages (here 1 MiB of metadata, as a
// tokenizer's vocabulary is) leave the resident set: the budget does not
// count them. Its values read afterwards are the same.
TEST(MappedFile, AGgufHeaderLeavesTheResidentSetOnceParsed) {
  testfiles::TempDir tmp("strata-mapped");
  const auto path = tmp / "m.gguf";
  testfiles::GgufBytes g;
  g.header(1, 2).kv_u32("general.alignment", 4096).kv_string("big", std::string(1 << 20, 'x'));
  g.tensor("t", {1024}, 0, 0).pad(4096).zeros(4096);  // one F32 tensor of 4 KiB
  {
    std::ofstream out(path, std::ios::binary);
    out.write(g.bytes.data(), static_cast<std::streamsize>(g.bytes.size()));
  }
  GgufFile f(path);
  const TensorView* t = f.find("t");
  ASSERT_NE(t, nullptr);
  // What is left is at most one page: the tensor's, mapped beside the
  // header's last page by the kernel's fault-around (the header's own pages,
  // 1 MiB, are gone).
  const uint8_t* base = t->data - t->offset;
  EXPECT_LE(mapping_rss_kb(base), 4);
  EXPECT_EQ(f.get_string("big"), std::string(1 << 20, 'x'));
}

}  // namespace
}  // namespace strata

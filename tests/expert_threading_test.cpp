// How busy a step's routed experts keep the threads, one per thread or each
// product split (model/moe.h): hand-computed cases, including the H200
// machine's 16 threads on model b of bench/budget_check.sh (51 experts
// a layer, 640 rows wide, hidden 1024), where splitting left 6 of 16 threads
// idle on every gate and up product and one per thread is the busier way.
#include <gtest/gtest.h>

#include <vector>

#include "model/moe.h"

namespace strata {
namespace {

// Groups of these rows, largest first, as experts 0, 1, ... in that order.
ExpertThreading of(const std::vector<uint32_t>& rows, size_t threads, size_t expert_width, size_t width) {
  std::vector<int32_t> ids(rows.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::vector<uint64_t> load(rows.size());
  return expert_threading(ids, rows, threads, expert_width, width, load);
}

TEST(ExpertThreading, TheBusierWayIsChosenByHowTheWorkDivides) {
  // 51 groups of 80 rows over 16 threads: three threads get four (320 rows),
  // thirteen three (240): 4080 / (16 · 320) = 0.796875. Split: 640 rows are
  // 10 groups of 64, one wave; 1024 are 16, one wave: (2 · 640 + 1024) /
  // (16 · 64 · 3) = 0.75.
  const ExpertThreading b = of(std::vector<uint32_t>(51, 80), 16, 640, 1024);
  EXPECT_DOUBLE_EQ(b.one_per_thread, 0.796875);
  EXPECT_DOUBLE_EQ(b.split, 0.75);
  EXPECT_DOUBLE_EQ(b.best(), 0.796875);
  // Eight groups of 512 rows over 16 threads leave half of them idle one per
  // thread; split, 2048 rows are 32 groups (two waves), 7168 are 112 (seven):
  // (2 · 2048 + 7168) / (1024 · 11) = 1.
  const ExpertThreading wide = of(std::vector<uint32_t>(8, 512), 16, 2048, 7168);
  EXPECT_DOUBLE_EQ(wide.one_per_thread, 0.5);
  EXPECT_DOUBLE_EQ(wide.split, 1.0);
  // Groups of unequal size are dealt largest first to the least loaded:
  // {9, 5, 4, 3, 3} over 2 threads: 9 | 5, 4 -> 9 | 9, 3 -> 12 | 9, 3 -> 12 | 12.
  EXPECT_DOUBLE_EQ(of({9, 5, 4, 3, 3}, 2, 64, 64).one_per_thread, 1.0);
  // {7, 4, 3} over 2: 7 | 4, 3 -> 7 | 7.
  EXPECT_DOUBLE_EQ(of({7, 4, 3}, 2, 64, 64).one_per_thread, 1.0);
  // {8, 2} over 2: 8 | 2 -> 10 / 16.
  EXPECT_DOUBLE_EQ(of({8, 2}, 2, 64, 64).one_per_thread, 0.625);
  // One thread: nothing to share.
  EXPECT_DOUBLE_EQ(of({8, 2}, 1, 64, 64).best(), 1.0);
  // The groups' order is the caller's (largest first): ids name the rows.
  const std::vector<int32_t> order = {2, 0, 1};
  const std::vector<uint32_t> rows = {4, 3, 7};
  std::vector<uint64_t> load(3);
  EXPECT_DOUBLE_EQ(expert_threading(order, rows, 2, 64, 64, load).one_per_thread, 1.0);  // 7 | 4, 3
}

}  // namespace
}  // namespace strata

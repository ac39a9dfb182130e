// How busy a step's routed experts keep the threads, one per thread or
// split (model/moe.h): hand-computed cases, including the H200 machine's 16
// threads on model b of bench/budget_check.sh (51 experts a layer, 640 rows
// wide, hidden 1024). Splitting each product in turn left 6 of 16 threads
// idle on every gate and up product; split over all the experts' row groups
// at once (kernels::linear_batch) it keeps them nearly all busy.
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
  // 10 groups of 64, gate and up of 51 experts 1020 groups, 64 waves; 1024
  // rows are 16 groups, 816 for all, 51 waves: 1836 / (16 · 115) = 0.99782...
  const ExpertThreading b = of(std::vector<uint32_t>(51, 80), 16, 640, 1024);
  EXPECT_DOUBLE_EQ(b.one_per_thread, 0.796875);
  EXPECT_DOUBLE_EQ(b.split, 1836.0 / 1840.0);
  EXPECT_DOUBLE_EQ(b.best(), 1836.0 / 1840.0);
  EXPECT_FALSE(b.runs_one_per_thread);
  // Eight groups of 512 rows over 16 threads leave half of them idle one per
  // thread; split, gate and up are 8 · 2 · 32 groups (32 waves), down 8 · 112
  // (56): 1408 / (16 · 88) = 1.
  const ExpertThreading wide = of(std::vector<uint32_t>(8, 512), 16, 2048, 7168);
  EXPECT_DOUBLE_EQ(wide.one_per_thread, 0.5);
  EXPECT_DOUBLE_EQ(wide.split, 1.0);
  // Three experts: gate and up 60 groups (4 waves of 16), down 48 (3):
  // 108 / (16 · 7).
  EXPECT_DOUBLE_EQ(of({80, 80, 80}, 16, 640, 1024).split, 108.0 / 112.0);
  // Decode's groups of at most 4 rows always run one per thread.
  EXPECT_TRUE(of(std::vector<uint32_t>(8, 1), 16, 2048, 7168).runs_one_per_thread);
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

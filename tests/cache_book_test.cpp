// A recurrent state takes a sequence's rows where it stopped, each layer by
// itself: a pass of several parts (model/model.h) runs a layer's parts
// before the next layer's, so the layers run ahead of the length in turn.
#include <gtest/gtest.h>

#include "backend/cache_book.h"
#include "util/error.h"

namespace strata {
namespace {

CacheShape two_state_layers() {
  CacheShape s;
  s.layers = 3;
  s.key_width = 4;
  s.value_width = 4;
  s.max_positions = 64;
  s.windows = {0, 0, 0};
  s.state_floats = {8, 0, 8};  // layers 0 and 2 keep a state, layer 1 rows
  return s;
}

TEST(CacheBook, StateLayersTakeTheirPartsInTurn) {
  CacheBook book(two_state_layers());
  // Layer 0 takes parts [0, 3) and [3, 5); layer 2 then takes the same.
  book.take_state_rows(0, 0, 3);
  book.take_state_rows(0, 3, 2);
  book.take_state_rows(2, 0, 3);
  EXPECT_THROW(book.take_state_rows(2, 4, 1), Error);  // skips position 3
  EXPECT_THROW(book.check_state_rows(2, 4), Error);   // the check alone: nothing moves
  book.check_state_rows(2, 3);
  book.take_state_rows(2, 3, 2);
  EXPECT_THROW(book.take_state_rows(0, 3, 1), Error);  // position 3 again
  EXPECT_EQ(book.length(), 0);
  EXPECT_FALSE(book.set_length(5));
  book.take_state_rows(0, 5, 1);
  // Back to 0 (a new sequence): every state starts again at 0.
  EXPECT_TRUE(book.set_length(0));
  book.take_state_rows(0, 0, 1);
  book.take_state_rows(2, 0, 1);
  // A restored snapshot or loaded session sets where every state continues.
  book.restored(9);
  EXPECT_THROW(book.take_state_rows(0, 1, 1), Error);
  book.take_state_rows(0, 9, 1);
  book.take_state_rows(2, 9, 1);
}

}  // namespace
}  // namespace strata

#pragma once
// Rewriting a quantized matrix into the interleaved layout its fastest
// kernels read (Packing::Interleaved16, linear.h). A matrix is interleaved or
// not by its type and shape alone, never by where its bytes came from, so a
// weight gives the same bits whether it was loaded, cached or streamed.
#include <cstdint>
#include <vector>

#include "kernels/linear.h"

namespace strata::kernels {

// Whether `w` has an interleaved form: a plain Q8_0, MXFP4 or Q4_K matrix
// with a multiple of 16 rows.
bool interleavable(const WeightMatrix& w);

// Writes w's rows, interleaved, to `dst` (w.out · w.row_bytes() bytes, not
// overlapping w.data) and returns the matrix reading them.
WeightMatrix interleave(const WeightMatrix& w, uint8_t* dst);

// Interleaves w's own bytes (they must be writable) and returns the matrix
// reading them. `scratch` holds one group of 16 rows while it is rewritten:
// the caller keeps it between calls (it grows to the largest group once).
WeightMatrix interleave_in_place(const WeightMatrix& w, std::vector<uint8_t>& scratch);
// The same with a buffer of its own (tests and tools).
WeightMatrix interleave_in_place(const WeightMatrix& w);

// interleave_in_place() in pieces, for several threads: its groups of 16
// rows are rewritten independently (interleave_group_in_place for every g
// below interleave_groups(w), in any order, each thread with its own
// scratch), and then interleaved_in_place(w) is the matrix reading them.
int64_t interleave_groups(const WeightMatrix& w);
void interleave_group_in_place(const WeightMatrix& w, int64_t g, std::vector<uint8_t>& scratch);
WeightMatrix interleaved_in_place(const WeightMatrix& w);

}  // namespace strata::kernels

#pragma once
// Where every routed expert's bytes are on disk and how its weights sit in a
// cache slot once read. Built from a checkpoint mapped in place (HF or GGUF:
// each expert is a few tensor slices, read as 4 KiB-aligned supersets) or
// from a pack manifest (each expert is one aligned blob with a checksum).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/tensor.h"
#include "model/expert_provider.h"
#include "storage/storage.h"

namespace strata {

struct ExpertRead {
  FileId file = 0;
  uint64_t offset = 0;       // 4 KiB-aligned
  uint64_t length = 0;       // bytes wanted
  uint64_t slot_offset = 0;  // where they land in the slot (4 KiB-aligned)
  bool verify = false;
  uint64_t xxh3 = 0;
};

struct StreamedExpert {
  // The weights with the ranges in `relative_mask` (visit_expert_ranges
  // order) given as offsets into the slot; the others point at memory that
  // stays resident (small converted vectors).
  ExpertWeights layout;
  uint64_t relative_mask = 0;
  std::vector<ExpertRead> reads;
  uint64_t slot_bytes = 0;     // slot bytes it needs (a multiple of 4 KiB)
  uint64_t payload_bytes = 0;  // bytes of weights proper
  bool blob_header = false;    // the slot starts with a BlobHeader to check
};

struct ExpertCatalog {
  std::vector<std::vector<StreamedExpert>> layers;  // [layer][expert]; empty for dense layers
  uint64_t max_slot_bytes = 0;
  uint64_t resident_bytes = 0;  // expert bytes that could not be streamed and stay in RAM
  // Keeps alive whatever the layouts' resident pointers point into.
  std::shared_ptr<void> keep_alive;
  const StreamedExpert& at(int64_t layer, int64_t expert) const { return layers[layer][expert]; }
};

// Every expert bound by `bind` from `source`'s tensors, turned into reads of
// the files those tensors name (TensorView::file and ::offset) through
// `storage`. Ranges that lie in no tensor of `source` (converted copies) stay
// resident and are counted in resident_bytes.
ExpertCatalog catalog_from_bound_experts(const ModelConfig& c, const ExpertBindFn& bind, const TensorSource& source,
                                         Storage& storage);

// Finishes an entry whose reads are set: slot size from the reads.
void finish_slot_size(StreamedExpert& e);

}  // namespace strata

#pragma once
// The resident part of a pack: every tensor that is not a routed expert,
// written in the source's own format (so the engine reads it with the reader
// it already has): an HF directory `trunk/` (model.safetensors plus config,
// tokenizer and generation files copied) or `trunk.gguf` (all metadata,
// tokenizer included, copied). With int8, the trunk's big matrices become
// int8 with one f32 scale per row (HF: I8 weight + weight_scale) or Q8_0
// (GGUF); norms, biases, embeddings and routers keep their precision.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "model/checkpoint.h"

namespace strata {

struct TrunkResult {
  std::filesystem::path path;    // DIR/trunk or DIR/trunk.gguf
  uint64_t bytes = 0;
  nlohmann::json tensors;        // name -> {"dtype", "shape"}
};

// Writes atomically (a temporary name, renamed when complete), after the
// trunk's files are synced and their checksums written to DIR/trunk.xxh3
// (storage/pack_dir.h), which opening the pack verifies.
TrunkResult write_trunk(const Checkpoint& ck, const std::filesystem::path& dir, bool int8,
                        const std::function<void(uint64_t)>& on_bytes);

// The trunk's byte count as the source stores it (for progress totals).
uint64_t source_trunk_bytes(const Checkpoint& ck);

}  // namespace strata

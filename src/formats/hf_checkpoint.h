#pragma once
// A Hugging Face model directory as a TensorSource. Three layouts, tried in
// this order:
//   1. model.safetensors.index.json: its "weight_map" (tensor -> shard file)
//      is authoritative; each shard is opened once and every mapped tensor
//      must be present in its shard. Only mapped tensors are exposed.
//   2. model.safetensors: a single-file checkpoint.
//   3. any other *.safetensors files in the directory, all of them; a tensor
//      name present in two files is an error.
// Symlinked files are followed (the Hugging Face hub cache links snapshot
// files to blobs).
#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/safetensors.h"
#include "formats/tensor.h"

namespace strata {

class HfCheckpoint : public TensorSource {
 public:
  explicit HfCheckpoint(const std::filesystem::path& dir);

  const TensorView* find(const std::string& name) const override;
  std::vector<std::string> names() const override;  // sorted
  std::string describe() const override { return dir_.string(); }

  const std::filesystem::path& dir() const { return dir_; }
  // The opened files, in the order they were opened (sorted by file name).
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  void load_index(const std::filesystem::path& index_path);
  void load_files(const std::vector<std::filesystem::path>& paths);

  std::filesystem::path dir_;
  // unique_ptr keeps each file, and so each TensorView, at a fixed address.
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, const TensorView*> tensors_;
};

}  // namespace strata

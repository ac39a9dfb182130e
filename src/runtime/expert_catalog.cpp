#include "runtime/expert_catalog.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "model/expert_layout.h"
#include "storage/aligned_buffer.h"
#include "util/mapped_file.h"

namespace strata {

void finish_slot_size(StreamedExpert& e) {
  uint64_t end = 0;
  for (const auto& r : e.reads) end = std::max(end, r.slot_offset + align_up(r.length));
  e.slot_bytes = align_up(end);
}

ExpertCatalog catalog_from_bound_experts(const ModelConfig& c, const ExpertBindFn& bind, Storage& storage) {
  ExpertCatalog cat;
  cat.layers.resize(c.num_layers);
  cat.keep_alive = std::make_shared<ExpertBindFn>(bind);
  std::map<std::string, FileId> files;
  auto file_id = [&](const std::string& path) {
    auto it = files.find(path);
    if (it != files.end()) return it->second;
    return files[path] = storage.open(path);
  };
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.layer_is_moe(l)) continue;
    auto& layer = cat.layers[l];
    layer.reserve(c.n_routed_experts);
    for (int64_t x = 0; x < c.n_routed_experts; ++x) {
      StreamedExpert e;
      e.layout = bind(l, x);
      // Ranges in file order; a range whose aligned superset touches the
      // previous read's extends it (per-expert tensors are usually adjacent).
      struct Located {
        int index;
        FileId file;
        uint64_t offset, bytes;
      };
      std::vector<Located> located;
      int i = 0;
      visit_expert_ranges(e.layout, [&](auto& ptr, size_t bytes) {
        e.payload_bytes += bytes;
        if (auto loc = locate_mapped(ptr))
          located.push_back({i, file_id(loc->path), loc->offset, bytes});
        else
          cat.resident_bytes += bytes;
        ++i;
      });
      std::sort(located.begin(), located.end(),
                [](const Located& a, const Located& b) { return std::tie(a.file, a.offset) < std::tie(b.file, b.offset); });
      // Slot positions: each read starts on 4 KiB; the first at 4 KiB so that
      // no slot offset is 0 (0 would read as "no such range").
      std::vector<uint64_t> slot_pos(i, 0);
      uint64_t cursor = kIoAlign;
      for (const Located& r : located) {
        const uint64_t start = align_down(r.offset), end = r.offset + r.bytes;
        if (!e.reads.empty() && e.reads.back().file == r.file &&
            start <= align_up(e.reads.back().offset + e.reads.back().length)) {
          ExpertRead& prev = e.reads.back();
          prev.length = std::max(prev.length, end - prev.offset);
          cursor = prev.slot_offset + align_up(prev.length);
          slot_pos[r.index] = prev.slot_offset + (r.offset - prev.offset);
          continue;
        }
        ExpertRead rd;
        rd.file = r.file;
        rd.offset = start;
        rd.length = end - start;
        rd.slot_offset = cursor;
        slot_pos[r.index] = cursor + (r.offset - start);
        cursor += align_up(rd.length);
        e.reads.push_back(rd);
      }
      i = 0;
      visit_expert_ranges(e.layout, [&](auto& ptr, size_t) {
        if (slot_pos[i] != 0) {
          ptr = reinterpret_cast<std::remove_reference_t<decltype(ptr)>>(static_cast<uintptr_t>(slot_pos[i]));
          e.relative_mask |= uint64_t{1} << i;
        }
        ++i;
      });
      finish_slot_size(e);
      cat.max_slot_bytes = std::max(cat.max_slot_bytes, e.slot_bytes);
      layer.push_back(std::move(e));
    }
  }
  return cat;
}

}  // namespace strata

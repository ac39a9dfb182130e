#include "model/expert_catalog.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "model/expert_layout.h"
#include "storage/aligned_buffer.h"

namespace strata {

void finish_slot_size(StreamedExpert& e) {
  uint64_t end = 0;
  for (const auto& r : e.reads) end = std::max(end, r.slot_offset + align_up(r.length));
  e.slot_bytes = align_up(end);
}

namespace {

// Which tensor of a source a bound pointer falls in, and so which file bytes
// it stands for. The tensors' own (file, offset) say where their bytes are;
// the pointer only picks the tensor.
class TensorLocator {
 public:
  struct Location {
    const std::string* file;
    uint64_t offset;
  };

  explicit TensorLocator(const TensorSource& source) {
    for (const auto& name : source.names()) {
      const TensorView& t = source.get(name);
      // A view without a file holds memory of its own (a converted copy):
      // what points into it stays resident.
      if (t.data && t.nbytes > 0 && !t.file.empty()) views_.push_back(&t);
    }
    std::sort(views_.begin(), views_.end(), [](const TensorView* a, const TensorView* b) { return a->data < b->data; });
    // Views may nest (a GGUF slice inside its stacked tensor): the running
    // maximum of their ends tells how far back a containing view can start.
    max_end_.reserve(views_.size());
    const uint8_t* end = nullptr;
    for (const TensorView* v : views_) max_end_.push_back(end = std::max(end, v->data + v->nbytes));
  }

  std::optional<Location> locate(const void* ptr) const {
    const auto* p = static_cast<const uint8_t*>(ptr);
    auto it = std::upper_bound(views_.begin(), views_.end(), p, [](const uint8_t* q, const TensorView* v) { return q < v->data; });
    for (size_t i = static_cast<size_t>(it - views_.begin()); i-- > 0 && max_end_[i] > p;) {
      const TensorView* v = views_[i];
      if (p < v->data + v->nbytes) return Location{&v->file, v->offset + static_cast<uint64_t>(p - v->data)};
    }
    return std::nullopt;
  }

 private:
  std::vector<const TensorView*> views_;  // by start address
  std::vector<const uint8_t*> max_end_;   // max end of views_[0..i]
};

}  // namespace

ExpertCatalog catalog_from_bound_experts(const ModelConfig& c, const ExpertBindFn& bind, const TensorSource& source,
                                         Storage& storage) {
  const TensorLocator locator(source);
  ExpertCatalog cat;
  cat.layers.resize(c.expert_layers());
  cat.keep_alive = std::make_shared<ExpertBindFn>(bind);
  std::map<std::string, FileId> files;
  auto file_id = [&](const std::string& path) {
    auto it = files.find(path);
    if (it != files.end()) return it->second;
    return files[path] = storage.open(path);
  };
  for (int64_t l = 0; l < c.expert_layers(); ++l) {
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
        if (auto loc = locator.locate(ptr))
          located.push_back({i, file_id(*loc->file), loc->offset, bytes});
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

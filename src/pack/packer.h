#pragma once
// `strata pack`: turns an HF directory or a GGUF file into a pack - the
// resident trunk in its own file(s), and per drive one file of expert blobs
// (each expert's gate, up, down and their scales as one contiguous 4 KiB-
// aligned blob with a header and an xxh3 checksum), plus manifest.json.
//
// Before anything is written, the source is checked whole: every tensor the
// architecture binds, trunk and routed experts, present, non-empty and of
// the shape the config implies (model/model.h: Model::check_tensors), so a
// source that could not load gives one error naming the tensor and its file
// rather than a pack that fails later.
//
// Deterministic: the same source and options give the same pack, byte for
// byte, wherever it is written and however often it was interrupted (the
// expert files are named by the pack's signature, pack/source_signature.h;
// nothing is timed or random, except drive weights that a probe measures
// now when the drives are on several devices).
//
// Crash safety: DIR/pack.progress.json is written first and marks the
// directory as a pack in the making (opening it says so: storage/pack_dir.h).
// The trunk appears by rename, after its checksums (DIR/trunk.xxh3); expert
// files are written layer by layer and, after each layer is synced, the
// progress file records it. manifest.json is written last, atomically, and
// then the progress file goes: a pack either has a complete manifest or
// none.
//
// Resuming: a re-run resumes after the last recorded layer when the
// signature is the same: pack's options and the source's content as
// pack/source_signature.h samples it (not its paths or modification times).
// One expert of each recorded layer is then made again from the source and
// must be what was written, on the drive too, so a source changed only in
// its experts is caught as well. Otherwise it starts over and says why
// (PackOptions::notice); it never mixes two sources in one pack.
//
// Drives: experts are dealt out by each device's read speed (pack/placement.h).
// Folders on the same device are one drive for placement: they share its
// speed. The manifest keeps the folders so that the pack can move (see
// pack/manifest.h).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace strata {

struct PackOptions {
  std::filesystem::path source;
  // What the manifest records as the source; "" = the source's path
  // (`strata pull` records the remote source and commit instead).
  std::string source_label;
  std::filesystem::path out;
  std::vector<std::filesystem::path> drives;  // empty: the pack directory itself
  std::string trunk = "keep";                 // keep | int8
  std::string experts = "keep";               // keep | q8 | int4 | mxfp4
  std::filesystem::path trace;                // router heat (ExpertHeat JSON) for placement
  // Drive speeds (`strata probe`); "" = the saved probe. When it does not
  // cover every device the drives are on, a short probe is measured now.
  std::filesystem::path probe;
  bool progress = false;
  // What the user should hear of (folders sharing a device, a probe
  // measured): one line each, without a prefix. Not called when unset.
  std::function<void(const std::string&)> notice;
  // An interrupted pack here is not resumed (its expert files are still
  // cleared away): the caller knows its source changed.
  bool start_over = false;
  // Tests: stop (as a crash would) once this many layers are recorded; -1 = never.
  int64_t stop_after_layers = -1;

  // A source whose bytes arrive while it is packed (`strata pull`, which
  // fetches the files as the pack goes and frees what is packed). Then:
  // before_layer(l) is called before layer l's experts are read and returns
  // when their bytes are there; after_layer(l) once they are written and
  // synced (the source's bytes of them may go); before_trunk() before the
  // trunk is read, which is then written last, after every layer. The
  // signature covers the source's headers and small files as always, and
  // `source_identity` (the hashes the source publishes) instead of samples
  // of the trunk; the layers a resumed run finds done are not made again
  // from the source (their bytes are gone): the feeder vouches for the
  // source, and removes the progress record when the source changed.
  struct Feed {
    std::function<void(int64_t layer)> before_layer, after_layer;
    std::function<void()> before_trunk;
    std::string source_identity;
  };
  std::optional<Feed> feed;
};

struct PackReport {
  uint64_t trunk_bytes = 0;
  uint64_t expert_bytes = 0;   // blob bytes written (this run and resumed)
  int64_t layers_resumed = 0;  // layers found done by an earlier run
  bool already_packed = false;
  bool restarted = false;      // an interrupted pack was found but could not be resumed (notice says why)
  std::vector<double> drive_weights;
  // Where the drive weights came from: "saved" (a probe file), "measured"
  // (a short probe now), "equal" (one device, or the probe failed),
  // "resumed" (the interrupted run's, which placed the layers it finished).
  std::string probe;
  double seconds = 0;
};

PackReport pack_model(const PackOptions& options);

}  // namespace strata

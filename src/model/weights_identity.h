#pragma once
// What a checkpoint's weights are, as one short string: whatever was
// computed from them (a session's KV cache, the expert heat of earlier runs)
// is reused only under the same identity.
//
// Contract: the identity changes whenever the weights can have changed, and
// does not depend on where the model is. It covers
//   - the tensor index: every tensor's name, dtype, shape, and where its
//     bytes are (its file, named relative to the model, and offset, length);
//   - every file the weights are in (a pack's expert drive files too): size
//     and modification time, to the nanosecond;
//   - the checkpoint's metadata: config.json (the trunk's, for a pack), a
//     GGUF file's header (metadata and tensor infos), a pack's manifest.json.
// Moving or copying a model with its modification times kept (mv, cp -a)
// keeps its identity; rewriting any weight file, even with the same bytes,
// or touching it, gives a new one. Files are not read beyond their metadata,
// so a terabyte checkpoint is identified in the time a few stat() calls take
// per file.
#include <string>

#include "model/checkpoint.h"

namespace strata {

// Sixteen hex digits. Never throws for a checkpoint that opened: a file that
// cannot be read or stat()ed counts as missing (that too is part of it).
std::string weights_identity(const Checkpoint& ck);

}  // namespace strata

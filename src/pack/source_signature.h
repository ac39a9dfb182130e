#pragma once
// What a pack is made of, as one number: the source's content and pack's
// options. `strata pack` resumes an interrupted pack only when it matches,
// answers "already packed" only when it matches, and names its expert files
// by it (so the same source and options always give the same files).
//
// The source's content, cheaply (a few pages per tensor, never the whole
// source): every file's name and size; the header of every tensor file
// (safetensors' JSON, GGUF's metadata and tensor infos) and the whole of
// every other file up to 64 MiB (config, tokenizer); and of every trunk
// tensor its name, type, shape and a sample of its bytes (first, middle and
// last 4 KiB). Not the paths or modification times: a source copied
// elsewhere is the same source, a source rewritten in place with the same
// sizes and times is not. Routed experts are not sampled here; a resume
// checks them against what was written instead (pack/packer.h).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "model/checkpoint.h"

namespace strata {

// Format of the pack this strata writes: a change to blob layouts or to the
// trunk changes it, and so every signature.
inline constexpr const char* kPackFormat = "strata-pack 2";

// `options`: what else decides the bytes written (pack's options, the
// trace's content, the drive folders as the manifest records them).
// `sample_trunk` false: the trunk's bytes are left out (`strata pull`,
// whose trunk arrives after the signature is needed; it vouches for the
// bytes by the source's published hashes and its own records instead).
uint64_t pack_signature(const Checkpoint& ck, const std::vector<std::string>& options, bool sample_trunk = true);

}  // namespace strata

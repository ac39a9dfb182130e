#pragma once
// What a mapped file that shrinks under us turns into: one clear error.
//
// Touching a page of a mapping that lies past the end of its file (the file
// was truncated or rewritten shorter while mapped) raises SIGBUS, as does a
// page the drive fails to read in. Every MappedFile registers its range here;
// the SIGBUS handler installed with the first one finds the file that holds
// the faulting address and ends the process the way the CLI ends it on any
// other error: one line on stderr naming the file and the byte, and exit
// status 1. It cannot be an exception: the fault happens inside a kernel
// reading weights, on whichever thread touched the page, with no way back.
// A SIGBUS outside every registered mapping goes to the handler that was
// there before (the default: the process dies of the signal, as a bug should).
//
// The handler only reads a fixed table (lock-free) and calls stat(), write()
// and _exit(), all async-signal-safe.
#include <cstddef>
#include <string>

namespace strata::detail {

// [data, data + size) maps `path` from byte 0. Installs the handler on first use.
void guard_mapping(const void* data, size_t size, const std::string& path);
// The range starting at `data` is about to be unmapped.
void unguard_mapping(const void* data);

}  // namespace strata::detail

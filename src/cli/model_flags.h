#pragma once
// The flags every command that loads a model shares (`generate`, `serve`):
// threads, the context, the RAM budget and the expert-streaming knobs, as
// the load options of runtime/loader.h.
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "model/model.h"
#include "runtime/loader.h"

namespace strata::cli {

struct ModelFlags {
  int threads = 0;
  double ram_gib = 0;
  bool stream = false;
  size_t cache_experts = 0;
  int64_t ctx = 4096;
  std::string prefetch = "auto";
  std::string verify = "first";
  bool no_verify = false;  // = --verify off
  std::string heat;
  std::string io;
};

void add_model_flags(CLI::App* cmd, ModelFlags& f);
// Throws strata::Error for values out of range.
LoadOptions load_options(const ModelFlags& f);

}  // namespace strata::cli

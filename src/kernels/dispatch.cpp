#include "kernels/dispatch.h"

#if defined(STRATA_X86_SIMD)
#include <cpuid.h>
#endif

#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kernels/dispatch_internal.h"
#include "util/error.h"

namespace strata::kernels {

namespace {

#if defined(STRATA_X86_SIMD)
// CPUID leaf 1, ECX: clang's __builtin_cpu_supports does not know "f16c".
bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

bool cpu_has_avx2() {
#if defined(STRATA_X86_SIMD)
  __builtin_cpu_init();
  // libgcc also checks that the OS saves the ymm state (XGETBV).
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(STRATA_X86_SIMD)
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

const detail::KernelTable* table_for(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return &detail::kScalarTable;
    case Isa::Avx2: return cpu_has_avx2() ? detail::avx2_table() : nullptr;
    case Isa::Avx512: return cpu_has_avx512() ? detail::avx512_table() : nullptr;
  }
  return nullptr;
}

Isa best_isa() {
  if (table_for(Isa::Avx512)) return Isa::Avx512;
  if (table_for(Isa::Avx2)) return Isa::Avx2;
  return Isa::Scalar;
}

Isa isa_from_env() {
  const char* env = std::getenv("STRATA_KERNELS");
  if (!env || !*env) return best_isa();
  const std::string_view v(env);
  Isa isa;
  if (v == "scalar")
    isa = Isa::Scalar;
  else if (v == "avx2")
    isa = Isa::Avx2;
  else if (v == "avx512")
    isa = Isa::Avx512;
  else
    throw Error("STRATA_KERNELS='" + std::string(v) + "' is not one of scalar, avx2, avx512");
  if (!table_for(isa))
    throw Error("STRATA_KERNELS=" + std::string(v) + " but this CPU (or build) cannot run " + isa_name(isa) +
                " kernels");
  return isa;
}

std::atomic<const detail::KernelTable*> g_table{nullptr};
std::atomic<Isa> g_isa{Isa::Scalar};

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

bool isa_supported(Isa isa) { return table_for(isa) != nullptr; }

void set_isa(Isa isa) {
  const detail::KernelTable* t = table_for(isa);
  if (!t) throw Error(std::string("kernels: this CPU (or build) cannot run ") + isa_name(isa) + " kernels");
  g_isa.store(isa, std::memory_order_relaxed);
  g_table.store(t, std::memory_order_release);
}

Isa active_isa() {
  detail::active_table();
  return g_isa.load(std::memory_order_relaxed);
}

namespace detail {

const KernelTable& active_table() {
  const KernelTable* t = g_table.load(std::memory_order_acquire);
  if (t) return *t;
  set_isa(isa_from_env());
  return *g_table.load(std::memory_order_acquire);
}

}  // namespace detail

}  // namespace strata::kernels

#pragma once
#include "kernels/dispatch.h"
#include "kernels/kernel_abi.h"

namespace strata::kernels::detail {

// The table of the active ISA (chosen on first use).
const KernelTable& active_table();

}  // namespace strata::kernels::detail

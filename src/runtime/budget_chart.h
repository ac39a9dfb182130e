#pragma once
// `strata budget --svg`: predicted decode tok/s against the RAM budget, one
// curve per number of drives (budget.h's prediction at each of `points`
// budgets from the least that works to where every expert fits), as a
// self-contained SVG document.
#include <cstdint>
#include <string>

#include "runtime/budget.h"

namespace strata {

std::string budget_chart_svg(const BudgetShape& shape, const BudgetMachine& machine, const std::string& title,
                             int points = 48);

}  // namespace strata

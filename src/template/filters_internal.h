#pragma once
// Internal to the builtin filters (filters*.cpp): the argument helpers they
// share, and the filters each file defines for the table in filters.cpp.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "template/builtins.h"
#include "template/error.h"
#include "template/value.h"

namespace strata::tmpl::detail {

using Args = CallArgs;

inline Value none() { return Value::none(); }
inline Value str(const char* s) { return Value::string(s); }
inline Value boolean(bool b) { return Value::boolean(b); }
inline Value integer(int64_t i) { return Value::integer(i); }

inline int64_t int_arg(const Value& v, const char* what) {
  if (v.is_integral()) return v.as_int();
  if (v.is_undefined()) undefined_error(v);
  render_error(std::string("'") + type_name(v) + "' object cannot be interpreted as an integer (" + what + ")");
}

inline std::vector<Value> iterate_filtered(Interpreter& in, const Value& v) {
  return iterate(in, v);
}

// The generator a jinja2 filter returns: `produce` runs on first use.
inline Value lazy(const char* type, LazySeq::Producer produce) {
  return Value::object(std::make_shared<LazySeq>(type, std::move(produce)));
}

// A builtin filter (the type FilterFn points to).
using FilterImpl = Value(Interpreter& in, const Value& v, Args& a);

// filters_strings.cpp
FilterImpl f_upper, f_lower, f_capitalize, f_title, f_trim, f_replace, f_string, f_safe, f_escape, f_forceescape,
    f_center, f_indent, f_truncate, f_wordcount, f_format, f_tojson;
// filters_numbers.cpp
FilterImpl f_int, f_float, f_abs, f_round;
// filters_sequences.cpp
FilterImpl f_length, f_list, f_first, f_last, f_reverse, f_join, f_items, f_dictsort, f_sort, f_unique, f_min, f_max,
    f_sum, f_batch, f_slice, f_default, f_attr;
// filters_map_select.cpp
FilterImpl f_map, f_select, f_reject, f_selectattr, f_rejectattr;

}  // namespace strata::tmpl::detail

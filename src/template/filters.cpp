// jinja2's builtin filters (jinja2/filters.py, 3.1), with transformers'
// tojson in place of jinja2's own.
// This file holds the table find_filter searches and the jinja2 filters strata
// does not support; the others are defined by kind in filters_strings.cpp,
// filters_numbers.cpp, filters_sequences.cpp and filters_map_select.cpp.
#include "template/builtins.h"
#include "template/error.h"
#include "template/filters_internal.h"

namespace strata::tmpl {

namespace {

using namespace detail;  // the filters (filters_internal.h)

#define STRATA_UNSUPPORTED_FILTER(name)                                                     \
  Value f_##name(Interpreter&, const Value&, Args&) {                                       \
    render_error("the jinja2 filter '" #name "' is not supported by strata's template engine"); \
  }
STRATA_UNSUPPORTED_FILTER(filesizeformat)
STRATA_UNSUPPORTED_FILTER(groupby)
STRATA_UNSUPPORTED_FILTER(pprint)
STRATA_UNSUPPORTED_FILTER(random)
STRATA_UNSUPPORTED_FILTER(striptags)
STRATA_UNSUPPORTED_FILTER(urlencode)
STRATA_UNSUPPORTED_FILTER(urlize)
STRATA_UNSUPPORTED_FILTER(wordwrap)
STRATA_UNSUPPORTED_FILTER(xmlattr)
#undef STRATA_UNSUPPORTED_FILTER

const FilterDef kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"filesizeformat", f_filesizeformat},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_forceescape},
    {"format", f_format},
    {"groupby", f_groupby},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"pprint", f_pprint},
    {"random", f_random},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"slice", f_slice},
    {"sort", f_sort},
    {"string", f_string},
    {"striptags", f_striptags},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", f_unique},
    {"upper", f_upper},
    {"urlencode", f_urlencode},
    {"urlize", f_urlize},
    {"wordcount", f_wordcount},
    {"wordwrap", f_wordwrap},
    {"xmlattr", f_xmlattr},
};

}  // namespace

const FilterDef* find_filter(std::string_view name) {
  for (const FilterDef& f : kFilters)
    if (name == f.name) return &f;
  return nullptr;
}

}  // namespace strata::tmpl

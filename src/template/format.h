#pragma once
// Python's two string formatting mini-languages as templates reach them:
// printf-style `"%s: %d" % (a, b)` (and the `format` filter), and
// `"{} {name:>8}".format(...)`. With a Markup (safe) format string the
// arguments are HTML-escaped, as markupsafe does.
#include <string>

#include "template/value.h"

namespace strata::tmpl {

// fmt % args: args is a tuple (positional), a dict (for %(name)s) or one value.
std::string percent_format(Interpreter& in, const Value& fmt, const Value& args);

// fmt.format(*args, **kwargs); attribute and index lookups in fields go
// through the sandbox's getattr / getitem.
std::string str_format(Interpreter& in, const Value& fmt, const CallArgs& args);

}  // namespace strata::tmpl

// jinja2's filters that apply another filter or test item by item: map,
// select, reject, selectattr, rejectattr.
#include "template/error.h"
#include "template/filters_internal.h"
#include "template/interpreter.h"

namespace strata::tmpl::detail {

// `if value:` then one result per item: an attribute lookup (attribute=,
// default=) or another filter applied with the remaining arguments.
Value f_map(Interpreter& in, const Value& v, Args& a) {
  const Value subject = v;
  const Args args = a;
  return lazy("generator", [subject, args](Interpreter& in) {
    std::vector<Value> out;
    if (!truthy(subject)) return out;
    if (args.pos.empty()) {
      Value attribute, def = none();
      bool have_attr = false;
      for (const auto& [k, val] : args.kw) {
        if (k == "attribute") {
          attribute = val;
          have_attr = true;
        } else if (k == "default") {
          def = val;
        }
      }
      if (!have_attr) render_error("map requires a filter argument");
      for (const auto& kv : args.kw)
        if (kv.first != "attribute" && kv.first != "default") render_error("Unexpected keyword argument '" + kv.first + "'");
      for (const Value& item : iterate_filtered(in, subject)) {
        Value r = get_attribute_path(in, item, attribute);
        if (r.is_undefined() && !def.is_none()) r = def;
        out.push_back(std::move(r));
      }
      return out;
    }
    const std::string name = to_str(args.pos[0]);
    CallArgs rest;
    rest.pos.assign(args.pos.begin() + 1, args.pos.end());
    rest.kw = args.kw;
    for (const Value& item : iterate_filtered(in, subject)) {
      CallArgs call = rest;
      out.push_back(in.call_filter(name, item, call));
    }
    return out;
  });
}

namespace {

// jinja2's select_or_reject: `if value:`, then keep the items whose test
// (or truth) matches.
Value select_reject(Interpreter& in, const Value& v, Args& a, bool select, bool by_attr) {
  const Value subject = v;
  const Args args = a;
  return lazy("generator", [subject, args, select, by_attr](Interpreter& in) {
    std::vector<Value> out;
    if (!truthy(subject)) return out;
    std::size_t off = 0;
    Value attribute;
    if (by_attr) {
      if (args.pos.empty()) render_error("Missing parameter for attribute name");
      attribute = args.pos[0];
      off = 1;
    }
    const bool has_test = args.pos.size() > off;
    const std::string test_name = has_test ? to_str(args.pos[off]) : std::string();
    CallArgs rest;
    if (has_test) rest.pos.assign(args.pos.begin() + static_cast<std::ptrdiff_t>(off + 1), args.pos.end());
    rest.kw = args.kw;
    for (const Value& item : iterate_filtered(in, subject)) {
      const Value tested = by_attr ? get_attribute_path(in, item, attribute) : item;
      bool ok;
      if (has_test) {
        CallArgs call = rest;
        ok = in.call_test(test_name, tested, call);
      } else {
        ok = truthy(tested);
      }
      if (ok == select) out.push_back(item);
    }
    return out;
  });
}

}  // namespace

Value f_select(Interpreter& in, const Value& v, Args& a) { return select_reject(in, v, a, true, false); }
Value f_reject(Interpreter& in, const Value& v, Args& a) { return select_reject(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, Args& a) { return select_reject(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, Args& a) { return select_reject(in, v, a, false, true); }

}  // namespace strata::tmpl::detail

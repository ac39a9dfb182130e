// jinja2's sequence filters: length, list, first, last, reverse, join, items,
// dictsort, sort, unique, min, max, sum, batch, slice; and default and attr.
#include <algorithm>

#include "template/error.h"
#include "template/filters_internal.h"
#include "template/interpreter.h"
#include "template/text.h"

namespace strata::tmpl::detail {

namespace {

// Python str.lower() for strings, the value itself otherwise (jinja2's ignore_case).
Value ignore_case(const Value& v) { return v.is_string() ? Value::string(text::lower(v.str())) : v; }

}  // namespace

Value f_length(Interpreter& in, const Value& v, Args& a) {
  bind_args("length", a, {});
  return integer(length(v));
}

Value f_list(Interpreter& in, const Value& v, Args& a) {
  bind_args("list", a, {});
  return Value::list(iterate_filtered(in, v));
}

Value f_first(Interpreter& in, const Value& v, Args& a) {
  bind_args("first", a, {});
  if (v.is_string()) {
    if (v.str().empty()) return Value::undefined("No first item, sequence was empty.");
    std::size_t i = 0;
    text::next(v.str(), i);
    return Value::string(v.str().substr(0, i));  // next(iter(Markup)) is a plain str
  }
  if (LazySeq* it = as_lazy(v)) {
    Value first;
    if (!it->next(in, first)) return Value::undefined("No first item, sequence was empty.");
    return first;
  }
  std::vector<Value> items = iterate_filtered(in, v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter& in, const Value& v, Args& a) {
  bind_args("last", a, {});
  const bool reversible = v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined() ||
                          (v.is_object() && v.object().reversible());
  if (!reversible) render_error("'" + type_name(v) + "' object is not reversible");
  std::vector<Value> items = iterate(in, v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

// str -> reversed str; otherwise reversed(value), an iterator, or when the
// value cannot be reversed (a generator) a reversed list of its items.
Value f_reverse(Interpreter& in, const Value& v, Args& a) {
  bind_args("reverse", a, {});
  if (v.is_string()) {
    std::u32string s = text::decode(v.str());
    std::reverse(s.begin(), s.end());
    return Value::string(text::encode(s), v.safe());
  }
  if (v.is_list() || v.is_tuple() || v.is_dict() || v.is_undefined() || (v.is_object() && v.object().reversible())) {
    const char* type = v.is_list() ? "list_reverseiterator" : v.is_dict() ? "dict_reversekeyiterator" : "reversed";
    const Value subject = v;
    return lazy(type, [subject](Interpreter& in) {
      std::vector<Value> items = iterate(in, subject);
      std::reverse(items.begin(), items.end());
      return items;
    });
  }
  if (!v.is_object() || !v.object().iterable()) render_error("argument must be iterable");
  std::vector<Value> items = iterate(in, v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_join(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("join", a, {{"d", str("")}, {"attribute", none()}});
  const std::string sep = to_str(p[0]);
  std::string out;
  bool first = true;
  for (const Value& item : iterate_filtered(in, v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(p[1].is_none() ? item : get_attribute_path(in, item, p[1]));
    in.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value f_items(Interpreter& in, const Value& v, Args& a) {
  bind_args("items", a, {});
  const Value subject = v;
  return lazy("generator", [subject](Interpreter&) {
    std::vector<Value> out;
    if (subject.is_undefined()) return out;
    if (!subject.is_dict()) render_error("Can only get item pairs from a mapping.");
    for (const auto& [k, val] : subject.dict().items()) out.push_back(Value::tuple({k, val}));
    return out;
  });
}

namespace {

// Stable sort on keys with Python's < (TypeError for unorderable keys).
std::vector<Value> sorted_by(std::vector<Value> items, const std::vector<Value>& keys, bool reverse) {
  std::vector<std::size_t> order(items.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return reverse ? less(keys[y], keys[x]) : less(keys[x], keys[y]);
  });
  std::vector<Value> out;
  out.reserve(items.size());
  for (std::size_t i : order) out.push_back(std::move(items[i]));
  return out;
}

}  // namespace

Value f_dictsort(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("dictsort", a,
                           {{"case_sensitive", boolean(false)}, {"by", str("key")}, {"reverse", boolean(false)}});
  const std::string by = to_str(p[1]);
  if (by != "key" && by != "value") render_error("You can only sort by either \"key\" or \"value\"");
  if (v.is_undefined()) undefined_error(v);
  if (!v.is_dict()) render_error("'" + type_name(v) + "' object has no attribute 'items'");
  std::vector<Value> items, keys;
  for (const auto& [k, val] : v.dict().items()) {
    items.push_back(Value::tuple({k, val}));
    const Value& key = by == "key" ? k : val;
    keys.push_back(truthy(p[0]) ? key : ignore_case(key));
  }
  return Value::list(sorted_by(std::move(items), keys, truthy(p[2])));
}

namespace {

// make_multi_attrgetter: "a,b" -> [item.a, item.b]; no attribute -> [item].
Value multi_key(Interpreter& in, const Value& item, const Value& attribute, bool case_sensitive) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    for (const std::string& part : text::split(attribute.str(), std::string(","), -1)) {
      Value k = get_attribute_path(in, item, Value::string(part));
      parts.push_back(case_sensitive ? k : ignore_case(k));
    }
  } else {
    Value k = get_attribute_path(in, item, attribute);
    parts.push_back(case_sensitive ? k : ignore_case(k));
  }
  return Value::list(std::move(parts));
}

}  // namespace

Value f_sort(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("sort", a, {{"reverse", boolean(false)}, {"case_sensitive", boolean(false)}, {"attribute", none()}});
  std::vector<Value> items = iterate_filtered(in, v);
  std::vector<Value> keys;
  for (const Value& item : items) keys.push_back(multi_key(in, item, p[2], truthy(p[1])));
  return Value::list(sorted_by(std::move(items), keys, truthy(p[0])));
}

Value f_unique(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("unique", a, {{"case_sensitive", boolean(false)}, {"attribute", none()}});
  const Value subject = v;
  return lazy("generator", [subject, p](Interpreter& in) {
    std::vector<Value> out, seen;
    for (const Value& item : iterate_filtered(in, subject)) {
      Value key = get_attribute_path(in, item, p[1]);
      if (!truthy(p[0])) key = ignore_case(key);
      check_hashable(key);
      bool dup = false;
      for (const Value& s : seen)
        if (equals(s, key)) {
          dup = true;
          break;
        }
      if (dup) continue;
      in.step();
      seen.push_back(key);
      out.push_back(item);
    }
    return out;
  });
}

namespace {

Value min_max(Interpreter& in, const Value& v, Args& a, bool want_max) {
  const auto p = bind_args(want_max ? "max" : "min", a, {{"case_sensitive", boolean(false)}, {"attribute", none()}});
  std::vector<Value> items = iterate_filtered(in, v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& item) {
    Value k = get_attribute_path(in, item, p[1]);
    return truthy(p[0]) ? k : ignore_case(k);
  };
  std::size_t best = 0;
  Value best_key = key(items[0]);
  for (std::size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (want_max ? less(best_key, k) : less(k, best_key)) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

}  // namespace

Value f_min(Interpreter& in, const Value& v, Args& a) { return min_max(in, v, a, false); }
Value f_max(Interpreter& in, const Value& v, Args& a) { return min_max(in, v, a, true); }

Value f_sum(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("sum", a, {{"attribute", none()}, {"start", integer(0)}});
  Value acc = p[1];
  for (const Value& item : iterate_filtered(in, v)) {
    if (acc.is_string()) render_error("sum() can't sum strings [use ''.join(seq) instead]");
    acc = in.binary(BinOp::Add, acc, get_attribute_path(in, item, p[0]));
  }
  return acc;
}

Value f_batch(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("batch", a, {{"linecount", {}}, {"fill_with", none()}});
  const Value subject = v;
  return lazy("generator", [subject, p](Interpreter& in) {
    const int64_t n = int_arg(p[0], "linecount");
    std::vector<Value> out, cur;
    for (const Value& item : iterate_filtered(in, subject)) {
      if (static_cast<int64_t>(cur.size()) == n) {
        out.push_back(Value::list(std::move(cur)));
        cur.clear();
      }
      cur.push_back(item);
    }
    if (!cur.empty()) {
      if (!p[1].is_none() && static_cast<int64_t>(cur.size()) < n) {
        in.check_size(static_cast<std::size_t>(n));
        while (static_cast<int64_t>(cur.size()) < n) cur.push_back(p[1]);
      }
      out.push_back(Value::list(std::move(cur)));
    }
    return out;
  });
}

Value f_slice(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("slice", a, {{"slices", {}}, {"fill_with", none()}});
  const Value subject = v;
  return lazy("generator", [subject, p](Interpreter& in) {
    std::vector<Value> seq = iterate_filtered(in, subject);
    const int64_t slices = int_arg(p[0], "slices");
    std::vector<Value> out;
    if (slices <= 0) {
      if (slices == 0 && !seq.empty()) render_error("integer division or modulo by zero");
      return out;
    }
    in.check_size(static_cast<std::size_t>(slices));
    const auto len = static_cast<int64_t>(seq.size());
    const int64_t per = len / slices, extra = len % slices;
    int64_t offset = 0;
    for (int64_t k = 0; k < slices; ++k) {
      const int64_t start = offset + k * per;
      if (k < extra) ++offset;
      const int64_t end = offset + (k + 1) * per;
      std::vector<Value> tmp(seq.begin() + start, seq.begin() + end);
      if (!p[1].is_none() && k >= extra) tmp.push_back(p[1]);
      out.push_back(Value::list(std::move(tmp)));
    }
    return out;
  });
}

Value f_default(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("default", a, {{"default_value", str("")}, {"boolean", boolean(false)}});
  if (v.is_undefined() || (truthy(p[1]) && !truthy(v))) return p[0];
  return v;
}

Value f_attr(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("attr", a, {{"name", {}}});
  if (!p[0].is_string()) render_error("attribute name must be string");
  const std::string& name = p[0].str();
  const bool has = (v.is_string() || v.is_sequence() || v.is_dict()) ? find_method(v, name).has_value()
                   : v.is_namespace() ? v.ns().attrs.find(std::string_view(name)) != nullptr
                   : v.is_object()    ? !v.object().getattr(name).is_undefined()
                                      : false;
  if (v.is_undefined()) undefined_error(v);
  if (!has) return Value::undefined("'" + object_type_repr(v) + "' has no attribute '" + name + "'");
  return in.getattr(v, name);
}

}  // namespace strata::tmpl::detail

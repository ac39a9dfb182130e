#include "template/builtins.h"

#include "template/error.h"
#include "template/interpreter.h"

namespace strata::tmpl {

std::vector<Value> bind_args(std::string_view function, CallArgs& args, std::initializer_list<Param> params) {
  const std::string fn(function);
  std::vector<std::optional<Value>> bound(params.size());
  if (args.pos.size() > params.size())
    render_error(fn + "() takes at most " + std::to_string(params.size()) + " argument(s) (" +
                 std::to_string(args.pos.size()) + " given)");
  for (std::size_t i = 0; i < args.pos.size(); ++i) bound[i] = args.pos[i];
  for (auto& [key, value] : args.kw) {
    std::size_t i = 0;
    for (const Param& p : params) {
      if (key == p.name) break;
      ++i;
    }
    if (i == params.size()) render_error(fn + "() got an unexpected keyword argument '" + key + "'");
    if (bound[i]) render_error(fn + "() got multiple values for argument '" + key + "'");
    bound[i] = value;
  }
  std::vector<Value> out;
  out.reserve(params.size());
  std::size_t i = 0;
  for (const Param& p : params) {
    if (bound[i]) out.push_back(std::move(*bound[i]));
    else if (p.def) out.push_back(*p.def);
    else render_error(fn + "() missing required argument '" + p.name + "'");
    ++i;
  }
  return out;
}

std::string soft_str(const Value& v) { return v.is_string() ? v.str() : to_str(v); }

Value get_attribute_path(Interpreter& in, const Value& item, const Value& attribute) {
  if (attribute.is_none()) return item;
  if (!attribute.is_string()) return in.getitem(item, attribute);
  Value cur = item;
  const std::string& path = attribute.str();
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos && part.size() < 18;
    cur = in.getitem(cur, digits ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

}  // namespace strata::tmpl

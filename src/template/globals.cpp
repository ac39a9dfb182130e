// Global functions: jinja2's defaults (range as the sandbox limits it, dict,
// namespace, cycler, joiner) and the two transformers adds for chat
// templates: raise_exception(message) and strftime_now(format).
#include <ctime>
#include <memory>

#include "template/builtins.h"
#include "template/error.h"
#include "template/interpreter.h"

namespace strata::tmpl {

namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

int64_t range_arg(const Value& v) {
  if (v.is_integral()) return v.as_int();
  if (v.is_undefined()) undefined_error(v);
  render_error("'" + type_name(v) + "' object cannot be interpreted as an integer");
}

Value g_range(Interpreter& in, CallArgs& a) {
  if (!a.kw.empty()) render_error("range() takes no keyword arguments");
  if (a.pos.empty() || a.pos.size() > 3)
    render_error("range expected at most 3 arguments, got " + std::to_string(a.pos.size()));
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = range_arg(a.pos[0]);
  } else {
    start = range_arg(a.pos[0]);
    stop = range_arg(a.pos[1]);
    if (a.pos.size() == 3) step = range_arg(a.pos[2]);
  }
  if (step == 0) render_error("range() arg 3 must not be zero");
  // len(range) without overflow
  __int128 n = 0;
  if (step > 0 && stop > start) n = (static_cast<__int128>(stop) - start + step - 1) / step;
  if (step < 0 && stop < start) n = (static_cast<__int128>(start) - stop - step - 1) / -step;
  if (n > kMaxRange)
    render_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(kMaxRange) + ").");
  std::vector<Value> out;
  out.reserve(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.push_back(Value::integer(start + i * step));
  in.check_size(out.size());
  return Value::list(std::move(out));
}

// dict(*args, **kwargs) as Python builds it.
DictObj make_dict(Interpreter& in, CallArgs& a, const char* fn) {
  if (a.pos.size() > 1) render_error(std::string(fn) + " expected at most 1 argument, got " + std::to_string(a.pos.size()));
  DictObj d;
  if (!a.pos.empty()) {
    const Value& src = a.pos[0];
    if (src.is_dict()) {
      d = src.dict();
    } else {
      std::size_t index = 0;
      for (const Value& item : iterate(in, src)) {
        std::vector<Value> pair = item.is_string() || item.is_sequence() || item.is_dict() ? iterate(in, item) : std::vector<Value>{};
        if (pair.size() != 2)
          render_error("dictionary update sequence element #" + std::to_string(index) + " has length " +
                       std::to_string(pair.size()) + "; 2 is required");
        d.set(pair[0], pair[1]);
        ++index;
      }
    }
  }
  for (auto& [k, v] : a.kw) d.set(Value::string(k), v);
  return d;
}

Value g_dict(Interpreter& in, CallArgs& a) { return Value::dict(make_dict(in, a, "dict")); }

Value g_namespace(Interpreter& in, CallArgs& a) { return in.make_namespace(make_dict(in, a, "namespace")); }

Value g_raise_exception(Interpreter&, CallArgs& a) {
  const auto p = bind_args("raise_exception", a, {{"message", {}}});
  throw TemplateError(TemplateError::Kind::Raised, to_str(p[0]));
}

Value g_strftime_now(Interpreter& in, CallArgs& a) {
  const auto p = bind_args("strftime_now", a, {{"format", {}}});
  if (!p[0].is_string()) render_error("strftime() argument 1 must be str, not " + type_name(p[0]));
  // datetime.strftime on a naive datetime: %f is the microseconds, %z and %Z
  // are empty; the rest goes to the C library.
  const std::string& fmt = p[0].str();
  std::string c_fmt;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] == '%' && i + 1 < fmt.size()) {
      const char c = fmt[i + 1];
      if (c == 'f') {
        c_fmt += "000000";
        ++i;
        continue;
      }
      if (c == 'z' || c == 'Z') {
        ++i;
        continue;
      }
      c_fmt += fmt[i];
      c_fmt += fmt[++i];
      continue;
    }
    c_fmt += fmt[i];
  }
  if (c_fmt.empty()) return Value::string("");
  const std::tm tm = in.now();
  std::string out(64 + c_fmt.size() * 8, '\0');
  for (int attempt = 0; attempt < 8; ++attempt) {
    const std::size_t n = std::strftime(out.data(), out.size(), c_fmt.c_str(), &tm);
    if (n > 0) {
      out.resize(n);
      return Value::string(std::move(out));
    }
    in.check_size(out.size() * 2);
    out.resize(out.size() * 2);
  }
  return Value::string("");
}

// cycler(*items): .next(), .reset(), .current
class Cycler : public Object {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
  std::string type_name() const override { return "Cycler"; }
  std::string repr() const override { return "<jinja2.utils.Cycler object>"; }
  Value getattr(const std::string& name) override {
    if (name == "current") return items_[pos_];
    if (name == "items") return Value::list(items_);
    if (name == "next") {
      auto self = self_.lock();
      return Value::function("method 'next'", [self](Interpreter&, CallArgs&) {
        auto* c = static_cast<Cycler*>(self.get());
        Value v = c->items_[c->pos_];
        c->pos_ = (c->pos_ + 1) % c->items_.size();
        return v;
      });
    }
    if (name == "reset") {
      auto self = self_.lock();
      return Value::function("method 'reset'", [self](Interpreter&, CallArgs&) {
        static_cast<Cycler*>(self.get())->pos_ = 0;
        return Value::none();
      });
    }
    return Object::getattr(name);
  }
  std::weak_ptr<Object> self_;

 private:
  std::vector<Value> items_;
  std::size_t pos_ = 0;
};

Value g_cycler(Interpreter&, CallArgs& a) {
  if (!a.kw.empty()) render_error("cycler() takes no keyword arguments");
  if (a.pos.empty()) render_error("at least one item has to be provided");
  auto c = std::make_shared<Cycler>(a.pos);
  c->self_ = c;
  return Value::object(c);
}

Value g_joiner(Interpreter&, CallArgs& a) {
  const auto p = bind_args("joiner", a, {{"sep", Value::string(", ")}});
  auto used = std::make_shared<bool>(false);
  const Value sep = p[0];
  return Value::function("joiner", [used, sep](Interpreter&, CallArgs&) {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return sep;
  });
}

Value g_lipsum(Interpreter&, CallArgs&) { render_error("lipsum() is not supported by strata's template engine"); }

struct GlobalDef {
  const char* name;
  Value (*fn)(Interpreter&, CallArgs&);
};

const GlobalDef kGlobals[] = {
    {"cycler", g_cycler},
    {"dict", g_dict},
    {"joiner", g_joiner},
    {"lipsum", g_lipsum},
    {"namespace", g_namespace},
    {"raise_exception", g_raise_exception},
    {"range", g_range},
    {"strftime_now", g_strftime_now},
};

}  // namespace

std::optional<Value> find_global(std::string_view name) {
  for (const GlobalDef& g : kGlobals)
    if (name == g.name) return Value::function(g.name, g.fn);
  return std::nullopt;
}

}  // namespace strata::tmpl

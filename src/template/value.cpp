#include "template/value.h"

#include <algorithm>
#include <cmath>

#include "template/error.h"
#include "template/text.h"

namespace strata::tmpl {

Value Object::getattr(const std::string& name) {
  return Value::undefined("'" + type_name() + " object' has no attribute '" + name + "'");
}

Value Object::call(Interpreter&, CallArgs&) { render_error("'" + type_name() + "' object is not callable"); }

std::vector<Value> Object::iterate(Interpreter&) { render_error("'" + type_name() + "' object is not iterable"); }

bool Object::contains(Interpreter& in, const Value& item) {
  if (!iterable()) render_error("argument of type '" + type_name() + "' is not iterable");
  for (const Value& v : iterate(in))
    if (equals(v, item)) return true;
  return false;
}

// ---------------------------------------------------------------- factories

Value Value::make(Type type, std::shared_ptr<void> p, bool flag) {
  Value v;
  v.type_ = type;
  v.flag_ = flag;
  v.p_ = std::move(p);
  return v;
}

Value Value::undefined(std::string hint, bool security) {
  return make(Type::Undefined, hint.empty() ? nullptr : std::make_shared<std::string>(std::move(hint)), security);
}

Value Value::none() { return make(Type::None, nullptr); }

Value Value::boolean(bool b) {
  Value v = make(Type::Bool, nullptr);
  v.u_.b = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v = make(Type::Int, nullptr);
  v.u_.i = i;
  return v;
}

Value Value::number(double f) {
  Value v = make(Type::Float, nullptr);
  v.u_.f = f;
  return v;
}

Value Value::string(std::string s, bool safe) {
  return make(Type::String, std::make_shared<std::string>(std::move(s)), safe);
}

namespace {
std::shared_ptr<ListObj> make_list_obj(std::vector<Value> items) {
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, item.depth());
  if (depth + 1 > kMaxValueDepth) render_error("value nested more than " + std::to_string(kMaxValueDepth) + " deep");
  auto obj = std::make_shared<ListObj>();
  obj->items = std::move(items);
  obj->depth = depth + 1;
  return obj;
}
}  // namespace

Value Value::list(std::vector<Value> items) { return make(Type::List, make_list_obj(std::move(items))); }
Value Value::tuple(std::vector<Value> items) { return make(Type::Tuple, make_list_obj(std::move(items))); }

Value Value::dict(DictObj d) {
  if (d.depth() > kMaxValueDepth) render_error("value nested more than " + std::to_string(kMaxValueDepth) + " deep");
  return make(Type::Dict, std::make_shared<DictObj>(std::move(d)));
}

Value Value::ns(std::shared_ptr<NamespaceObj> n) { return make(Type::Namespace, std::move(n)); }

Value Value::function(std::string name, NativeFn fn) {
  auto f = std::make_shared<FunctionObj>();
  f->name = std::move(name);
  f->fn = std::move(fn);
  return make(Type::Function, std::move(f));
}

Value Value::object(std::shared_ptr<Object> o) { return make(Type::Object, std::move(o)); }

// ---------------------------------------------------------------- accessors

const std::string& Value::str() const { return *static_cast<const std::string*>(p_.get()); }
const std::vector<Value>& Value::items() const { return static_cast<const ListObj*>(p_.get())->items; }
std::vector<Value>& Value::list_items() const { return static_cast<ListObj*>(p_.get())->items; }
const DictObj& Value::dict() const { return *static_cast<const DictObj*>(p_.get()); }
NamespaceObj& Value::ns() const { return *static_cast<NamespaceObj*>(p_.get()); }
const FunctionObj& Value::function() const { return *static_cast<const FunctionObj*>(p_.get()); }
Object& Value::object() const { return *static_cast<Object*>(p_.get()); }

std::string Value::undefined_hint() const {
  if (type_ != Type::Undefined || !p_) return {};
  return *static_cast<const std::string*>(p_.get());
}

int Value::depth() const {
  switch (type_) {
    case Type::List:
    case Type::Tuple: return static_cast<const ListObj*>(p_.get())->depth;
    case Type::Dict: return dict().depth();
    default: return 0;
  }
}

// ---------------------------------------------------------------- dict

namespace {
// Python hashes 1, 1.0 and True alike; other non-string keys compare with ==.
bool key_equal(const Value& a, const Value& b) {
  if (a.is_string() != b.is_string()) return false;
  return equals(a, b);
}
}  // namespace

const Value* DictObj::find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

const Value* DictObj::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  for (const auto& kv : items_)
    if (!kv.first.is_string() && key_equal(kv.first, key)) return &kv.second;
  return nullptr;
}

void DictObj::set(const Value& key, Value value) {
  depth_ = std::max(depth_, value.depth() + 1);
  if (key.is_string()) {
    auto [it, inserted] = index_.try_emplace(key.str(), items_.size());
    if (!inserted) {
      items_[it->second].second = std::move(value);
      return;
    }
    items_.emplace_back(key, std::move(value));
    return;
  }
  check_hashable(key);
  for (auto& kv : items_)
    if (!kv.first.is_string() && key_equal(kv.first, key)) {
      kv.second = std::move(value);
      return;
    }
  items_.emplace_back(key, std::move(value));
}

void DictObj::clear() {
  items_.clear();
  index_.clear();
  depth_ = 1;
}

// ---------------------------------------------------------------- semantics

bool truthy(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined:
    case Value::Type::None: return false;
    case Value::Type::Bool: return v.as_bool();
    case Value::Type::Int: return v.as_int() != 0;
    case Value::Type::Float: return v.as_float() != 0.0;
    case Value::Type::String: return !v.str().empty();
    case Value::Type::List:
    case Value::Type::Tuple: return !v.items().empty();
    case Value::Type::Dict: return v.dict().size() != 0;
    case Value::Type::Object: return v.object().truthy();
    default: return true;
  }
}

namespace {

void check_depth(int depth) {
  if (depth > kMaxValueDepth) render_error("maximum recursion depth exceeded while formatting a value");
}

std::string repr_impl(const Value& v, int depth);

std::string str_impl(const Value& v, int depth) {
  check_depth(depth);
  switch (v.type()) {
    case Value::Type::Undefined: return "";
    case Value::Type::None: return "None";
    case Value::Type::Bool: return v.as_bool() ? "True" : "False";
    case Value::Type::Int: return std::to_string(v.as_int());
    case Value::Type::Float: return text::float_repr(v.as_float());
    case Value::Type::String: return v.str();
    case Value::Type::List:
    case Value::Type::Tuple: {
      const bool tuple = v.is_tuple();
      std::string out = tuple ? "(" : "[";
      bool first = true;
      for (const Value& item : v.items()) {
        if (!first) out += ", ";
        first = false;
        out += repr_impl(item, depth + 1);
      }
      if (tuple && v.items().size() == 1) out += ',';
      out += tuple ? ")" : "]";
      return out;
    }
    case Value::Type::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, val] : v.dict().items()) {
        if (!first) out += ", ";
        first = false;
        out += repr_impl(k, depth + 1);
        out += ": ";
        out += repr_impl(val, depth + 1);
      }
      return out + "}";
    }
    case Value::Type::Namespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [k, val] : v.ns().attrs.items()) {
        if (!first) out += ", ";
        first = false;
        out += repr_impl(k, depth + 1);
        out += ": ";
        out += repr_impl(val, depth + 1);
      }
      return out + "}>";
    }
    case Value::Type::Function: return "<" + v.function().name + ">";
    case Value::Type::Object: return v.object().repr();
  }
  return "";
}

std::string repr_impl(const Value& v, int depth) {
  if (v.is_string()) return v.safe() ? "Markup(" + text::repr(v.str()) + ")" : text::repr(v.str());
  if (v.is_undefined()) return "Undefined";
  return str_impl(v, depth);
}

bool equals_impl(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::Undefined:
    case Value::Type::None: return true;
    case Value::Type::String: return a.str() == b.str();
    case Value::Type::List:
    case Value::Type::Tuple: {
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!equals_impl(x[i], y[i], depth + 1)) return false;
      return true;
    }
    case Value::Type::Dict: {
      const DictObj& x = a.dict();
      const DictObj& y = b.dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, val] : x.items()) {
        const Value* other = y.find(k);
        if (!other || !equals_impl(val, *other, depth + 1)) return false;
      }
      return true;
    }
    default: return a.handle() == b.handle();
  }
}

[[noreturn]] void unordered(const char* op, const Value& a, const Value& b) {
  render_error(std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" +
               type_name(b) + "'");
}

bool less_impl(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals_impl(x[i], y[i], depth + 1)) return less_impl(x[i], y[i], depth + 1);
    return x.size() < y.size();
  }
  unordered("<", a, b);
}

}  // namespace

std::string to_str(const Value& v) { return str_impl(v, 0); }
std::string repr(const Value& v) { return repr_impl(v, 0); }
bool equals(const Value& a, const Value& b) { return equals_impl(a, b, 0); }
bool less(const Value& a, const Value& b) { return less_impl(a, b, 0); }

std::string type_name(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return "Undefined";
    case Value::Type::None: return "NoneType";
    case Value::Type::Bool: return "bool";
    case Value::Type::Int: return "int";
    case Value::Type::Float: return "float";
    case Value::Type::String: return v.safe() ? "Markup" : "str";
    case Value::Type::List: return "list";
    case Value::Type::Tuple: return "tuple";
    case Value::Type::Dict: return "dict";
    case Value::Type::Namespace: return "Namespace";
    case Value::Type::Function: return "function";
    case Value::Type::Object: return v.object().type_name();
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  switch (v.type()) {
    case Value::Type::None: return "None";
    case Value::Type::Undefined: return "jinja2.runtime.Undefined object";
    case Value::Type::Namespace: return "jinja2.utils.Namespace object";
    case Value::Type::Object: return "jinja2.runtime." + v.object().type_name() + " object";
    case Value::Type::String:
      if (v.safe()) return "markupsafe.Markup object";
      [[fallthrough]];
    default: return type_name(v) + " object";
  }
}

void check_hashable(const Value& key) {
  if (key.is_list() || key.is_dict()) render_error("unhashable type: '" + type_name(key) + "'");
  if (key.is_tuple())
    for (const Value& item : key.items()) check_hashable(item);
}

LazySeq::LazySeq(std::string type, Producer producer) : type_(std::move(type)), producer_(std::move(producer)) {}

std::vector<Value> LazySeq::iterate(Interpreter& in) { return take(in); }

void LazySeq::fill(Interpreter& in) {
  if (filled_) return;
  filled_ = true;
  Producer p = std::move(producer_);
  producer_ = nullptr;
  items_ = p(in);
}

std::vector<Value> LazySeq::take(Interpreter& in) {
  fill(in);
  std::vector<Value> out(items_.begin() + static_cast<std::ptrdiff_t>(pos_), items_.end());
  pos_ = items_.size();
  return out;
}

bool LazySeq::contains(Interpreter& in, const Value& item) {
  Value v;
  while (next(in, v))
    if (equals(v, item)) return true;
  return false;
}

bool LazySeq::next(Interpreter& in, Value& out) {
  fill(in);
  if (pos_ >= items_.size()) return false;
  out = items_[pos_++];
  return true;
}

LazySeq* as_lazy(const Value& v) { return v.is_object() ? dynamic_cast<LazySeq*>(&v.object()) : nullptr; }

std::vector<Value> iterate(Interpreter& in, const Value& v) {
  std::vector<Value> out;
  switch (v.type()) {
    case Value::Type::Object: return v.object().iterate(in);
    case Value::Type::Undefined: return out;
    case Value::Type::String: {
      const std::string& s = v.str();
      for (std::size_t i = 0; i < s.size();) {
        const std::size_t b = i;
        text::next(s, i);
        out.push_back(Value::string(s.substr(b, i - b)));  // Markup iterates as plain str
      }
      return out;
    }
    case Value::Type::List:
    case Value::Type::Tuple: return v.items();
    case Value::Type::Dict:
      out.reserve(v.dict().size());
      for (const auto& kv : v.dict().items()) out.push_back(kv.first);
      return out;
    default: render_error("'" + type_name(v) + "' object is not iterable");
  }
}

int64_t length(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return 0;
    case Value::Type::String: return static_cast<int64_t>(text::length(v.str()));
    case Value::Type::List:
    case Value::Type::Tuple: return static_cast<int64_t>(v.items().size());
    case Value::Type::Dict: return static_cast<int64_t>(v.dict().size());
    case Value::Type::Object:
      if (auto n = v.object().size()) return *n;
      break;
    default: break;
  }
  render_error("object of type '" + type_name(v) + "' has no len()");
}

void undefined_error(const Value& u) {
  std::string hint = u.undefined_hint();
  render_error(hint.empty() ? std::string("undefined value") : hint);
}

}  // namespace strata::tmpl

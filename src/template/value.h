#pragma once
// The values a template computes with, modelled on the Python objects jinja2
// sees: Undefined, None, bool, int, float, str (with markupsafe's "safe"
// flag), list, tuple, dict (insertion-ordered), namespace, callables (builtin
// functions, bound methods, macros) and host objects (the `loop` variable).
//
// A Value is a cheap handle: strings, lists, tuples and dicts are shared, as
// Python shares objects. Strings, tuples and dicts never change once built;
// the sandbox transformers renders with forbids list.append / dict.update
// and friends but lets list.pop and list.clear through, so a list can shrink
// in place (seen through every handle, as in Python). Namespaces are mutable.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace strata::tmpl {

class Value;
class Interpreter;

// Arguments of a call, as Python passes them.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

using NativeFn = std::function<Value(Interpreter&, CallArgs&)>;

struct FunctionObj {
  std::string name;  // for messages: "macro 'render'", "method 'split'", "range"
  NativeFn fn;
};

// Host objects: jinja2's LoopContext and cycler, Python iterators (LazySeq)
// and dict views. The defaults are those of a plain Python object.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  virtual std::string repr() const = 0;
  // Attribute lookup; returns an undefined Value when there is none.
  virtual Value getattr(const std::string& name);
  // obj(...); TypeError unless the object is callable.
  virtual Value call(Interpreter& in, CallArgs& args);
  virtual bool truthy() const { return true; }
  virtual std::optional<int64_t> size() const { return std::nullopt; }  // len(obj)
  virtual bool iterable() const { return false; }
  virtual bool reversible() const { return false; }
  // iter(obj); TypeError unless iterable().
  virtual std::vector<Value> iterate(Interpreter& in);
  // `item in obj`; by default scans iterate().
  virtual bool contains(Interpreter& in, const Value& item);
};

// A Python iterator: what jinja2's map / select / reject / selectattr /
// rejectattr / unique / items / batch / slice filters return (generators),
// and reverse (reversed()). It is truthy, has no len(), cannot be
// subscripted or reversed, and is used up by the first iteration. The items
// are produced on first use, so errors surface where Python raises them.
class LazySeq : public Object {
 public:
  using Producer = std::function<std::vector<Value>(Interpreter&)>;
  // Out of line, as iterate(): they need the complete Value (clang checks
  // it where they are defined).
  LazySeq(std::string type, Producer producer);
  std::string type_name() const override { return type_; }
  std::string repr() const override { return "<" + type_ + " object>"; }
  bool iterable() const override { return true; }
  std::vector<Value> iterate(Interpreter& in) override;
  // Consumes the items up to the first match, as Python does.
  bool contains(Interpreter& in, const Value& item) override;
  // The items not consumed yet; consumes them.
  std::vector<Value> take(Interpreter& in);
  // next(it): one item, or nullopt when exhausted.
  bool next(Interpreter& in, Value& out);

 private:
  void fill(Interpreter& in);
  std::string type_;
  Producer producer_;
  std::vector<Value> items_;
  std::size_t pos_ = 0;
  bool filled_ = false;
};

class DictObj;
struct ListObj;
struct NamespaceObj;

class Value {
 public:
  enum class Type : uint8_t { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Namespace, Function, Object };

  Value() = default;  // undefined, no hint

  static Value undefined(std::string hint = {}, bool security = false);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s, bool safe = false);
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  static Value dict(DictObj d);
  static Value ns(std::shared_ptr<NamespaceObj> n);
  static Value function(std::string name, NativeFn fn);
  static Value object(std::shared_ptr<Object> o);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::Undefined; }
  bool is_none() const { return type_ == Type::None; }
  bool is_bool() const { return type_ == Type::Bool; }
  bool is_int() const { return type_ == Type::Int; }  // not bool
  bool is_float() const { return type_ == Type::Float; }
  bool is_number() const { return type_ == Type::Bool || type_ == Type::Int || type_ == Type::Float; }
  bool is_integral() const { return type_ == Type::Bool || type_ == Type::Int; }  // Python int incl. bool
  bool is_string() const { return type_ == Type::String; }
  bool is_list() const { return type_ == Type::List; }
  bool is_tuple() const { return type_ == Type::Tuple; }
  bool is_sequence() const { return type_ == Type::List || type_ == Type::Tuple; }  // list or tuple
  bool is_dict() const { return type_ == Type::Dict; }
  bool is_namespace() const { return type_ == Type::Namespace; }
  bool is_function() const { return type_ == Type::Function; }
  bool is_object() const { return type_ == Type::Object; }

  bool as_bool() const { return u_.b; }
  int64_t as_int() const { return type_ == Type::Bool ? (u_.b ? 1 : 0) : u_.i; }  // Int or Bool
  double as_float() const { return type_ == Type::Float ? u_.f : static_cast<double>(as_int()); }  // any number
  const std::string& str() const;
  bool safe() const { return type_ == Type::String && flag_; }  // markupsafe.Markup
  const std::vector<Value>& items() const;                        // List or Tuple
  std::vector<Value>& list_items() const;                         // List: list.pop / list.clear mutate
  const DictObj& dict() const;
  NamespaceObj& ns() const;
  const FunctionObj& function() const;
  Object& object() const;
  const std::shared_ptr<void>& handle() const { return p_; }  // identity of shared objects
  // Undefined: the message jinja2 would raise when it is used, and whether
  // that is a SecurityError (an unsafe attribute of the sandbox).
  std::string undefined_hint() const;
  bool undefined_is_security() const { return type_ == Type::Undefined && flag_; }
  int depth() const;  // nesting depth of containers (0 for scalars)

 private:
  static Value make(Type type, std::shared_ptr<void> p, bool flag = false);

  Type type_ = Type::Undefined;
  bool flag_ = false;
  union {
    bool b;
    int64_t i;
    double f;
  } u_{};
  std::shared_ptr<void> p_;
};

// Insertion-ordered dict with Python key equality (1 == 1.0 == True).
class DictObj {
 public:
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value value);  // insert or overwrite in place
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }
  std::size_t size() const { return items_.size(); }
  void clear();
  int depth() const { return depth_; }

 private:
  std::vector<std::pair<Value, Value>> items_;
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::size_t, Hash, std::equal_to<>> index_;  // string keys -> position
  int depth_ = 1;
};

struct ListObj {
  std::vector<Value> items;
  int depth = 1;
};

struct NamespaceObj {
  DictObj attrs;
};

// Python semantics.
bool truthy(const Value& v);
std::string to_str(const Value& v);                   // str(v); Undefined -> ""
std::string repr(const Value& v);                     // repr(v)
bool equals(const Value& a, const Value& b);          // a == b
bool less(const Value& a, const Value& b);            // a < b; TypeError when unordered types
std::string type_name(const Value& v);                // "str", "int", "dict", "NoneType", ...
std::string object_type_repr(const Value& v);         // "dict object", "None", as jinja2 words it
void check_hashable(const Value& key);                // TypeError: unhashable type
// Iterates as Python's iter(): str -> characters, dict -> keys, Undefined ->
// nothing, an iterator -> its remaining items; TypeError for anything else.
std::vector<Value> iterate(Interpreter& in, const Value& v);
// The LazySeq a value holds, or null.
LazySeq* as_lazy(const Value& v);
// Python len(); TypeError when the value has none.
int64_t length(const Value& v);

// Raise jinja2's UndefinedError (or SecurityError) for using `u`.
[[noreturn]] void undefined_error(const Value& u);

inline constexpr int kMaxValueDepth = 256;

}  // namespace strata::tmpl

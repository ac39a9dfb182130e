// Python operators on values: comparisons (==, <, in, ...) and arithmetic
// (+, -, *, /, //, %, **) with Python's semantics and 64-bit overflow checks.
#include <cmath>
#include <limits>

#include "template/error.h"
#include "template/format.h"
#include "template/interpreter.h"
#include "template/text.h"

namespace strata::tmpl {

bool Interpreter::compare(CmpOp op, const Value& l, const Value& r) {
  switch (op) {
    case CmpOp::Eq: return equals(l, r);
    case CmpOp::Ne: return !equals(l, r);
    case CmpOp::Lt: return less(l, r);
    case CmpOp::Gt: return less(r, l);
    case CmpOp::Le: return less(l, r) || equals(l, r);
    case CmpOp::Ge: return less(r, l) || equals(l, r);
    case CmpOp::In:
    case CmpOp::NotIn: {
      bool found = false;
      switch (r.type()) {
        case Value::Type::Undefined: break;
        case Value::Type::String:
          if (!l.is_string())
            render_error("'in <string>' requires string as left operand, not " + type_name(l));
          found = r.str().find(l.str()) != std::string::npos;
          break;
        case Value::Type::List:
        case Value::Type::Tuple:
          for (const Value& item : r.items())
            if (equals(item, l)) {
              found = true;
              break;
            }
          break;
        case Value::Type::Dict:
          check_hashable(l);
          found = r.dict().find(l) != nullptr;
          break;
        case Value::Type::Object: found = r.object().contains(*this, l); break;
        default: render_error("argument of type '" + type_name(r) + "' is not iterable");
      }
      return op == CmpOp::In ? found : !found;
    }
  }
  return false;
}

namespace {

[[noreturn]] void unsupported(const char* op, const Value& l, const Value& r) {
  render_error(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(l) + "' and '" +
               type_name(r) + "'");
}

[[noreturn]] void overflow() {
  render_error("integer overflow (Python integers are unbounded; this engine uses 64 bits)");
}

int64_t add_int(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
int64_t sub_int(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}
int64_t mul_int(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

// Python's float divmod.
std::pair<double, double> float_divmod(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, b);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, a / b);
  }
  return {floordiv, mod};
}

std::string repeat(const std::string& s, int64_t n) {
  std::string out;
  if (n <= 0) return out;
  out.reserve(s.size() * static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) out += s;
  return out;
}

}  // namespace

Value Interpreter::binary(BinOp op, const Value& l, const Value& r) {
  if (l.is_undefined()) undefined_error(l);
  // str % anything is str.__mod__, which takes an Undefined as a mapping.
  if (op == BinOp::Mod && l.is_string()) return Value::string(percent_format(*this, l, r), l.safe());
  if (r.is_undefined()) undefined_error(r);
  static const char* const kSymbols[] = {"+", "-", "*", "/", "//", "%", "**"};
  const char* sym = kSymbols[static_cast<int>(op)];

  if (l.is_number() && r.is_number()) {
    const bool ints = l.is_integral() && r.is_integral();
    const int64_t a = ints ? l.as_int() : 0, b = ints ? r.as_int() : 0;
    const double x = l.as_float(), y = r.as_float();
    switch (op) {
      case BinOp::Add:
        if (ints) return Value::integer(add_int(a, b));
        return Value::number(x + y);
      case BinOp::Sub:
        if (ints) return Value::integer(sub_int(a, b));
        return Value::number(x - y);
      case BinOp::Mul:
        if (ints) return Value::integer(mul_int(a, b));
        return Value::number(x * y);
      case BinOp::Div:
        if (y == 0) render_error(ints ? "division by zero" : "float division by zero");
        return Value::number(x / y);
      case BinOp::FloorDiv:
      case BinOp::Mod:
        if (ints) {
          if (b == 0) render_error("integer division or modulo by zero");
          if (a == std::numeric_limits<int64_t>::min() && b == -1) overflow();
          int64_t q = a / b, m = a % b;
          if (m != 0 && ((m < 0) != (b < 0))) {
            q -= 1;
            m += b;
          }
          return Value::integer(op == BinOp::FloorDiv ? q : m);
        } else {
          if (y == 0) render_error(op == BinOp::Mod ? "float modulo" : "float floor division by zero");
          const auto [q, m] = float_divmod(x, y);
          return Value::number(op == BinOp::FloorDiv ? q : m);
        }
      case BinOp::Pow:
        if (ints && b >= 0) {
          int64_t acc = 1, base = a, e = b;
          while (e > 0) {
            if (e & 1) acc = mul_int(acc, base);
            e >>= 1;
            if (e > 0) base = mul_int(base, base);
          }
          return Value::integer(acc);
        }
        if (x == 0 && y < 0) render_error("0.0 cannot be raised to a negative power");
        if (x < 0 && y != std::floor(y)) render_error("complex results are not supported");
        return Value::number(std::pow(x, y));
    }
  }

  if (op == BinOp::Add) {
    if (l.is_string() && r.is_string()) {
      check_size(l.str().size() + r.str().size());
      if (l.safe() == r.safe()) return Value::string(l.str() + r.str(), l.safe());
      // markupsafe: Markup + str escapes the str (either side).
      if (l.safe()) return Value::string(l.str() + text::html_escape(r.str()), true);
      return Value::string(text::html_escape(l.str()) + r.str(), true);
    }
    if ((l.is_list() && r.is_list()) || (l.is_tuple() && r.is_tuple())) {
      check_size(l.items().size() + r.items().size());
      std::vector<Value> items = l.items();
      items.insert(items.end(), r.items().begin(), r.items().end());
      return l.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    if (l.is_string() || r.is_string()) {
      const Value& other = l.is_string() ? r : l;
      render_error("can only concatenate str (not \"" + type_name(other) + "\") to str");
    }
    unsupported(sym, l, r);
  }
  if (op == BinOp::Mul) {
    const Value* seq = (l.is_string() || l.is_sequence()) ? &l : (r.is_string() || r.is_sequence()) ? &r : nullptr;
    const Value* count = seq == &l ? &r : &l;
    if (seq && count->is_integral()) {
      const int64_t k = count->as_int();
      if (seq->is_string()) {
        if (k > 0) check_size(seq->str().size() * static_cast<std::size_t>(k));
        return Value::string(repeat(seq->str(), k), seq->safe());
      }
      std::vector<Value> items;
      if (k > 0) {
        check_size(seq->items().size() * static_cast<std::size_t>(k));
        for (int64_t i = 0; i < k; ++i) items.insert(items.end(), seq->items().begin(), seq->items().end());
      }
      return seq->is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    unsupported(sym, l, r);
  }
  if (op == BinOp::Mod && l.is_string()) return Value::string(percent_format(*this, l, r), l.safe());
  unsupported(sym, l, r);
}

}  // namespace strata::tmpl

//===- Json.cpp - Minimal JSON reader -------------------------------------===//

#include "tilec/runtime/Json.h"
#include "tilec/runtime/Runtime.h"

#include <cassert>
#include <charconv>

namespace tilec::runtime {

JsonValue JsonValue::boolean(bool b) {
  JsonValue v;
  v.type_ = Type::Bool;
  v.bool_ = b;
  return v;
}
JsonValue JsonValue::integer(int64_t i) {
  JsonValue v;
  v.type_ = Type::Integer;
  v.int_ = i;
  return v;
}
JsonValue JsonValue::number(double d) {
  JsonValue v;
  v.type_ = Type::Number;
  v.num_ = d;
  return v;
}
JsonValue JsonValue::string(std::string s) {
  JsonValue v;
  v.type_ = Type::String;
  v.str_ = std::move(s);
  return v;
}
JsonValue JsonValue::array(std::vector<JsonValue> items) {
  JsonValue v;
  v.type_ = Type::Array;
  v.items_ = std::move(items);
  return v;
}
JsonValue JsonValue::object(std::vector<Member> members) {
  JsonValue v;
  v.type_ = Type::Object;
  v.members_ = std::move(members);
  return v;
}

bool JsonValue::asBool() const {
  assert(isBool());
  return bool_;
}
int64_t JsonValue::asInteger() const {
  assert(isInteger());
  return int_;
}
double JsonValue::asNumber() const {
  assert(isNumber());
  return isInteger() ? static_cast<double>(int_) : num_;
}
const std::string &JsonValue::asString() const {
  assert(isString());
  return str_;
}
const std::vector<JsonValue> &JsonValue::asArray() const {
  assert(isArray());
  return items_;
}
const std::vector<JsonValue::Member> &JsonValue::asObject() const {
  assert(isObject());
  return members_;
}

const JsonValue *JsonValue::find(std::string_view key) const {
  assert(isObject());
  for (const Member &m : members_)
    if (m.first == key)
      return &m.second;
  return nullptr;
}

const char *JsonValue::typeName(Type type) {
  switch (type) {
  case Type::Null:
    return "null";
  case Type::Bool:
    return "a boolean";
  case Type::Integer:
    return "an integer";
  case Type::Number:
    return "a number";
  case Type::String:
    return "a string";
  case Type::Array:
    return "an array";
  case Type::Object:
    return "an object";
  }
  return "?";
}

namespace {

class JsonParser {
public:
  JsonParser(std::string_view text, const std::string &origin)
      : text_(text), origin_(origin) {}

  JsonValue parseDocument() {
    skipSpace();
    JsonValue v = parseValue(0);
    skipSpace();
    if (pos_ != text_.size())
      fail("unexpected text after the JSON value");
    return v;
  }

private:
  // Manifests are a few levels deep; the bound keeps hostile input from
  // overflowing the stack.
  static constexpr int kMaxDepth = 64;

  [[noreturn]] void fail(const std::string &what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw Error(Error::Kind::Manifest, origin_ + ":" + std::to_string(line) +
                                           ":" + std::to_string(col) +
                                           ": invalid JSON: " + what);
  }

  bool atEnd() const { return pos_ >= text_.size(); }
  char peek() const { return atEnd() ? '\0' : text_[pos_]; }

  void skipSpace() {
    while (!atEnd() && (peek() == ' ' || peek() == '\t' || peek() == '\n' ||
                        peek() == '\r'))
      ++pos_;
  }

  void expect(char c) {
    if (peek() != c)
      fail(std::string("expected '") + c + "'" + found());
    ++pos_;
  }

  std::string found() const {
    if (atEnd())
      return ", found end of input";
    return std::string(", found '") + peek() + "'";
  }

  JsonValue parseValue(int depth) {
    if (depth > kMaxDepth)
      fail("nesting deeper than " + std::to_string(kMaxDepth));
    char c = peek();
    if (c == '{')
      return parseObject(depth);
    if (c == '[')
      return parseArray(depth);
    if (c == '"')
      return JsonValue::string(parseString());
    if (c == '-' || (c >= '0' && c <= '9'))
      return parseNumber();
    if (matchWord("true"))
      return JsonValue::boolean(true);
    if (matchWord("false"))
      return JsonValue::boolean(false);
    if (matchWord("null"))
      return JsonValue();
    fail("expected a value" + found());
  }

  bool matchWord(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word)
      return false;
    pos_ += word.size();
    return true;
  }

  JsonValue parseObject(int depth) {
    expect('{');
    std::vector<JsonValue::Member> members;
    skipSpace();
    if (peek() == '}') {
      ++pos_;
      return JsonValue::object(std::move(members));
    }
    while (true) {
      skipSpace();
      if (peek() != '"')
        fail("expected a string key" + found());
      size_t keyPos = pos_;
      std::string key = parseString();
      for (const auto &m : members)
        if (m.first == key) {
          pos_ = keyPos;
          fail("duplicate key \"" + key + "\"");
        }
      skipSpace();
      expect(':');
      skipSpace();
      JsonValue value = parseValue(depth + 1);
      members.emplace_back(std::move(key), std::move(value));
      skipSpace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        return JsonValue::object(std::move(members));
      }
      fail("expected ',' or '}'" + found());
    }
  }

  JsonValue parseArray(int depth) {
    expect('[');
    std::vector<JsonValue> items;
    skipSpace();
    if (peek() == ']') {
      ++pos_;
      return JsonValue::array(std::move(items));
    }
    while (true) {
      skipSpace();
      items.push_back(parseValue(depth + 1));
      skipSpace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return JsonValue::array(std::move(items));
      }
      fail("expected ',' or ']'" + found());
    }
  }

  unsigned parseHex4() {
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = peek();
      unsigned d;
      if (c >= '0' && c <= '9')
        d = c - '0';
      else if (c >= 'a' && c <= 'f')
        d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        d = c - 'A' + 10;
      else
        fail("expected 4 hex digits after \\u");
      v = v * 16 + d;
      ++pos_;
    }
    return v;
  }

  static void appendUtf8(std::string &out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string parseString() {
    expect('"');
    std::string out;
    while (true) {
      if (atEnd())
        fail("unterminated string");
      char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20)
        fail("control character in string");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      char e = peek();
      ++pos_;
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        unsigned cp = parseHex4();
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          if (!matchWord("\\u"))
            fail("unpaired UTF-16 surrogate");
          unsigned lo = parseHex4();
          if (lo < 0xDC00 || lo > 0xDFFF)
            fail("unpaired UTF-16 surrogate");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          fail("unpaired UTF-16 surrogate");
        }
        appendUtf8(out, cp);
        break;
      }
      default:
        --pos_;
        fail("invalid escape in string");
      }
    }
  }

  JsonValue parseNumber() {
    size_t start = pos_;
    bool integral = true;
    if (peek() == '-')
      ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (peek() >= '1' && peek() <= '9') {
      while (peek() >= '0' && peek() <= '9')
        ++pos_;
    } else {
      fail("expected a digit" + found());
    }
    if (peek() == '.') {
      integral = false;
      ++pos_;
      if (!(peek() >= '0' && peek() <= '9'))
        fail("expected a digit after '.'" + found());
      while (peek() >= '0' && peek() <= '9')
        ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-')
        ++pos_;
      if (!(peek() >= '0' && peek() <= '9'))
        fail("expected a digit in the exponent" + found());
      while (peek() >= '0' && peek() <= '9')
        ++pos_;
    }
    // from_chars, unlike strtod, ignores the C locale's decimal point.
    const char *first = text_.data() + start, *last = text_.data() + pos_;
    if (integral) {
      int64_t v;
      if (std::from_chars(first, last, v).ec == std::errc())
        return JsonValue::integer(v);
      // Out of int64 range: keep it as a double.
    }
    double d;
    if (std::from_chars(first, last, d).ec != std::errc()) {
      pos_ = start;
      fail("number " + std::string(first, last) + " out of range");
    }
    return JsonValue::number(d);
  }

  std::string_view text_;
  const std::string &origin_;
  size_t pos_ = 0;
};

} // namespace

JsonValue parseJson(std::string_view text, const std::string &origin) {
  return JsonParser(text, origin).parseDocument();
}

} // namespace tilec::runtime

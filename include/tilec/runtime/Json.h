//===- Json.h - Minimal JSON reader for launch manifests ------------------===//
//
// The runtime must not depend on LLVM or third-party libraries, so it carries
// its own small reader. It parses strict JSON (RFC 8259) into a tree; objects
// keep their keys in document order. Integers that fit in int64 are kept
// exactly, separately from doubles, because manifests carry sizes and strides.
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_RUNTIME_JSON_H
#define TILEC_RUNTIME_JSON_H

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tilec::runtime {

class JsonValue {
public:
  enum class Type { Null, Bool, Integer, Number, String, Array, Object };
  using Member = std::pair<std::string, JsonValue>;

  JsonValue() = default;
  static JsonValue boolean(bool b);
  static JsonValue integer(int64_t i);
  static JsonValue number(double d);
  static JsonValue string(std::string s);
  static JsonValue array(std::vector<JsonValue> items);
  static JsonValue object(std::vector<Member> members);

  Type type() const { return type_; }
  bool isNull() const { return type_ == Type::Null; }
  bool isBool() const { return type_ == Type::Bool; }
  bool isInteger() const { return type_ == Type::Integer; }
  /// True for integers and non-integral numbers alike.
  bool isNumber() const {
    return type_ == Type::Integer || type_ == Type::Number;
  }
  bool isString() const { return type_ == Type::String; }
  bool isArray() const { return type_ == Type::Array; }
  bool isObject() const { return type_ == Type::Object; }

  // Accessors; calling one for the wrong type is a programming error (assert).
  bool asBool() const;
  int64_t asInteger() const;
  double asNumber() const; // integers convert
  const std::string &asString() const;
  const std::vector<JsonValue> &asArray() const;
  const std::vector<Member> &asObject() const;

  /// The member named `key` of an object, or nullptr when absent.
  const JsonValue *find(std::string_view key) const;

  /// "null", "a boolean", "an integer", ... for error messages.
  static const char *typeName(Type type);

private:
  Type type_ = Type::Null;
  bool bool_ = false;
  int64_t int_ = 0;
  double num_ = 0;
  std::string str_;
  std::vector<JsonValue> items_;
  std::vector<Member> members_;
};

/// Parses `text` as one JSON document. On malformed input throws
/// tilec::runtime::Error (kind Manifest) whose message starts with
/// "<origin>:<line>:<column>: ".
JsonValue parseJson(std::string_view text, const std::string &origin);

} // namespace tilec::runtime

#endif // TILEC_RUNTIME_JSON_H

// A minimal JSON reader and string escaper for the test driver's line protocol.
//
// The driver must not depend on anything beyond the CUDA toolkit and the C++ standard library, and the
// protocol is tiny (objects, arrays, numbers, strings, booleans), so a small recursive-descent parser is
// simpler than vendoring a library. Integers are kept exactly (offsets and strides are 64-bit).
//
// Numbers are read and written without the C or C++ locale (std::from_chars, std::to_chars, hex by hand): the
// candidate runs in this process and may change the global locale (setlocale, std::locale::global, reached
// however), and a decimal comma or digit grouping must never change a request or a reply.
#pragma once
#include <charconv>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kbjson {

// Raised for malformed JSON and for requests whose fields have the wrong shape; the driver turns it into
// an {"ok":false} reply and keeps serving.
struct RequestError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Value {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool boolean = false;
  double number = 0.0;
  bool is_integer = false;
  int64_t integer = 0;
  std::string text;
  std::vector<Value> items;
  std::vector<std::pair<std::string, Value>> members;

  const Value* find(const std::string& key) const {
    for (const auto& member : members)
      if (member.first == key) return &member.second;
    return nullptr;
  }
};

// The whole of [first, last) as a double, whatever the locale; false when it is not one number.
inline bool parse_double(const char* first, const char* last, double& out) {
  auto parsed = std::from_chars(first, last, out, std::chars_format::general);
  return parsed.ec == std::errc() && parsed.ptr == last;
}

// `value` as printf's "%.9g" writes it in the C locale, whatever the process's locale is.
inline std::string format_double(double value) {
  char buf[40];
  auto written = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::general, 9);
  return std::string(buf, written.ptr);
}

// `value` in decimal digits, whatever the process's locale is.
inline std::string format_integer(int64_t value) {
  char buf[24];
  auto written = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, written.ptr);
}

// The value of one hex digit, or -1.
inline int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  explicit Parser(const std::string& input) : s_(input) {}

  Value parse_document() {
    Value value = parse_value();
    skip_space();
    if (pos_ != s_.size()) fail("trailing characters after the JSON value");
    return value;
  }

 private:
  const std::string& s_;
  size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw RequestError("malformed JSON at byte " + std::to_string(pos_) + ": " + what);
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r' || s_[pos_] == '\n'))
      ++pos_;
  }
  bool consume(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "'");
  }
  bool consume_word(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (s_.compare(pos_, n, word) != 0) return false;
    pos_ += n;
    return true;
  }

  Value parse_value() {
    skip_space();
    if (pos_ >= s_.size()) fail("unexpected end of input");
    Value v;
    char c = s_[pos_];
    if (c == '{') {
      v.kind = Value::Object;
      ++pos_;
      if (consume('}')) return v;
      do {
        skip_space();
        std::string key = parse_string();
        expect(':');
        v.members.emplace_back(std::move(key), parse_value());
      } while (consume(','));
      expect('}');
    } else if (c == '[') {
      v.kind = Value::Array;
      ++pos_;
      if (consume(']')) return v;
      do v.items.push_back(parse_value());
      while (consume(','));
      expect(']');
    } else if (c == '"') {
      v.kind = Value::String;
      v.text = parse_string();
    } else if (consume_word("true")) {
      v.kind = Value::Bool;
      v.boolean = true;
    } else if (consume_word("false")) {
      v.kind = Value::Bool;
    } else if (consume_word("null")) {
      v.kind = Value::Null;
    } else {
      parse_number(v);
    }
    return v;
  }

  void parse_number(Value& v) {
    size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    bool fractional = false;
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c >= '0' && c <= '9') {
      } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
        fractional = true;
      } else {
        break;
      }
      ++pos_;
    }
    std::string token = s_.substr(start, pos_ - start);
    if (token.empty() || token == "-") fail("expected a value");
    const char* first = token.data();
    const char* last = token.data() + token.size();
    v.kind = Value::Number;
    if (!parse_double(first, last, v.number)) fail("bad number '" + token + "'");
    if (!fractional) {
      auto parsed = std::from_chars(first, last, v.integer);
      if (parsed.ec != std::errc() || parsed.ptr != last) fail("bad integer '" + token + "'");
      v.is_integer = true;
    }
  }

  std::string parse_string() {
    if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a string");
    ++pos_;
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) break;
      char e = s_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u':
          // The protocol's strings are ASCII (hex handles, command names); keep \u escapes readable
          // rather than decoding UTF-16.
          if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
          out += '?';
          pos_ += 4;
          break;
        default: out += e;
      }
    }
    if (pos_ >= s_.size()) fail("unterminated string");
    ++pos_;
    return out;
  }
};

// Quotes `text` as a JSON string (error messages may carry quotes, backslashes or control characters).
inline std::string quote(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace kbjson

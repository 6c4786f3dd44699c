#include "report/json_writer.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "report/text_safety.hpp"

namespace mhc::report {

std::string JsonWriter::escape(std::string_view s) {
  std::string out = "\"";
  for (const char ch : valid_utf8(s)) {
    const auto u = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (u < 0x20 || u == 0x7f) out += fmt::format("\\u{:04x}", u);
        else out += ch;
    }
  }
  return out + "\"";
}

void JsonWriter::newline() {
  out_ += '\n';
  out_.append(2 * stack_.size(), ' ');
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (stack_.empty()) {
    if (!out_.empty()) throw std::logic_error("JsonWriter: a second top-level value");
    return;
  }
  if (!stack_.back().array) throw std::logic_error("JsonWriter: a value inside an object needs a key first");
  if (!stack_.back().empty) out_ += ',';
  stack_.back().empty = false;
  newline();
}

JsonWriter& JsonWriter::key(std::string_view k) {
  if (stack_.empty() || stack_.back().array || after_key_) throw std::logic_error("JsonWriter: key outside an object");
  if (!stack_.back().empty) out_ += ',';
  stack_.back().empty = false;
  newline();
  out_ += escape(k);
  out_ += ": ";
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  stack_.push_back({false, true});
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  stack_.push_back({true, true});
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  if (stack_.empty() || stack_.back().array || after_key_) throw std::logic_error("JsonWriter: unbalanced object");
  const bool empty = stack_.back().empty;
  stack_.pop_back();
  if (!empty) newline();
  out_ += '}';
  if (stack_.empty()) out_ += '\n';
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  if (stack_.empty() || !stack_.back().array) throw std::logic_error("JsonWriter: unbalanced array");
  const bool empty = stack_.back().empty;
  stack_.pop_back();
  if (!empty) newline();
  out_ += ']';
  if (stack_.empty()) out_ += '\n';
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view s) {
  before_value();
  out_ += escape(s);
  return *this;
}

JsonWriter& JsonWriter::value(double v) {
  before_value();
  if (std::isnan(v)) out_ += "\"nan\"";
  else if (std::isinf(v)) out_ += v > 0 ? "\"inf\"" : "\"-inf\"";
  else out_ += fmt::format("{}", v);  // shortest round-trip; never "inf"/"nan" here, always a JSON number
  return *this;
}

JsonWriter& JsonWriter::value(int64_t v) {
  before_value();
  out_ += std::to_string(v);
  return *this;
}

JsonWriter& JsonWriter::value(uint64_t v) {
  before_value();
  out_ += std::to_string(v);
  return *this;
}

JsonWriter& JsonWriter::value(bool v) {
  before_value();
  out_ += v ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  out_ += "null";
  return *this;
}

}  // namespace mhc::report

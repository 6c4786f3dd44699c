#pragma once
// A small streaming JSON writer. Hand-written because no JSON library is installed on the build machines
// (nlohmann-json3-dev is not in scripts/install-deps.sh) and the reports only ever write JSON, never parse it.
// It escapes strings per RFC 8259 (quote, backslash, every control character as \u00XX, with the short
// forms \b \f \n \r \t), passes valid UTF-8 through, and writes non-finite numbers as the strings "inf",
// "-inf" and "nan" (JSON has no literal for them; docs/report-schema.md documents the convention).
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mhc::report {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view k);  // inside an object, before each value

  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(double v);
  JsonWriter& value(int64_t v);
  JsonWriter& value(int v) { return value(static_cast<int64_t>(v)); }
  JsonWriter& value(uint64_t v);
  JsonWriter& value(bool v);
  JsonWriter& null();

  const std::string& str() const { return out_; }

  static std::string escape(std::string_view s);  // with the surrounding quotes

 private:
  void before_value();
  void newline();

  std::string out_;
  struct Level {
    bool array;
    bool empty;
  };
  std::vector<Level> stack_;
  bool after_key_ = false;
};

}  // namespace mhc::report

#include "report/text_safety.hpp"

#include <boost/locale/utf.hpp>
#include <fmt/format.h>

#include <iterator>

namespace mhc::report {

std::string valid_utf8(std::string_view s) {
  using utf = boost::locale::utf::utf_traits<char>;
  std::string out;
  out.reserve(s.size());
  for (auto p = s.begin(); p != s.end();) {
    const auto start = p;
    const boost::locale::utf::code_point c = utf::decode(p, s.end());
    if (c == boost::locale::utf::illegal || c == boost::locale::utf::incomplete) {
      // decode() may stop anywhere inside a bad sequence: replace one byte and resynchronise at the next.
      p = start + 1;
      utf::encode(0xFFFD, std::back_inserter(out));
    } else {
      out.append(start, p);
    }
  }
  return out;
}

std::string one_line(std::string_view s) {
  const std::string text = valid_utf8(s);
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto u = static_cast<unsigned char>(text[i]);
    if (u == '\n') {
      out += "\\n";
    } else if (u == '\r') {
      out += "\\r";
    } else if (u == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else if (text.compare(i, 2, "\xC2\x85") == 0) {  // NEL: a line break to some terminals and editors
      out += "\\u0085";
      i += 1;
    } else if (text.compare(i, 3, "\xE2\x80\xA8") == 0 || text.compare(i, 3, "\xE2\x80\xA9") == 0) {
      out += text[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";  // line and paragraph separators
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

}  // namespace mhc::report

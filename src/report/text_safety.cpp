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
  std::string out;
  for (const char c : valid_utf8(s)) {
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
        else out += c;
    }
  }
  return out;
}

}  // namespace mhc::report

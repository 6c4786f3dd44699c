#pragma once
// Names that reach a report or a message come from the user's files and command line: group names and paths may
// hold bytes that are not UTF-8 (a Latin-1 file name) and control characters (a newline in a group name). A report
// must stay what its format says (JSON and XML are UTF-8; a text line is one line), so every name goes through one
// of these before it is written.
#include <string>
#include <string_view>

namespace mhc::report {

// `s` with every byte sequence that is not UTF-8 replaced by U+FFFD (the replacement character), so that the text
// can be written into UTF-8 formats; valid text is returned unchanged.
std::string valid_utf8(std::string_view s);

// valid_utf8(s) with each control character (U+0000..U+001F, U+007F) written as an escape (\n, \t, \r, \xNN), and the
// line breaks U+0085, U+2028 and U+2029 as \uNNNN, so that a name stays on its line of a text report or message.
std::string one_line(std::string_view s);

}  // namespace mhc::report

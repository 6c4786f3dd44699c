#pragma once
// Every log line of mhcdiff is one line: file and group names reach the messages from the user's files and command
// line, and a newline in one (a file named "a\nb.h5") split an [info] or [warn] line in two, the second without its
// level. spdlog formats a message's text as given, so this sink escapes it (report::one_line) before the stderr sink
// adds the "[level]" prefix; one place for every message instead of a call at each of them.
#include <spdlog/details/log_msg.h>
#include <spdlog/formatter.h>
#include <spdlog/sinks/sink.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "report/text_safety.hpp"

namespace mhc::cli {

class OneLineSink final : public spdlog::sinks::sink {
 public:
  explicit OneLineSink(spdlog::sink_ptr inner) : inner_(std::move(inner)) {}

  void log(const spdlog::details::log_msg& msg) override {
    const std::string text = report::one_line(std::string_view(msg.payload.data(), msg.payload.size()));
    spdlog::details::log_msg escaped = msg;
    escaped.payload = spdlog::string_view_t(text.data(), text.size());
    inner_->log(escaped);
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    inner_->set_formatter(std::move(formatter));
  }

 private:
  spdlog::sink_ptr inner_;
};

}  // namespace mhc::cli

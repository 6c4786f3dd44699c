#pragma once
// The report writers of `mhcdiff compare` / `golden check` (SPEC §4, §5): text (stdout default), JSON (schema
// "mhcdiff.compare/1", docs/report-schema.md), Markdown (paste-able in a PR review) and JUnit XML (one test
// case per tensor × gate, for CI dashboards). All render the same CompareReport, so none can contradict the
// exit code.
#include <functional>
#include <string>
#include <vector>

#include "compare/report_model.hpp"
#include "io/files.hpp"

namespace mhc::report {

enum class ReportFormat { text, json, markdown, junit };

// "text" | "json" | "markdown" (or "md") | "junit"; std::invalid_argument otherwise.
ReportFormat parse_report_format(const std::string& name);

inline constexpr const char* kJsonSchemaId = "mhcdiff.compare/1";

std::string render_text(const compare::CompareReport& report);
std::string render_json(const compare::CompareReport& report);
std::string render_markdown(const compare::CompareReport& report);
std::string render_junit(const compare::CompareReport& report);
std::string render(const compare::CompareReport& report, ReportFormat format);

// The one-line verdict every format starts from, e.g. "FAIL: 1 of 7 gates failed (exit 1)".
std::string verdict_line(const compare::CompareReport& report);

// Writes `content` to `path` atomically (an io::AtomicOutput: a temp file beside it, renamed over it), so a CI
// artefact is never half-written. Throws InputError for a path AtomicOutput refuses (a directory, a device node, a
// missing or unwritable directory, one of `sources`: the files the comparison read) and IoError when the write
// fails (disk full).
// `before_commit` runs once the content is on disk and before it replaces `path`: what it throws leaves nothing
// written (compare prints its summary there, so that a standard output that fails keeps the report file out too).
void write_file_atomically(const std::string& path, const std::string& content,
                           const std::vector<io::SourceFile>& sources = {},
                           const std::function<void()>& before_commit = {});

}  // namespace mhc::report

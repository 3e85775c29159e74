#include "common/base/json_lines.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps {

std::string JsonEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<int>(c));
        } else {
          out += c;
        }
    }
  }
  return out;
}

void JsonObject::Key(const std::string& key) {
  if (!body_.empty()) body_ += ',';
  absl::StrAppend(&body_, "\"", JsonEscape(key), "\":");
}

JsonObject& JsonObject::Add(const std::string& key, const std::string& value) {
  Key(key);
  absl::StrAppend(&body_, "\"", JsonEscape(value), "\"");
  return *this;
}

JsonObject& JsonObject::Add(const std::string& key, const char* value) {
  return Add(key, std::string(value));
}

JsonObject& JsonObject::Add(const std::string& key, double value) {
  Key(key);
  if (std::isfinite(value)) {
    absl::StrAppend(&body_, absl::StrFormat("%.9g", value));
  } else {
    body_ += "null";
  }
  return *this;
}

JsonObject& JsonObject::Add(const std::string& key, int64_t value) {
  Key(key);
  absl::StrAppend(&body_, value);
  return *this;
}

JsonObject& JsonObject::Add(const std::string& key, bool value) {
  Key(key);
  body_ += value ? "true" : "false";
  return *this;
}

JsonObject& JsonObject::Add(const std::string& key, const std::vector<int64_t>& values) {
  return AddArray(key, values.size(),
                  [&](size_t i, std::string* out) { absl::StrAppend(out, values[i]); });
}

JsonObject& JsonObject::Add(const std::string& key, const std::vector<JsonObject>& objects) {
  return AddArray(key, objects.size(),
                  [&](size_t i, std::string* out) { *out += objects[i].str(); });
}

JsonObject& JsonObject::AddArray(const std::string& key, size_t size,
                                 absl::FunctionRef<void(size_t, std::string*)> append_element) {
  Key(key);
  body_ += '[';
  for (size_t i = 0; i < size; ++i) {
    if (i > 0) body_ += ',';
    append_element(i, &body_);
  }
  body_ += ']';
  return *this;
}

absl::StatusOr<std::unique_ptr<JsonLinesWriter>> JsonLinesWriter::Open(const std::string& path,
                                                                       bool append) {
  std::FILE* f = std::fopen(path.c_str(), append ? "a" : "w");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write metrics file ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<JsonLinesWriter>(new JsonLinesWriter(f));
}

JsonLinesWriter::~JsonLinesWriter() {
  absl::MutexLock lock(&mu_);
  std::fclose(file_);
}

absl::Status JsonLinesWriter::Write(const JsonObject& object) {
  const std::string line = object.str() + "\n";
  absl::MutexLock lock(&mu_);
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return absl::DataLossError(absl::StrCat("metrics write failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace ps

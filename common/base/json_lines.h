#ifndef PS_COMMON_BASE_JSON_LINES_H_
#define PS_COMMON_BASE_JSON_LINES_H_

// Metrics as JSON: a builder for one flat JSON object, and a writer that appends one object per
// line to a file (the JSON-lines format plotting tools read).

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace ps {

// Builds `{"k":v,...}` in insertion order. Doubles print with enough digits to round-trip;
// NaN and Inf print as null (JSON has no spelling for them).
class JsonObject {
 public:
  JsonObject& Add(const std::string& key, const std::string& value);
  JsonObject& Add(const std::string& key, const char* value);
  JsonObject& Add(const std::string& key, double value);
  JsonObject& Add(const std::string& key, int64_t value);
  JsonObject& Add(const std::string& key, int value) { return Add(key, int64_t{value}); }
  JsonObject& Add(const std::string& key, bool value);
  JsonObject& Add(const std::string& key, const std::vector<int64_t>& values);
  JsonObject& Add(const std::string& key, const std::vector<JsonObject>& objects);  // an array
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void Key(const std::string& key);
  // key: [e0,e1,...]: `append_element(i, out)` appends element i's JSON to `out`.
  JsonObject& AddArray(const std::string& key, size_t size,
                       absl::FunctionRef<void(size_t, std::string*)> append_element);
  std::string body_;
};

std::string JsonEscape(const std::string& s);

// Appends lines to a file; thread-safe. Each line is flushed so a crash loses at most one line.
class JsonLinesWriter {
 public:
  // Creates or truncates `path`. PERMISSION_DENIED style errors name the path.
  // `append`: keep what the file holds (a restarted worker continues its own file).
  static absl::StatusOr<std::unique_ptr<JsonLinesWriter>> Open(const std::string& path,
                                                               bool append = false);
  ~JsonLinesWriter();
  absl::Status Write(const JsonObject& object);

 private:
  explicit JsonLinesWriter(std::FILE* file) : file_(file) {}
  absl::Mutex mu_;
  std::FILE* file_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_COMMON_BASE_JSON_LINES_H_

#ifndef PS_COMMON_METRICS_PROMETHEUS_H_
#define PS_COMMON_METRICS_PROMETHEUS_H_

// Metrics in the Prometheus text exposition format (version 0.0.4), and a small HTTP server that
// serves them at /metrics on their own port.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {

// Builds one exposition: each metric name gets its # HELP and # TYPE lines once, before its
// first sample. Names and label names must be valid Prometheus identifiers.
class PrometheusText {
 public:
  using Labels = std::map<std::string, std::string>;
  PrometheusText& Counter(const std::string& name, const std::string& help, double value,
                          const Labels& labels = {});
  PrometheusText& Gauge(const std::string& name, const std::string& help, double value,
                        const Labels& labels = {});
  // A histogram: cumulative counts per upper bound `le` (ascending; +Inf is added), sum, count.
  PrometheusText& Histogram(const std::string& name, const std::string& help,
                            const std::vector<std::pair<double, int64_t>>& cumulative, double sum,
                            int64_t count, const Labels& labels = {});
  const std::string& str() const { return text_; }

 private:
  void Describe(const std::string& name, const char* type, const std::string& help);
  void Line(const std::string& name, double value, const Labels& labels);
  void Sample(const std::string& name, const char* type, const std::string& help, double value,
              const Labels& labels);
  std::string text_;
  std::map<std::string, bool> described_;
};

// Serves GET /metrics with the text `render` returns at each request, from its own thread.
class MetricsHttpServer {
 public:
  // port 0 picks a free one. UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& host, int port, std::function<std::string()> render);
  ~MetricsHttpServer();  // stops and joins
  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_COMMON_METRICS_PROMETHEUS_H_

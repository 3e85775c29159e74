#include "common/metrics/prometheus.h"

#include <httplib.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps {

namespace {

std::string EscapeLabel(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Integers print exactly (counters up to 2^53); the rest with enough digits to round-trip.
  if (v == std::floor(v) && std::abs(v) < 9.007199254740992e15) {
    return absl::StrFormat("%.0f", v);
  }
  return absl::StrFormat("%.17g", v);
}

}  // namespace

void PrometheusText::Describe(const std::string& name, const char* type, const std::string& help) {
  if (described_[name]) return;
  described_[name] = true;
  absl::StrAppend(&text_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

void PrometheusText::Sample(const std::string& name, const char* type, const std::string& help,
                            double value, const Labels& labels) {
  Describe(name, type, help);
  Line(name, value, labels);
}

PrometheusText& PrometheusText::Histogram(const std::string& name, const std::string& help,
                                          const std::vector<std::pair<double, int64_t>>& cumulative,
                                          double sum, int64_t count, const Labels& labels) {
  Describe(name, "histogram", help);
  for (const auto& [le, n] : cumulative) {
    Labels with_le = labels;
    with_le["le"] = FormatValue(le);
    Line(name + "_bucket", static_cast<double>(n), with_le);
  }
  Labels inf = labels;
  inf["le"] = "+Inf";
  Line(name + "_bucket", static_cast<double>(count), inf);
  Line(name + "_sum", sum, labels);
  Line(name + "_count", static_cast<double>(count), labels);
  return *this;
}

void PrometheusText::Line(const std::string& name, double value, const Labels& labels) {
  text_ += name;
  if (!labels.empty()) {
    text_ += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      absl::StrAppend(&text_, first ? "" : ",", k, "=\"", EscapeLabel(v), "\"");
      first = false;
    }
    text_ += '}';
  }
  absl::StrAppend(&text_, " ", FormatValue(value), "\n");
}

PrometheusText& PrometheusText::Counter(const std::string& name, const std::string& help,
                                        double value, const Labels& labels) {
  Sample(name, "counter", help, value, labels);
  return *this;
}

PrometheusText& PrometheusText::Gauge(const std::string& name, const std::string& help,
                                      double value, const Labels& labels) {
  Sample(name, "gauge", help, value, labels);
  return *this;
}

struct MetricsHttpServer::Impl {
  httplib::Server server;
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port, std::function<std::string()> render) {
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->impl_ = std::make_unique<Impl>();
  s->impl_->server.Get("/metrics", [render](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  if (port == 0) {
    s->port_ = s->impl_->server.bind_to_any_port(host);
  } else {
    s->port_ = s->impl_->server.bind_to_port(host, port) ? port : -1;
  }
  if (s->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve /metrics on ", host, ":", port));
  }
  Impl* impl = s->impl_.get();
  s->thread_ = std::thread([impl] { impl->server.listen_after_bind(); });
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (impl_ != nullptr) impl_->server.stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace ps

#include "common/base/logging.h"

#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace ps {

void SetUpLogging(const std::string& process_name, const std::string& level) {
  auto logger = spdlog::stderr_logger_mt(process_name);
  logger->set_pattern("[%n] %H:%M:%S.%e %^%L%$ %v");
  spdlog::level::level_enum lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") lvl = spdlog::level::info;
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace ps

#include "util/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace ropelab::log {

void init(const std::string& level) {
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("ropelab", console);
  logger->set_pattern("[%H:%M:%S] %^%l%$ %v");
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

void set_rank(int rank) {
  auto logger = spdlog::default_logger();
  logger->set_pattern("[%H:%M:%S] [rank " + std::to_string(rank) + "] %^%l%$ %v");
  if (rank != 0 && logger->level() < spdlog::level::warn) logger->set_level(spdlog::level::warn);
}

void add_log_file(const std::string& path) {
  auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
  sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] %l %v");
  spdlog::default_logger()->sinks().push_back(sink);
}

void drop_log_files() {
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove_if(sinks.begin(), sinks.end(),
                             [](const auto& s) {
                               return std::dynamic_pointer_cast<spdlog::sinks::basic_file_sink_mt>(
                                          s) != nullptr;
                             }),
              sinks.end());
}

}  // namespace ropelab::log

#include "bench/lib/output.h"

#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

namespace bench {

std::unique_ptr<std::ofstream> open_csv(const std::string &path, const std::string &header) {
  const bool fresh = !std::filesystem::exists(path) || std::filesystem::file_size(path) == 0;
  auto f = std::make_unique<std::ofstream>(path, std::ios::app);
  if (!*f) throw std::runtime_error("cannot open --csv file " + path);
  if (fresh) *f << header << '\n';
  return f;
}

std::string make_run_id() {
  return fmt::format("{}-{}", static_cast<long long>(time(nullptr)), getpid());
}

void print_table_header(const std::string &h) {
  fmt::print("{}\n{}\n", h, std::string(h.size(), '-'));
}

}  // namespace bench

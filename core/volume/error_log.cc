#include "core/volume/error_log.h"

#include <ctime>
#include <nlohmann/json.hpp>
#include <utility>

namespace ckptfs {

bool ErrorLog::Record(ReadError error) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  // Newest first: a retry follows its read within milliseconds.
  for (size_t i = recent_.size(); i-- > 0;) {
    if (now - made_[i] >= kRepeatWindow) break;  // older ones are older still
    if (recent_[i].file == error.file && recent_[i].reason == error.reason) {
      ++recent_[i].repeats;
      return false;
    }
  }
  error.time = std::chrono::system_clock::now();
  error.repeats = 0;
  if (recent_.size() == kKept) {
    recent_.pop_front();
    made_.pop_front();
  }
  recent_.push_back(std::move(error));
  made_.push_back(now);
  ++total_;
  return true;
}

uint64_t ErrorLog::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

std::vector<ReadError> ErrorLog::Recent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {recent_.begin(), recent_.end()};
}

nlohmann::json ErrorsJson(const ErrorLog& log, const std::string& prefix) {
  nlohmann::json recent = nlohmann::json::array();
  for (const ReadError& e : log.Recent()) {
    const std::time_t t = std::chrono::system_clock::to_time_t(e.time);
    std::tm tm;
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", ::gmtime_r(&t, &tm));
    recent.push_back({{"time", stamp},
                      {"file", prefix + e.file},
                      {"source", e.source},
                      {"reason", e.reason},
                      {"repeats", e.repeats}});
  }
  return {{"total", log.total()}, {"recent", std::move(recent)}};
}

std::string StoredPath(const std::string& source_path, const std::string& stored_name) {
  if (stored_name.empty()) return source_path;
  // SOURCE named the file itself (a single-file checkpoint, local or remote).
  if (source_path == stored_name ||
      (source_path.size() > stored_name.size() && source_path.ends_with("/" + stored_name))) {
    return source_path;
  }
  if (source_path.empty() || source_path.back() == '/') return source_path + stored_name;
  return source_path + "/" + stored_name;
}

}  // namespace ckptfs

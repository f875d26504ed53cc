// ErrorLog: the read errors of one mounted checkpoint, as the daemon logs them and
// stats.json shows them ("errors": the last kKept records and a total).
//
// One record per failed read request, not per kernel retry. The kernel asks again at once
// for what a read refused (a failed readahead page by page, then the reader's own read; an
// mmap fault once or twice more), each time for a part of the range it asked first, and
// each retry fails for the same reason. So a failure of the same file for the same reason
// within kRepeatWindow of that file's last record is a repeat: counted in the record
// (`repeats`), not recorded again, and Record says so, so the front end logs one line per
// failed request. A different file, a different reason, or the same one kRepeatWindow
// after the record was made is a new record: a failure that lasts logs a line at most
// every kRepeatWindow per file.
//
// Thread-safe: every FUSE worker thread records into one ErrorLog.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace ckptfs {

// One failed read: which file of the mount, which stored file, and why.
struct ReadError {
  std::chrono::system_clock::time_point time;  // when it first failed
  std::string file;      // the path inside the mount ("tensors/layer/0/weight.npy")
  std::string source;    // the stored file: its path in SOURCE, or its URL
  std::string reason;    // the error, without the stored file's name it usually starts with
  uint64_t repeats = 0;  // retries of the same read collapsed into this record
};

class ErrorLog {
 public:
  static constexpr size_t kKept = 32;
  static constexpr std::chrono::milliseconds kRepeatWindow{5000};

  // Records `error` (its `time` and `repeats` are set here). True when it is a new record
  // (the caller logs it); false when it repeats a record of the same file and reason
  // made less than kRepeatWindow ago.
  bool Record(ReadError error);
  // Records made so far, repeats not counted.
  uint64_t total() const;
  // The last kKept records, oldest first.
  std::vector<ReadError> Recent() const;

 private:
  mutable std::mutex mu_;
  std::deque<ReadError> recent_;  // guarded by mu_
  // When each kept record was made, on the clock its window is measured by: parallel to
  // recent_.
  std::deque<std::chrono::steady_clock::time_point> made_;  // guarded by mu_
  uint64_t total_ = 0;                                      // guarded by mu_
};

// stats.json's "errors": {"total": N, "recent": [{"time", "file", "source", "reason",
// "repeats"}, ...]}, oldest first, times in UTC (ISO 8601). `prefix` goes before each
// file's path (a run's checkpoint name and '/').
nlohmann::json ErrorsJson(const ErrorLog& log, const std::string& prefix = "");

// The stored file's name as a user finds it: `stored_name` inside SOURCE `source_path` (a
// directory or URL), or SOURCE itself when it is that file.
std::string StoredPath(const std::string& source_path, const std::string& stored_name);

}  // namespace ckptfs

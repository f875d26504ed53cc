// DescriptorsLeft: a process about to run out of descriptors, for tests of what EMFILE does.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace ckptfs::testing {

// While alive, the process has exactly `free` descriptors left: every other number below a
// lowered RLIMIT_NOFILE is taken, so the code under test meets EMFILE as it would with
// 1500 checkpoints open. Single-threaded tests only (other threads would meet it too).
class DescriptorsLeft {
 public:
  explicit DescriptorsLeft(int free) {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit low = saved_;
    low.rlim_cur = std::min<rlim_t>(saved_.rlim_cur, 1024);
    ::setrlimit(RLIMIT_NOFILE, &low);
    const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0) held_.push_back(null);
    for (int fd; null >= 0 && (fd = ::fcntl(null, F_DUPFD_CLOEXEC, 0)) >= 0;) held_.push_back(fd);
    for (int i = 0; i < free && !held_.empty(); ++i) {
      ::close(held_.back());
      held_.pop_back();
    }
  }
  ~DescriptorsLeft() {
    for (int fd : held_) ::close(fd);
    ::setrlimit(RLIMIT_NOFILE, &saved_);
  }
  DescriptorsLeft(const DescriptorsLeft&) = delete;
  DescriptorsLeft& operator=(const DescriptorsLeft&) = delete;

 private:
  rlimit saved_{};
  std::vector<int> held_;
};

}  // namespace ckptfs::testing

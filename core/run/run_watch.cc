// RunTree's watching of a local run (run_tree.h: StartWatching): inotify on SOURCE and its
// subdirectories, a burst of writes listed once when it settles, periodic relists, and
// idle entries closed.
#include <dirent.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>

#include "core/run/run_tree.h"

namespace ckptfs {
namespace {

// Changes made by a burst of writes are listed once, when it has been quiet this long (or
// at most kDebounceMax after its first event).
constexpr auto kDebounce = std::chrono::milliseconds(200);
constexpr auto kDebounceMax = std::chrono::seconds(1);
constexpr size_t kMaxWatches = 4096;
constexpr uint32_t kWatchMask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                                IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB | IN_DONT_FOLLOW |
                                IN_ONLYDIR;

// Watches SOURCE and its subdirectories (an HF checkpoint being written is a directory
// whose files change). Called again after each listing: adding a watch twice is a no-op,
// and a directory made since gets its own.
void WatchTree(int fd, const std::string& dir) {
  if (fd < 0 || ::inotify_add_watch(fd, dir.c_str(), kWatchMask) < 0) return;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  size_t watches = 1;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || e->d_type != DT_DIR) continue;
    if (++watches > kMaxWatches) break;
    (void)::inotify_add_watch(fd, (dir + "/" + name).c_str(), kWatchMask);
  }
  ::closedir(d);
}

// Reads every pending event; true if there was any.
bool DrainEvents(int fd) {
  alignas(inotify_event) char buf[16384];
  bool any = false;
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) return any;
    any = true;
  }
}

}  // namespace

void RunTree::StartWatching(std::function<void(const std::string&)> changed) {
  if (watcher_.joinable()) return;
  changed_ = std::move(changed);
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (!source_.watch_dir.empty()) inotify_fd_ = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  watcher_ = std::thread([this] { WatchLoop(); });
}

void RunTree::StopWatching() {
  if (!watcher_.joinable()) return;
  const uint64_t one = 1;
  (void)!::write(stop_fd_, &one, sizeof(one));
  watcher_.join();
  for (int* fd : {&stop_fd_, &inotify_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void RunTree::WatchLoop() {
  WatchTree(inotify_fd_, source_.watch_dir);
  const bool local = inotify_fd_ >= 0;
  RunClock::time_point next_list = RunClock::now() + options_.relist;
  RunClock::time_point first_event{}, last_event{};
  bool dirty = false;
  while (true) {
    RunClock::time_point due = RunClock::now() + std::chrono::seconds(1);  // idle checks
    if (local) due = std::min(due, next_list);
    if (dirty) due = std::min({due, last_event + kDebounce, first_event + kDebounceMax});
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [name, c] : candidates_) due = std::min(due, c.first_seen + options_.stable);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(due - RunClock::now());
    pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {inotify_fd_, POLLIN, 0}};
    ::poll(fds, local ? 2 : 1, static_cast<int>(std::clamp<int64_t>(wait.count(), 1, 1000)));
    if (fds[0].revents) return;
    const RunClock::time_point now = RunClock::now();
    if (local && fds[1].revents && DrainEvents(inotify_fd_)) {
      if (!dirty) first_event = now;
      dirty = true;
      last_event = now;
    }
    bool candidate_due = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [name, c] : candidates_) {
        candidate_due |= now >= c.first_seen + options_.stable;
      }
    }
    const bool settled =
        dirty && (now >= last_event + kDebounce || now >= first_event + kDebounceMax);
    if (local && (settled || candidate_due || now >= next_list)) {
      dirty = false;
      next_list = now + options_.relist;
      (void)Relist();  // a failed listing keeps what is shown; the next one tries again
      WatchTree(inotify_fd_, source_.watch_dir);
    }
    CloseIdle();
  }
}

}  // namespace ckptfs

// The per-tensor cost of a mount of many tiny tensors, measured on the real daemon: its
// RSS right after `ckptfs mount` returns and after a whole read of pytorch_model.bin (whose
// zip headers and pickle are made on first read), and the time the mount takes. The
// bounds are the bytes per tensor docs/memory.md documents (scripts/tensor_overhead.sh
// measures them at 1M tensors); 200k tensors keep the test within a minute.

#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "mount_harness.h"

namespace ckptfs::mount_test {
namespace {

constexpr uint64_t kTensors = 200'000;
// docs/memory.md: daemon RSS per tensor after mount and after reading
// pytorch_model.bin, over a fixed base (binary, libraries, FUSE buffers).
constexpr uint64_t kBaseRss = 24u << 20;
// pytorch_model/ (docs/split.md) costs 85 B/tensor in the Layout (a node, a child slot and
// a file name; memory_test.cc): measured 422 over the base before it and 507 with it after
// mount (2026-11-25, same machine and session), 659 and 716 to 755 after the .bin. The
// bounds were 480 and 720; each grows by that 85, plus 5 of noise. Since the one read path
// (b743db3, bisected) reading the .bin leaves about 60 B/tensor more in the daemon (from
// 200k to 400k tensors: 726 B/tensor more RSS a tensor before it, 787 after; the heap in
// use grows only 11 B/tensor on a whole read, memory_test.cc): 795 to 811 over the base
// measured on 2026-11-27, which failed CI once at 810. The bound after the .bin is 860.
// Issue 38: a third of these tensors are BF16, and each now has a widened .npy beside its
// .safetensors in tensors/ (a node, a child slot, a name, two extents: about 120 B, so 40
// a tensor here): 553 over the base after mount and 834 after the .bin measured on
// 2026-12-06 (another session's build beside it). Both bounds grow by those 40.
constexpr uint64_t kMountBytesPerTensor = 610;
constexpr uint64_t kAfterBinBytesPerTensor = 900;
// Per million tensors, scaled to kTensors, plus a fixed start (process, FUSE mount, fork)
// that 200k tensors do not amortize. These are guards against a mount that scales badly
// (a quadratic pass, a lookup per tensor), not speed claims: the mount's speed is the
// bench's mount section (docs/benchmarks.md). Issue 10's goal, 3 s at 1M tensors on an
// idle 2-core machine, measured 2.3 to 2.8 s there (CPU 0.75 to 0.8 s at 200k idle, 1.03 s
// with the test suite beside it). On another 2-core VM of the same kind (2026-11-27), whose
// hypervisor makes every page fault dear, the same binary took 1.54 to 2.12 s and 2.2 to
// 2.9 s CPU at 200k, a quarter of it in page faults (perf: exc_page_fault ->
// pvm_irq_enable); glibc.malloc.hugetlb=1 (transparent huge pages for the heap) brought
// that to 0.80 s and 1.13 s. The bounds leave room for such a machine under load.
constexpr double kMountSecondsPerMillion = 12.0;
constexpr double kMountFixedSeconds = 0.5;
constexpr double kMountCpuSecondsPerMillion = 20.0;

double ChildrenCpuSeconds() {
  struct rusage usage;
  ::getrusage(RUSAGE_CHILDREN, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

uint64_t VmRssBytes(pid_t pid) { return ProcStatusBytes(pid, "VmRSS:"); }

// These machines are shared: a mount that waits for a core is not slower code. The
// budget grows with the 1-minute load average past the number of cores.
double LoadFactor() {
  double load = 0;
  if (getloadavg(&load, 1) != 1) return 1;
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max(1.0, load / cores);
}

using TensorMemoryMountTest = MountFixture;

TEST_F(TensorMemoryMountTest, ManyTinyTensorsStayWithinBytesPerTensor) {
  const std::string source = scratch_->Path("tiny");
  ASSERT_NO_FATAL_FAILURE(Generate(
      source, {"--kind", "headers", "--shards", "4", "--tensors", std::to_string(kTensors)}));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  const double budget =
      (kMountFixedSeconds + kMountSecondsPerMillion * kTensors / 1e6) * LoadFactor();
  const double cpu_before = ChildrenCpuSeconds();
  const auto start = std::chrono::steady_clock::now();
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = ChildrenCpuSeconds() - cpu_before;
  EXPECT_LE(seconds, budget) << "mount of " << kTensors << " tensors";
  EXPECT_LE(cpu, kMountCpuSecondsPerMillion * kTensors / 1e6)
      << "CPU seconds of the mount of " << kTensors << " tensors";

  const std::vector<pid_t> daemons = ProcessesWithArg(mountpoint);
  ASSERT_EQ(daemons.size(), 1u);
  const uint64_t after_mount = VmRssBytes(daemons[0]);
  EXPECT_LE(after_mount, kBaseRss + kTensors * kMountBytesPerTensor)
      << (after_mount / kTensors) << " B/tensor after mount";

  const ProcessResult cat = RunProcess(
      {"sh", "-c", "cat \"$0\" > /dev/null", mountpoint + "/pytorch_model.bin"}, kCheckTimeout);
  ASSERT_EQ(cat.exit_code, 0) << cat.Describe();
  const uint64_t after_bin = VmRssBytes(daemons[0]);
  EXPECT_LE(after_bin, kBaseRss + kTensors * kAfterBinBytesPerTensor)
      << (after_bin / kTensors) << " B/tensor after reading pytorch_model.bin";
  std::printf(
      "%llu tensors: mount %.2f s (budget %.2f s), %.2f s CPU, RSS %llu B/tensor after "
      "mount, %llu after pytorch_model.bin\n",
      static_cast<unsigned long long>(kTensors), seconds, budget, cpu,
      static_cast<unsigned long long>(after_mount / kTensors),
      static_cast<unsigned long long>(after_bin / kTensors));

  // The compact layout serves the same bytes: the merged safetensors parsed and compared
  // tensor by tensor with the shards.
  RunCheck("check_merged.py", {source, mountpoint});
}

}  // namespace
}  // namespace ckptfs::mount_test

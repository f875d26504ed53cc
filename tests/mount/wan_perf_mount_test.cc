// Remote reads over a link with a first-byte latency and a per-connection rate
// (scripts/wan_server.py): a sequential read keeps many requests in flight, one tensor
// fetches its own bytes, and mounts sharing a --cache-dir fetch each block once between
// them. The exact ratios against curl and aria2c are the bench's (scripts/bench.sh
// --sections wan); these are the behaviours, with margins a loaded machine keeps.

#include <filesystem>
#include <map>
#include <regex>

#include "wan_harness.h"

namespace ckptfs::mount_test {
namespace {

// A number `"key": N` in a line of JSON (check_wan.py prints flat objects), or -1.
double JsonNumber(const std::string& json, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + key + "\": (-?[0-9.eE+-]+)"))) return -1;
  return std::stod(m[1].str());
}

// The sha256 digests in check_wan.py's `read` line, in order.
std::vector<std::string> Digests(const std::string& json) {
  std::vector<std::string> out;
  const std::regex hex("[0-9a-f]{64}");
  for (auto it = std::sregex_iterator(json.begin(), json.end(), hex); it != std::sregex_iterator();
       ++it) {
    out.push_back(it->str());
  }
  return out;
}

// The server over scratch/www (wan_harness.h), stopped in TearDown.
class WanPerfMountTest : public MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    www_ = scratch_->MakeDir("www");
    server_ = std::make_unique<WanServer>(scratch_->Path("wan"));
  }

  // The server goes first: its state lives in the scratch directory.
  void TearDown() override {
    server_.reset();
    MountFixture::TearDown();
  }

  // Starts the server with `latency_ms` to each reply's first byte and `rate_mbps` MB/s a
  // connection (0: unlimited).
  void StartServer(int latency_ms, int rate_mbps) {
    ASSERT_EQ(server_->Start({"--files", www_, "--latency-ms", std::to_string(latency_ms), "--rate",
                              std::to_string(rate_mbps)}),
              "");
  }

  std::string Url(const std::string& path) const { return server_->Url("files", path); }

  // check_wan.py COMMAND ARGS: its JSON line.
  std::string Check(std::vector<std::string> args) {
    args.insert(args.begin(), {kPython, ScriptPath("tests/mount/check_wan.py")});
    const ProcessResult r = RunProcess(args, seconds(300));
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    return r.out;
  }

  // Body bytes of weight files the server has sent so far.
  uint64_t WeightBytesSent() const {
    return BytesSent(server_->Requests(),
                     [](const WanRequest& r) { return r.path.ends_with(".safetensors"); });
  }

  // Ranges of 64 KiB or more of weight files the server answered more than once (GETs):
  // blocks fetched twice. Header reads at mount are smaller.
  int BlocksFetchedTwice() const {
    std::map<std::pair<std::string, std::string>, int> seen;
    int twice = 0;
    for (const WanRequest& r : server_->Requests()) {
      if (r.method != "GET" || !r.path.ends_with(".safetensors") || r.bytes < (64u << 10)) continue;
      if (++seen[{r.path, r.range}] == 2) ++twice;
    }
    return twice;
  }

  std::string www_;
  std::unique_ptr<WanServer> server_;
};

// 40 ms to the first byte and 4 MB/s a connection: one connection reads at most 4 MB/s.
// A sequential read through the mount keeps many range requests in flight (eight fixed
// workers made about 7x one connection) and fetches the file once.
TEST_F(WanPerfMountTest, SequentialReadBeatsOneConnectionByFar) {
  ASSERT_NO_FATAL_FAILURE(StartServer(40, 4));
  const std::string source = www_ + "/bench";
  ASSERT_NO_FATAL_FAILURE(Generate(source, {"--kind", "bench", "--total-bytes", "96M", "--tensors",
                                            "24", "--shards", "3", "--dtype", "F32"}));
  const std::string mnt = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("bench/"), mnt));
  const double before = static_cast<double>(WeightBytesSent());

  const std::string read = Check({"read", mnt + "/model.safetensors"});
  const double mbps = JsonNumber(read, "mbps"), bytes = JsonNumber(read, "bytes");
  const std::string stats = Check({"stats", mnt});
  const double fetched = static_cast<double>(WeightBytesSent()) - before;
  std::cout << "read " << bytes << " B at " << mbps << " MB/s (one connection: 4 MB/s); server "
            << "sent " << fetched << " B; remote " << stats;
  EXPECT_GE(mbps, 10 * 4.0) << "many requests in flight: " << stats;
  EXPECT_GE(JsonNumber(stats, "in_flight_max_seen"), 16) << stats;
  EXPECT_GE(JsonNumber(stats, "in_flight_limit"), 2) << stats;
  EXPECT_LE(fetched, 1.1 * bytes) << "a whole-file read fetches the file once";
}

// One 4 MiB tensor fetches its own bytes (blocks are cut at tensor edges: with 1 MiB
// blocks on a fixed grid, a tensor that starts past a header spanned five, 1.25x). The
// tensor is one in the middle of its shard: the last one's fifth block was a short tail.
TEST_F(WanPerfMountTest, OneTensorFetchesItsOwnBytes) {
  ASSERT_NO_FATAL_FAILURE(StartServer(0, 0));
  const std::string source = www_ + "/bench";
  ASSERT_NO_FATAL_FAILURE(Generate(source, {"--kind", "bench", "--total-bytes", "48M", "--tensors",
                                            "12", "--shards", "2", "--dtype", "F32"}));
  const std::string mnt = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("bench/"), mnt));
  const double before = static_cast<double>(WeightBytesSent());
  const ProcessResult r =
      RunProcess({kPython, "-c", "import numpy, sys; print(numpy.load(sys.argv[1]).nbytes)",
                  mnt + "/tensors/model/layers/4/weight.npy"},
                 seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const double tensor = std::stod(r.out);
  ASSERT_GE(tensor, 4u << 20);
  const double fetched = static_cast<double>(WeightBytesSent()) - before;
  std::cout << "tensor " << tensor << " B: server sent " << fetched << " B\n";
  EXPECT_GE(fetched, tensor);
  EXPECT_LE(fetched, 1.1 * tensor);
}

// Two mounts sharing one --cache-dir read the same file at once: both read it right, and
// the server answers each block once between them; a third mount then fetches nothing.
TEST_F(WanPerfMountTest, TwoMountsShareOneCacheDirFetchingEachBlockOnce) {
  ASSERT_NO_FATAL_FAILURE(StartServer(20, 20));
  const std::string source = www_ + "/bench";
  ASSERT_NO_FATAL_FAILURE(Generate(source, {"--kind", "bench", "--total-bytes", "48M", "--tensors",
                                            "12", "--shards", "2", "--dtype", "F32"}));
  const std::string local = scratch_->MakeDir("local");
  ASSERT_NO_FATAL_FAILURE(Mount(source, local));
  const std::string expected = Check({"read", local + "/model.safetensors"});

  const std::string cache = scratch_->path() + "/cache";
  const std::vector<std::string> options = {"--cache-dir", cache, "--cache-dir-size", "1G"};
  const std::string a = scratch_->MakeDir("a"), b = scratch_->MakeDir("b");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("bench/"), a, nullptr, options));
  ASSERT_NO_FATAL_FAILURE(Mount(Url("bench/"), b, nullptr, options));
  const double before = static_cast<double>(WeightBytesSent());
  const std::string both = Check({"read", a + "/model.safetensors", b + "/model.safetensors"});
  const std::vector<std::string> sha = Digests(expected);
  ASSERT_EQ(sha.size(), 1u) << expected;
  EXPECT_EQ(Digests(both), std::vector<std::string>({sha[0], sha[0]}))
      << "both mounts read the local mount's bytes";
  const double shards =
      static_cast<double>(std::filesystem::file_size(source + "/model-00001-of-00002.safetensors") +
                          std::filesystem::file_size(source + "/model-00002-of-00002.safetensors"));
  const double sent = static_cast<double>(WeightBytesSent()) - before;
  std::cout << "two mounts at once: server sent " << sent << " B for " << shards
            << " B of shards; stats a " << Check({"stats", a}) << "  stats b "
            << Check({"stats", b});
  EXPECT_EQ(BlocksFetchedTwice(), 0) << "log: " << server_->LogPath();
  EXPECT_LE(sent, 1.02 * shards);
  EXPECT_EQ(RunProcess({kCkptfs, "umount", a}, seconds(30)).exit_code, 0);
  EXPECT_EQ(RunProcess({kCkptfs, "umount", b}, seconds(30)).exit_code, 0);

  const double warm_before = static_cast<double>(WeightBytesSent());
  const std::string c = scratch_->MakeDir("c");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("bench/"), c, nullptr, options));
  const std::string again = Check({"read", c + "/model.safetensors"});
  EXPECT_EQ(Digests(again), sha);
  EXPECT_EQ(JsonNumber(Check({"stats", c}), "bytes_fetched"), 0)
      << "a warm --cache-dir answers all";
  EXPECT_EQ(static_cast<double>(WeightBytesSent()), warm_before) << "headers included";
}

}  // namespace
}  // namespace ckptfs::mount_test

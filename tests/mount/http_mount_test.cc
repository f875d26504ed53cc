// HTTP sources beyond the common checks (which StoredCheckpointTest runs over HTTP too):
// the real binary mounting checkpoints served by nginx on loopback; the server stopped or
// the object replaced under a mount, bytes fetched per read, the disk cache, a slow
// server. Skips without nginx (Debian's nginx-light, installed by setup.sh).

#include <filesystem>
#include <thread>

#include "remote_harness.h"

namespace ckptfs::mount_test {
namespace {

// nginx serving scratch/www on a free loopback port, stopped in TearDown.
class HttpMountTest : public MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    const std::string unavailable = NginxServer::UnavailableReason();
    if (!unavailable.empty()) GTEST_SKIP() << unavailable;
    www_ = scratch_->MakeDir("www");
    server_ = std::make_unique<NginxServer>(www_, scratch_->Path("nginx"));
    ASSERT_EQ(server_->Start(), "");
  }

  // The server goes first: its config and logs live in the scratch directory that
  // MountFixture::TearDown removes.
  void TearDown() override {
    server_.reset();
    MountFixture::TearDown();
  }

  // Bytes of weight files the server has sent so far, and in how many requests (from its
  // access log, once it has been quiet for a moment: lines are written as requests end).
  std::pair<uint64_t, int> WeightBytesServed() {
    std::string log, last;
    for (auto deadline = Clock::now() + seconds(10); Clock::now() < deadline;) {
      std::this_thread::sleep_for(milliseconds(300));
      log = ReadTextFile(server_->AccessLogPath());
      if (log == last) break;
      last = log;
    }
    uint64_t bytes = 0;
    int requests = 0;
    std::istringstream lines(log);
    for (std::string method, uri, status, sent; lines >> method >> uri >> status >> sent;) {
      if (uri.find(".safetensors") == std::string::npos || uri.find(".json") != std::string::npos) {
        continue;
      }
      bytes += std::stoull(sent);
      ++requests;
    }
    return {bytes, requests};
  }

  std::string Url(const std::string& path) const { return server_->Url(path); }

  std::string www_;
  std::unique_ptr<NginxServer> server_;
};

// The common checks over HTTP are StoredCheckpointTest's (stored_checkpoint_test.cc);
// here, the pytorch_model.bin view of a checkpoint read over HTTP.
TEST_F(HttpMountTest, TorchBinOverHttp) {
  const std::string source = www_ + "/mixed";
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("mixed/"), mountpoint));
  RunCheck("check_torch_bin.py", {source, mountpoint, "--crc", "zero"});
}

// Files show the server's Last-Modified (nginx sends the file's mtime), views the newest
// shard's, and directories the newest object's: a remount shows the same times.
TEST_F(HttpMountTest, FilesShowLastModified) {
  const std::string source = www_ + "/llama";
  ASSERT_NO_FATAL_FAILURE(Generate(source, {"--kind", "llama"}));
  const std::vector<std::pair<std::string, time_t>> times = {
      {"model-00001-of-00002.safetensors", 1609459200},  // 2021-01-01 UTC
      {"model-00002-of-00002.safetensors", 1640995200},  // 2022-01-01 UTC
      {"model.safetensors.index.json", 1577836800},      // 2020-01-01 UTC
      {"config.json", 1672531200},                       // 2023-01-01 UTC
      {"tokenizer.json", 1577836800},
      {"generation_config.json", 1577836800},
  };
  for (const auto& [name, seconds] : times) {
    const struct timespec both[2] = {{seconds, 0}, {seconds, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, (source + "/" + name).c_str(), both, 0), 0) << name;
  }
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("llama/"), mountpoint));
  const ProcessResult r = RunProcess(
      {"stat", "-c", "%Y %n", "--", mountpoint + "/shards/model-00001-of-00002.safetensors",
       mountpoint + "/config.json", mountpoint + "/model.safetensors", mountpoint},
      kCheckTimeout);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out, "1609459200 " + mountpoint + "/shards/model-00001-of-00002.safetensors\n" +
                       "1672531200 " + mountpoint + "/config.json\n" + "1640995200 " + mountpoint +
                       "/model.safetensors\n" + "1672531200 " + mountpoint + "\n");
}

TEST_F(HttpMountTest, ServerDownAtMountIsOneLine) {
  const std::string source = www_ + "/mixed";
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  server_->Stop();
  const std::string mountpoint = scratch_->MakeDir("mnt");
  const ProcessResult r = RunProcess({kCkptfs, "mount", Url("mixed/"), mountpoint}, seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_LE(r.elapsed, seconds(10)) << r.Describe();
  EXPECT_EQ(LineCount(r.err), 1) << r.Describe();
  EXPECT_NE(r.err.find("127.0.0.1"), std::string::npos) << r.Describe();
  EXPECT_FALSE(IsMounted(mountpoint));
}

// A name the server does not have: one line saying so as HTTP does, exit 2.
TEST_F(HttpMountTest, MissingObjectIsNotFoundHttp404) {
  const std::string source = www_ + "/mixed";
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const ProcessResult r =
      RunProcess({kCkptfs, "inspect", Url("mixed/missing.safetensors")}, seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_EQ(r.err, "ckptfs: " + Url("mixed/missing.safetensors") + ": not found (HTTP 404)\n")
      << r.Describe();
}

// Issue 28, no read amplification: a packed checkpoint (`ckptfs pack`, 1 MiB frames) over
// HTTP; reading one 6 MiB tensor whole fetches at most its frames' compressed bytes plus
// less than a block at each end, decodes at most its frames, and stats.json's views
// charge that work to tensors/ (check_packed_amplification.py).
TEST_F(HttpMountTest, PackedTensorReadFetchesOnlyItsFrames) {
  const std::string plain = scratch_->Path("plain");
  ASSERT_NO_FATAL_FAILURE(Generate(
      plain, {"--kind", "bench", "--total-bytes", "96M", "--tensors", "16", "--shards", "2"}));
  const std::string packed = www_ + "/packed";
  const ProcessResult pack = Ckptfs({"pack", plain, packed, "--frame-size", "1M"}, seconds(120));
  ASSERT_EQ(pack.exit_code, 0) << pack.Describe();
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("packed/"), mountpoint));
  EXPECT_TRUE(RunCheck("check_packed_amplification.py", {plain, packed, mountpoint, "--remote"}));
}

// A shard replaced on the server after mount: reads of it fail (EIO), never mixing
// bytes of two versions, and the daemon stays up for the rest.
TEST_F(HttpMountTest, ObjectReplacedAfterMountGivesEio) {
  const std::string source = www_ + "/mixed";
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("mixed/"), mountpoint));
  const std::string shard = "model-00001-of-00008.safetensors";
  // Same size, new content and time: a new ETag.
  ProcessResult r =
      RunProcess({kPython, "-c",
                  "import os,sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[-1]^=1; "
                  "open(p,'wb').write(b); os.utime(p, (1, 1))",
                  source + "/" + shard},
                 seconds(10));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  r = RunProcess({"cat", mountpoint + "/shards/" + shard}, seconds(60));
  EXPECT_NE(r.exit_code, 0) << "read of a replaced object must fail; " << r.Describe();
  EXPECT_NE(r.err.find("Input/output error"), std::string::npos) << r.Describe();
  r = RunProcess({"cat", mountpoint + "/config.json"}, seconds(60));
  EXPECT_EQ(r.exit_code, 0) << "the daemon must stay up; " << r.Describe();
}

// A shard deleted on the server after mount (retention over HTTP): its bytes are gone, so
// reads of them fail with EIO and a log line naming the shard and the answer (issue 22);
// the rest still serves.
TEST_F(HttpMountTest, ObjectDeletedAfterMountGivesEioWithALogLine) {
  const std::string source = www_ + "/mixed";
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  const std::string log = scratch_->Path("daemon.log");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("mixed/"), mountpoint, nullptr, {"--log-file", log}));
  const std::string shard = "model-00002-of-00008.safetensors";
  fs::remove(source + "/" + shard);
  ProcessResult r = RunProcess({"cat", mountpoint + "/shards/" + shard}, seconds(60));
  EXPECT_NE(r.exit_code, 0) << "read of a deleted object must fail; " << r.Describe();
  EXPECT_NE(r.err.find("Input/output error"), std::string::npos) << r.Describe();
  const std::string said = ReadTextFile(log);
  EXPECT_NE(said.find(shard), std::string::npos) << said;
  EXPECT_NE(said.find("404"), std::string::npos) << said;
  r = RunProcess({"cat", mountpoint + "/config.json"}, seconds(60));
  EXPECT_EQ(r.exit_code, 0) << "the daemon must stay up; " << r.Describe();
}

// The server lost mid-mount: a read fails with EIO once --timeout has passed, the
// daemon stays up, and the same read succeeds once the server is back.
TEST_F(HttpMountTest, ServerLostThenBack) {
  const std::string source = www_ + "/mixed";
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("mixed/"), mountpoint, nullptr, {"--timeout", "2"}));
  ExpectEioWhileDownThenRecovery(*server_, mountpoint + "/shards/model-00002-of-00008.safetensors",
                                 source + "/model-00002-of-00008.safetensors");
}

// DESIGN: a read of one tensor fetches about that tensor. nginx's log counts what the
// server sent: the headers at mount, then the tensor plus at most one partial block at
// each end (target: tensor + 2 MiB).
TEST_F(HttpMountTest, OneTensorFetchesAboutItsBytes) {
  const std::string source = www_ + "/bench";
  ASSERT_NO_FATAL_FAILURE(Generate(source, {"--kind", "bench", "--total-bytes", "96M", "--tensors",
                                            "12", "--shards", "3", "--dtype", "F32"}));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("bench/"), mountpoint));
  const auto [mount_bytes, mount_requests] = WeightBytesServed();
  EXPECT_GE(mount_requests, 3) << "each shard's header is read at mount";
  EXPECT_LE(mount_bytes, 64u << 10) << "a mount fetches headers only";

  const ProcessResult r =
      RunProcess({kPython, "-c", "import numpy, sys; print(numpy.load(sys.argv[1]).nbytes)",
                  mountpoint + "/tensors/model/layers/5/weight.npy"},
                 seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const uint64_t tensor_bytes = std::stoull(r.out);
  ASSERT_GE(tensor_bytes, 7u << 20);
  const auto [total_bytes, total_requests] = WeightBytesServed();
  const uint64_t read_bytes = total_bytes - mount_bytes;
  std::cout << "tensor " << tensor_bytes << " B: server sent " << read_bytes << " B in "
            << total_requests - mount_requests << " requests\n";
  EXPECT_GE(read_bytes, tensor_bytes);
  EXPECT_LE(read_bytes, tensor_bytes + (2u << 20));
}

// --cache-dir: two mounts share one directory while reading at once; a third mount finds
// entries damaged on disk, drops and refetches them (bytes stay right); a fourth, with
// the cache warm, sends the server no body bytes at all.
TEST_F(HttpMountTest, CacheDirSharedDamagedAndWarm) {
  const std::string source = www_ + "/bench";
  ASSERT_NO_FATAL_FAILURE(Generate(
      source, {"--kind", "bench", "--total-bytes", "24M", "--tensors", "6", "--shards", "2"}));
  const std::string cache = scratch_->path() + "/cache";
  const std::vector<std::string> options = {"--cache-dir", cache, "--cache-dir-size", "1G"};
  const std::vector<std::string> shards = {"model-00001-of-00002.safetensors",
                                           "model-00002-of-00002.safetensors"};
  auto compare_all = [&](const std::vector<std::string>& mountpoints) {
    std::string script;
    for (const std::string& m : mountpoints) {
      for (const std::string& s : shards) {
        script += "cmp " + m + "/shards/" + s + " " + source + "/" + s + " & pids=\"$pids $!\"; ";
      }
    }
    script += "for p in $pids; do wait $p || exit 1; done";
    const ProcessResult r = RunProcess({"sh", "-c", script}, seconds(120));
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
  };
  auto remote_stats = [&](const std::string& mountpoint) {
    const ProcessResult r =
        RunProcess({kPython, "-c",
                    "import json, sys; s = json.load(open(sys.argv[1]))\n"
                    "print(s['remote']['bytes_fetched'], s['disk_cache']['corrupt'])",
                    mountpoint + "/.ckptfs/stats.json"},
                   seconds(30));
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    std::pair<uint64_t, uint64_t> fetched_corrupt{~0ull, ~0ull};
    std::istringstream(r.out) >> fetched_corrupt.first >> fetched_corrupt.second;
    return fetched_corrupt;
  };
  auto unmount = [&](const std::string& mountpoint) {
    EXPECT_EQ(RunProcess({kCkptfs, "umount", mountpoint}, seconds(30)).exit_code, 0);
  };

  const std::string a = scratch_->MakeDir("a"), b = scratch_->MakeDir("b");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("bench/"), a, nullptr, options));
  ASSERT_NO_FATAL_FAILURE(Mount(Url("bench/"), b, nullptr, options));
  compare_all({a, b});
  unmount(a);
  unmount(b);

  // Damage every entry: flip the last payload byte of half, truncate the others.
  std::vector<std::filesystem::path> entries;
  for (const auto& e : std::filesystem::recursive_directory_iterator(cache)) {
    if (e.is_regular_file() && e.path().filename().string().size() == 32)
      entries.push_back(e.path());
  }
  ASSERT_GE(entries.size(), 24u) << "every block read should be in " << cache;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i % 2) {
      std::filesystem::resize_file(entries[i], std::filesystem::file_size(entries[i]) / 2);
    } else {
      std::fstream f(entries[i], std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(-1, std::ios::end);
      const char c = static_cast<char>(f.get() ^ 0x5a);
      f.seekp(-1, std::ios::end);
      f.put(c);
    }
  }
  const std::string c = scratch_->MakeDir("c");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("bench/"), c, nullptr, options));
  compare_all({c});
  const auto [refetched, corrupt] = remote_stats(c);
  EXPECT_GE(corrupt, entries.size() / 2) << "damaged entries must be noticed";
  EXPECT_GE(refetched, 24u << 20) << "damaged entries must be fetched again";
  unmount(c);

  const std::string d = scratch_->MakeDir("d");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("bench/"), d, nullptr, options));
  compare_all({d});
  const auto [warm_fetched, warm_corrupt] = remote_stats(d);
  EXPECT_EQ(warm_fetched, 0u) << "a warm --cache-dir answers every read";
  EXPECT_EQ(warm_corrupt, 0u);
}

// A slow server (nginx limit_rate): reads take their time, and the daemon's memory stays
// near --cache-size however much is asked for at once.
TEST_F(HttpMountTest, SlowServerKeepsMemoryBounded) {
  const std::string source = www_ + "/slow";
  ASSERT_NO_FATAL_FAILURE(Generate(
      source, {"--kind", "bench", "--total-bytes", "48M", "--tensors", "6", "--shards", "2"}));
  ASSERT_EQ(server_->Reload("location /slow/ { limit_rate 4m; }"), "");
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("slow/"), mountpoint, nullptr, {"--cache-size", "16M"}));
  // Four readers at once, each asking for a whole shard or the merged file.
  const ProcessResult r = RunProcess(
      {"sh", "-c",
       "cd " + mountpoint +
           " && (cat model.safetensors >/dev/null & cat shards/model-00001-of-00002.safetensors "
           ">/dev/null & cat shards/model-00002-of-00002.safetensors >/dev/null & "
           "cat pytorch_model.bin >/dev/null & wait) & "
           "peak=0; while kill -0 $! 2>/dev/null; do "
           "rss=$(/usr/bin/python3 -c \"import json; print(json.load(open('" +
           mountpoint +
           "/.ckptfs/stats.json'))['rss_bytes'])\"); "
           "[ $rss -gt $peak ] && peak=$rss; sleep 0.5; done; echo $peak"},
      seconds(300));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const uint64_t peak = std::stoull(r.out);
  std::cout << "peak daemon RSS " << (peak >> 20) << " MiB with --cache-size 16M\n";
  EXPECT_LE(peak, uint64_t{64} << 20) << "memory must stay bounded; " << r.Describe();
}

}  // namespace
}  // namespace ckptfs::mount_test

// ckptfs: mount a sharded ML checkpoint as one read-only file system.
#include <malloc.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <cstdlib>

#include "fs/commands.h"
#include "fs/fuse_ops.h"
#include "fs/log.h"

namespace {

// Absolute path, so the daemon can chdir("/") and logs say where things are.
std::string Absolute(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : path;
}

// Multi-MiB buffers (decoded frames, reply buffers) are allocated and freed all the time
// across threads. glibc's default raises its mmap threshold after the first such free, so
// later ones land in per-thread arenas that keep the memory: RSS would drift far above
// --cache-size. A fixed threshold sends them to mmap, and back to the system on free.
// It sits above libcurl's 512 KiB receive buffer, which libcurl allocates and frees for
// every request: mapped afresh each time, its page faults cost more than the copy it
// receives (a trim threshold above it keeps arenas from giving it back at once, too).
void BoundAllocatorMemory() {
  ::mallopt(M_MMAP_THRESHOLD, 768 << 10);
  ::mallopt(M_TRIM_THRESHOLD, 2 << 20);
  ::mallopt(M_ARENA_MAX, 4);
}

// A checkpoint with thousands of shards keeps one descriptor per shard open.
void RaiseOpenFileLimit() {
  rlimit lim;
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

// Local paths are made absolute; URLs are left as they are.
std::string SourceArg(const std::string& source) {
  return source.find("://") == std::string::npos ? Absolute(source) : source;
}

// Options for http(s):// and s3:// sources, shared by every subcommand that opens one.
struct RemoteArgs {
  double timeout_s = 30;
  std::string addressing = "auto";
  std::string cache_dir_size = "10G";
  ckptfs::RemoteOptions options;

  void AddTo(CLI::App* cmd) {
    cmd->add_option("--timeout", timeout_s,
                    "seconds a read of a remote source may take, retries included, before it "
                    "fails with EIO (default 30)")
        ->check(CLI::Range(0.1, 3600.0));
    cmd->add_option("--endpoint", options.s3.endpoint,
                    "S3-compatible store for s3:// sources (e.g. http://127.0.0.1:9000); "
                    "default AWS, or AWS_ENDPOINT_URL");
    cmd->add_option("--region", options.s3.region,
                    "S3 region (default AWS_REGION, AWS_DEFAULT_REGION, the profile's, us-east-1)");
    cmd->add_option("--addressing", addressing,
                    "S3 addressing: path (endpoint/bucket/key), virtual (bucket.endpoint/key) or "
                    "auto: virtual for AWS, path for --endpoint (default auto)")
        ->check(CLI::IsMember({"auto", "path", "virtual"}));
  }
  void AddCacheDirTo(CLI::App* cmd) {
    cmd->add_option("--cache-dir", options.cache_dir,
                    "keep bytes fetched from remote sources in DIR, across mounts and shared "
                    "by mounts using the same DIR");
    cmd->add_option("--cache-dir-size", cache_dir_size,
                    "bytes --cache-dir may hold; least recently used go first (default 10G)");
  }
  // Fills `options` from the parsed strings; false (after one line on stderr) if malformed.
  bool Finish() {
    using Addressing = ckptfs::S3Options::Addressing;
    options.http.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    options.s3.addressing = addressing == "path"      ? Addressing::kPath
                            : addressing == "virtual" ? Addressing::kVirtualHost
                                                      : Addressing::kAuto;
    auto bytes = ckptfs::ParseByteSize(cache_dir_size);
    if (!bytes || *bytes == 0) {
      std::fprintf(stderr, "ckptfs: --cache-dir-size %s: not a size (e.g. 50G)\n",
                   cache_dir_size.c_str());
      return false;
    }
    options.cache_dir_bytes = *bytes;
    if (!options.cache_dir.empty()) options.cache_dir = Absolute(options.cache_dir);
    return true;
  }
};

int Mount(const std::string& source, ckptfs::MountOptions options,
          const ckptfs::CodecOptions& codec, bool zip_crc, const ckptfs::RemoteOptions& remote) {
  auto volume = ckptfs::Volume::Open(SourceArg(source), codec, zip_crc, remote);
  if (!volume.ok()) {
    std::fprintf(stderr, "ckptfs: %s\n", volume.status().message().c_str());
    return ckptfs::ExitCodeForOpenFailure(volume.status());
  }
  options.mountpoint = Absolute(options.mountpoint);
  return ckptfs::MountAndServe(std::move(volume).value(), options);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "ckptfs: mount a sharded ML checkpoint (safetensors or torch.save) as one read-only\n"
      "file system.\n"
      "Exit codes: 0 ok, 1 runtime failure, 2 bad usage or invalid checkpoint."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ckptfs 0.1.0");

  std::string source, mountpoint;
  ckptfs::MountOptions mount_options;
  std::vector<std::string> o_options;
  CLI::App* mount = app.add_subcommand(
      "mount", "Mount SOURCE read-only at MOUNTPOINT; returns once the mount answers");
  mount
      ->add_option("SOURCE", source,
                   "checkpoint directory (index + shards), one .safetensors/.bin/.pt file, or an "
                   "http(s):// or s3:// URL of either")
      ->required();
  mount->add_option("MOUNTPOINT", mountpoint, "an existing directory")->required();
  mount->add_flag("-f,--foreground", mount_options.foreground,
                  "stay in the foreground; unmount to exit");
  mount->add_flag("-d,--debug", mount_options.debug,
                  "log every FUSE request to stderr; implies -f");
  std::string cache_size = "512M";
  ckptfs::CodecOptions codec;
  mount->add_option("--cache-size", cache_size,
                    "bytes of decoded frames kept in memory, shared by every view (default 512M)");
  mount->add_option("--spill-dir", codec.spill_dir,
                    "where single-frame .zst shards are decoded once (default /var/tmp)");
  mount->add_option("--log-file", mount_options.log_file,
                    "append daemon log lines (read errors, warnings) to FILE instead of syslog");
  bool zip_crc = false;
  RemoteArgs remote;
  remote.AddTo(mount);
  remote.AddCacheDirTo(mount);
  mount->add_flag("--zip-crc", zip_crc,
                  "compute CRC-32s for pytorch_model.bin at mount (reads every tensor once) so "
                  "zip testers pass; torch sources carry theirs already");
  mount->add_option("-o", o_options, "FUSE mount options, comma separated (e.g. allow_other)")
      ->delimiter(',')
      ->allow_extra_args(false);

  CLI::App* umount = app.add_subcommand("umount", "Unmount MOUNTPOINT (same as fusermount3 -u)");
  umount->add_option("MOUNTPOINT", mountpoint, "a ckptfs mount point")->required();

  bool json = false;
  CLI::App* inspect = app.add_subcommand(
      "inspect", "List shards and tensors (dtype, shape, bytes) without mounting");
  inspect->add_option("SOURCE", source, "checkpoint directory or weights file")->required();
  inspect->add_flag("--json", json, "machine-readable output");
  remote.AddTo(inspect);

  CLI::App* verify =
      app.add_subcommand("verify", "Check structure and read every byte; exit 0 only if sound");
  verify->add_option("SOURCE", source, "checkpoint directory or weights file")->required();
  remote.AddTo(verify);

  std::string dest, frame_size = "4M", shard_size = "0";
  int level = 3;
  CLI::App* pack = app.add_subcommand(
      "pack", "Write SOURCE as seekable-zstd shards (random access, checksums) into DEST");
  pack->add_option("SOURCE", source, "checkpoint directory or weights file")->required();
  pack->add_option("DEST", dest, "new or empty directory")->required();
  pack->add_option("--level", level, "zstd level (default 3)");
  pack->add_option("--frame-size", frame_size,
                   "decoded bytes per frame: the unit of random access (default 4M)");
  pack->add_option("--shard-size", shard_size,
                   "regroup tensors into shards of at most this many bytes (default: keep)");
  remote.AddTo(pack);

  // Refusals are one line on stderr; only --help and --version print more, to stdout.
  if (argc > 1 && argv[1][0] != '-' &&
      app.get_subcommands([&](CLI::App* sub) { return sub->get_name() == argv[1]; }).empty()) {
    std::fprintf(stderr, "ckptfs: unknown command '%s' (see ckptfs --help)\n", argv[1]);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "ckptfs: %s (see ckptfs%s --help)\n", e.what(),
                 argc > 1 && argv[1][0] != '-' ? (std::string(" ") + argv[1]).c_str() : "");
    return 2;
  }

  RaiseOpenFileLimit();
  BoundAllocatorMemory();
  if (!remote.Finish()) return 2;
  if (mount->parsed()) {
    mount_options.mountpoint = mountpoint;
    mount_options.foreground |= mount_options.debug;
    auto bytes = ckptfs::ParseByteSize(cache_size);
    if (!bytes) {
      std::fprintf(stderr, "ckptfs: --cache-size %s: not a size (e.g. 512M, 4G)\n",
                   cache_size.c_str());
      return 2;
    }
    codec.cache_bytes = *bytes;
    codec.warn = [](const std::string& line) { ckptfs::LogError("%s", line.c_str()); };
    mount_options.fuse_options = o_options;
    return Mount(source, mount_options, codec, zip_crc, remote.options);
  }
  if (umount->parsed()) return ckptfs::RunUmount(mountpoint);
  if (inspect->parsed()) return ckptfs::RunInspect(source, json, codec, remote.options);
  if (verify->parsed()) return ckptfs::RunVerify(source, codec, remote.options);
  if (pack->parsed()) {
    auto frame = ckptfs::ParseByteSize(frame_size);
    auto shard = ckptfs::ParseByteSize(shard_size);
    if (!frame || !shard) {
      std::fprintf(stderr, "ckptfs: pack: %s is not a size (e.g. 4M, 2G)\n",
                   (!frame ? frame_size : shard_size).c_str());
      return 2;
    }
    return ckptfs::RunPack(source, Absolute(dest), level, *frame, *shard, remote.options);
  }
  return 2;
}

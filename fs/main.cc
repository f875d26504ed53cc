// ckptfs: mount a sharded ML checkpoint as one read-only file system.
#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/cache/disk_cache.h"
#include "core/run/run_tree.h"
#include "fs/commands.h"
#include "fs/fuse_ops.h"
#include "fs/help.h"
#include "fs/log.h"
#include "fs/mount_args.h"
#include "fs/ownership.h"
#include "fs/preflight.h"
#include "fs/version.h"

namespace {

// Absolute path, so the daemon can chdir("/") and logs say where things are.
std::string Absolute(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : ckptfs::AbsolutePath(path);
}

// pack --threads: more than any machine here has cores; a typo like 10000 would otherwise
// start that many threads (one per frame, up to the count).
constexpr int kMaxPackThreads = 1024;

// One line on stderr (control characters escaped) and the usage exit code.
int Refuse(const std::string& message) {
  ckptfs::PrintRefusal(ckptfs::Status::InvalidArgument(message));
  return 2;
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
                    "fails with EIO, an mmap fault's too (default 30)")
        ->check(CLI::Range(0.1, 3600.0));
    cmd->add_option("--endpoint", options.s3.endpoint,
                    "S3-compatible store for s3:// sources (e.g. http://127.0.0.1:9000; "
                    "default AWS, or AWS_ENDPOINT_URL), or the Hub for hf:// sources (default "
                    "HF_ENDPOINT, or https://huggingface.co)");
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
                    "by mounts using the same DIR, and zip CRC sidecars in DIR/crc (default "
                    "~/.cache/ckptfs/crc); DIR must be yours and writable only by you");
    cmd->add_flag("--cache-dir-shared", options.cache_dir_shared,
                  "allow a --cache-dir that others own or may write (a group's cache); only "
                  "entries written by you or root are ever served from it");
    cmd->add_option("--cache-dir-size", cache_dir_size,
                    "bytes --cache-dir may hold; least recently used go first (default 10G)");
  }
  // Fills `options` from the parsed strings; false (after one line on stderr) if malformed.
  bool Finish() {
    using Addressing = ckptfs::S3Options::Addressing;
    // CLI::Range lets NaN through: every comparison with it is false.
    if (!std::isfinite(timeout_s) || timeout_s < 0.1 || timeout_s > 3600) {
      Refuse("--timeout " + std::to_string(timeout_s) +
             ": not a number of seconds from 0.1 to 3600");
      return false;
    }
    options.http.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    // One --endpoint: the source's kind says which store it names.
    options.hub.endpoint = options.s3.endpoint;
    options.s3.addressing = addressing == "path"      ? Addressing::kPath
                            : addressing == "virtual" ? Addressing::kVirtualHost
                                                      : Addressing::kAuto;
    auto bytes = ckptfs::ParseByteSize(cache_dir_size);
    if (!bytes || *bytes == 0) {
      Refuse("--cache-dir-size " + cache_dir_size + ": not a size above 0 (e.g. 50G)");
      return false;
    }
    options.cache_dir_bytes = *bytes;
    // Against the caller's directory, before the daemon moves to "/"; symlinks stay (the
    // cache follows the path it was given).
    if (!options.cache_dir.empty()) options.cache_dir = ckptfs::AbsolutePath(options.cache_dir);
    return true;
  }
};

// --uid, --gid, --umask, --file-mode, --dir-mode: kept as given, checked by Finish.
// --model-key: which sub-tree the merged views show (core/checkpoint/model.h). Given or
// not matters, since '' (every tensor) differs from the format's rule.
struct ModelKeyArg {
  std::string key;
  std::vector<CLI::Option*> given;  // one per subcommand it was added to

  void AddTo(CLI::App* cmd) {
    given.push_back(cmd->add_option(
        "--model-key", key,
        "the top-level sub-tree model.safetensors and pytorch_model.bin hold, its KEY. cut "
        "from the names (e.g. ema); '' keeps every tensor as stored. Default: torch, the "
        "first of model_state_dict, state_dict, model, module that is a dict of tensors; "
        "TensorFlow object checkpoints, all but optimizer slots, save_counter and optimizer/*; "
        "else every tensor. tensors/ always holds every tensor"));
  }
  std::optional<std::string> Value() const {
    for (const CLI::Option* option : given) {
      if (option->count() > 0) return key;
    }
    return std::nullopt;
  }
};

struct OwnershipArgs {
  std::string uid, gid, umask, file_mode, dir_mode;

  void AddTo(CLI::App* cmd) {
    cmd->add_option("--uid", uid, "owner of every file (a user name or id; default: yours)");
    cmd->add_option("--gid", gid, "group of every file (a group name or id; default: yours)");
    cmd->add_option("--umask", umask,
                    "permission bits to hide from every file and directory, octal (e.g. 077)");
    cmd->add_option("--file-mode", file_mode,
                    "permission bits of files, octal (e.g. 0440); read bits never exceed the "
                    "source file's; write bits only show (writes still fail: read-only)");
    cmd->add_option("--dir-mode", dir_mode,
                    "permission bits of directories, octal (e.g. 0750); as --file-mode");
  }
  // Fills `out` from the strings given; the first malformed one is refused.
  ckptfs::Status Finish(ckptfs::Ownership& out) const {
    // The macro declares a variable: each use needs a block of its own.
    if (!uid.empty()) {
      CKPTFS_ASSIGN_OR_RETURN(out.uid, ckptfs::ParseOwner("--uid", uid, false));
    }
    if (!gid.empty()) {
      CKPTFS_ASSIGN_OR_RETURN(out.gid, ckptfs::ParseOwner("--gid", gid, true));
    }
    if (!umask.empty()) {
      CKPTFS_ASSIGN_OR_RETURN(out.umask, ckptfs::ParseMode("--umask", umask));
    }
    if (!file_mode.empty()) {
      CKPTFS_ASSIGN_OR_RETURN(out.file_mode, ckptfs::ParseMode("--file-mode", file_mode));
    }
    if (!dir_mode.empty()) {
      CKPTFS_ASSIGN_OR_RETURN(out.dir_mode, ckptfs::ParseMode("--dir-mode", dir_mode));
    }
    return ckptfs::Status::Ok();
  }
};

// Spellings other FUSE file systems (sshfs, rclone, s3fs) take, so that habits work:
// --allow-other and --allow-root are libfuse's -o allow_other and -o allow_root;
// --read-only is accepted and changes nothing, a ckptfs mount being read-only anyway.
struct FuseHabitArgs {
  bool allow_other = false;
  bool allow_root = false;
  bool read_only = false;

  void AddTo(CLI::App* cmd) {
    CLI::Option* other =
        cmd->add_flag("--allow-other", allow_other,
                      "let other users see the mount (-o allow_other; a non-root user needs "
                      "user_allow_other in /etc/fuse.conf)");
    cmd->add_flag("--allow-root", allow_root,
                  "let root see the mount too (-o allow_root; as --allow-other)")
        ->excludes(other);
    cmd->add_flag("--read-only", read_only, "accepted: every ckptfs mount is read-only");
  }
  void AppendTo(std::vector<std::string>& fuse_options) const {
    if (allow_other) fuse_options.push_back("allow_other");
    if (allow_root) fuse_options.push_back("allow_root");
  }
};

// Options of a mount whose SOURCE is a training run (core/run/run_tree.h).
struct RunArgs {
  std::string checkpoint;
  double idle_close_s = 300;
  double relist_s = 5;

  void AddTo(CLI::App* cmd) {
    cmd->add_option("--checkpoint", checkpoint,
                    "SOURCE is a training run: mount one of its checkpoints at the root instead "
                    "of all of them: latest, best or an entry name (latest and best follow the "
                    "run for new opens; open files keep their checkpoint); refused when the run "
                    "records no such checkpoint");
    cmd->add_option("--idle-close", idle_close_s,
                    "a run's checkpoints unused for SECONDS (no open file) are closed, and "
                    "reopened on next use (default 300)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--relist", relist_s,
                    "list a run again at most every SECONDS (remote runs: on access to the root; "
                    "local runs: as a fallback to inotify) (default 5)")
        ->check(CLI::PositiveNumber);
  }
};

// How OpenMount (core/mount/mount_tree.h, which decides run or checkpoint) is to open
// SOURCE and show it.
ckptfs::MountTreeOptions TreeOptions(const ckptfs::ReadOptions& read_options,
                                     ckptfs::ZipCrcMode zip_crc, const ckptfs::OpenOptions& open,
                                     const RunArgs& args, const ckptfs::Ownership& ownership) {
  ckptfs::MountTreeOptions options;
  options.read_options = read_options;
  options.zip_crc = zip_crc;
  options.open = open;
  options.ownership = ownership;
  options.run.pin = args.checkpoint;
  auto seconds = [](double s) {
    return std::chrono::duration_cast<ckptfs::RunClock::duration>(std::chrono::duration<double>(s));
  };
  options.run.idle_close = seconds(args.idle_close_s);
  options.run.relist = seconds(args.relist_s);
  return options;
}

// Everything about a mount that can be judged without the checkpoint, so that a bad
// option is refused at once and before anything is opened: the mount point, -o, and the
// paths the daemon will write to, made absolute against the caller's directory (the daemon
// moves to "/") and kept out of the mount point (the daemon would reach them through its
// own mount and hang). A mount point that is, holds or lies inside a local SOURCE, and one
// that is not empty (unless `allow_non_empty`), are refused: the mount would hide what it
// serves, or what the directory holds. All before the daemon forks, so the user sees the
// line. The log file is opened here, before the mount exists.
ckptfs::Status PrepareMount(const std::string& source, ckptfs::MountOptions& mount,
                            bool allow_non_empty, ckptfs::ReadOptions& read_options,
                            ckptfs::RemoteOptions& remote) {
  using ckptfs::Status;
  if (source.find("://") == std::string::npos) {
    CKPTFS_RETURN_IF_ERROR(ckptfs::CheckSourceReachable(source));
  }
  // After a crash (kill -9, out of memory) the dead mount is still in the table: taken
  // over, so that systemd's Restart=on-failure mounts again. Said on stderr now and in
  // the daemon's log once it serves (the same place in the foreground without a file).
  CKPTFS_ASSIGN_OR_RETURN(const std::optional<std::string> detached,
                          ckptfs::DetachDeadMount(mount.mountpoint));
  if (detached) {
    ckptfs::LogWarn("%s", detached->c_str());
    if (!mount.foreground || !mount.log_file.empty()) mount.warnings.push_back(*detached);
  }
  CKPTFS_ASSIGN_OR_RETURN(mount.mountpoint, ckptfs::CheckMountPoint(mount.mountpoint));
  if (source.find("://") == std::string::npos) {
    CKPTFS_RETURN_IF_ERROR(ckptfs::CheckSourceOutsideMount(source, mount.mountpoint));
  }
  CKPTFS_RETURN_IF_ERROR(ckptfs::CheckEmptyMountPoint(mount.mountpoint, allow_non_empty));
  CKPTFS_RETURN_IF_ERROR(ckptfs::CheckFuseOptions(mount.fuse_options));
  read_options.spill_dir = ckptfs::AbsolutePath(read_options.spill_dir);
  CKPTFS_RETURN_IF_ERROR(ckptfs::CheckWritableDir("--spill-dir", read_options.spill_dir));
  CKPTFS_RETURN_IF_ERROR(
      ckptfs::CheckOutsideMount("--spill-dir", read_options.spill_dir, mount.mountpoint));
  if (!remote.cache_dir.empty()) {
    // A directory that does not exist yet is created (private) when a remote source opens.
    if (::access(remote.cache_dir.c_str(), F_OK) == 0) {
      CKPTFS_RETURN_IF_ERROR(ckptfs::CheckWritableDir("--cache-dir", remote.cache_dir));
    }
    CKPTFS_RETURN_IF_ERROR(
        ckptfs::CheckOutsideMount("--cache-dir", remote.cache_dir, mount.mountpoint));
    CKPTFS_RETURN_IF_ERROR(ckptfs::DiskCache::CheckDirectory(
        remote.cache_dir, remote.cache_dir_shared ? ckptfs::DiskCache::Sharing::kShared
                                                  : ckptfs::DiskCache::Sharing::kPrivate));
  }
  if (!mount.log_file.empty()) {
    mount.log_file = ckptfs::AbsolutePath(mount.log_file);
    CKPTFS_RETURN_IF_ERROR(
        ckptfs::CheckOutsideMount("--log-file", mount.log_file, mount.mountpoint));
    CKPTFS_RETURN_IF_ERROR(ckptfs::OpenLogFile(mount.log_file));
  } else if (auto fallback = ckptfs::DaemonLogFallback(mount.foreground)) {
    // Nothing listens on /dev/log: a detached daemon's lines would vanish, so they go to a
    // file of its own, opened now for --log-file's reason. Never a refusal: a mount
    // without its log still serves, and the line says so.
    const Status usable = fallback->empty() ? Status::Ok()
                                            : ckptfs::CheckOutsideMount("the daemon log", *fallback,
                                                                        mount.mountpoint);
    if (Status s = ckptfs::OpenFallbackLog(*fallback, usable); !s.ok()) {
      ckptfs::LogWarn("%s", s.message().c_str());
    }
  }
  return Status::Ok();
}

int Mount(const std::string& source, ckptfs::MountOptions options, bool allow_non_empty,
          ckptfs::ReadOptions read_options, ckptfs::ZipCrcMode zip_crc, ckptfs::OpenOptions open,
          const RunArgs& run_args, bool verbose, const std::string& log_level) {
  const std::string source_path = SourceArg(source);
  if (ckptfs::Status s =
          PrepareMount(source_path, options, allow_non_empty, read_options, open.remote);
      !s.ok()) {
    ckptfs::PrintRefusal(s);
    return 2;
  }
  const std::string log =
      ckptfs::DaemonLogDescription(options.foreground) + " (level " + log_level + ")";
  auto opened = ckptfs::OpenMount(
      source_path, TreeOptions(read_options, zip_crc, open, run_args, options.ownership));
  if (!opened.ok()) {
    ckptfs::PrintRefusal(opened.status());
    return ckptfs::ExitCodeForOpenFailure(opened.status());
  }
  // Without -v the summary does not name the fallback file: one line does (not with -q),
  // on the first such mount only (it is asked once the checkpoint is known to open).
  if (!verbose && ckptfs::LogEnabled(ckptfs::LogLevel::kWarn)) {
    options.notice = ckptfs::FallbackLogNotice();
  }
  const ckptfs::MountTree& tree = **opened;
  if (tree.run()) {
    if (verbose) options.summary = ckptfs::RunSummary(*tree.run(), options.mountpoint, log);
    options.log_line = ckptfs::RunLogLine(*tree.run(), options.mountpoint);
  } else {
    if (verbose) {
      options.summary = ckptfs::MountSummary(*tree.volume(), source_path, options.mountpoint,
                                             open.remote.cache_dir, log);
    }
    options.log_line = ckptfs::MountLogLine(*tree.volume(), source_path, options.mountpoint,
                                            open.remote.cache_dir);
  }
  return ckptfs::MountAndServe(std::move(opened.value()), options);
}

// The arguments CLI11 is to parse: `ckptfs SOURCE MOUNTPOINT ...` (the FUSE convention
// mount.fuse3 uses for fstab type fuse.ckptfs) made `ckptfs mount ...`, and mount's -o
// options made long options (fs/mount_args.h). A refusal sets `error`.
std::vector<std::string> MountCommandLine(CLI::App& app, const CLI::App& mount, int argc,
                                          char** argv, std::string& error) {
  std::vector<std::string> args(argv, argv + argc);
  auto caller = ckptfs::MountCaller::kUser;
  if (args.size() > 1 && args[1][0] != '-' &&
      app.get_subcommands([&](CLI::App* sub) { return sub->get_name() == args[1]; }).empty()) {
    if (!ckptfs::LooksLikeSource(args[1])) {
      error = "unknown command '" + args[1] + "', and no file of that name (see ckptfs --help)";
      return {};
    }
    args.insert(args.begin() + 1, "mount");
    caller = ckptfs::MountCaller::kMountHelper;
  }
  if (args.size() < 2 || args[1] != "mount") return args;
  auto expanded =
      ckptfs::ExpandMountArgs({args.begin() + 2, args.end()}, ckptfs::LongOptionsOf(mount), caller);
  if (!expanded.ok()) {
    error = expanded.status().message();
    return {};
  }
  args.resize(2);
  args.insert(args.end(), expanded->args.begin(), expanded->args.end());
  for (const std::string& option : expanded->fuse_options) args.push_back("-o" + option);
  return args;
}

// The line refusing a command line CLI11 could not parse (`what`, its message): a mistyped
// long option gets the did-you-mean hint a mistyped -o option gets; anything else, CLI11's
// words and where help is.
std::string ParseErrorLine(CLI::App& app, const std::string& what, int argc, char** argv) {
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (argc < 2 || sub->get_name() != argv[1]) continue;
    if (auto line = ckptfs::UnknownLongOptionLine(
            {argv + 2, argv + argc}, ckptfs::LongOptionsOf(*sub), "ckptfs " + sub->get_name())) {
      return *line;
    }
  }
  return what + " (see ckptfs" + (argc > 1 && argv[1][0] != '-' ? std::string(" ") + argv[1] : "") +
         " --help)";
}

// Parses the command line (made one by MountCommandLine) into the variables the commands
// bound. Returns the exit code when parsing ends the run: 0 after --help or --version
// (printed to stdout), 2 after a refusal (one line on stderr); nullopt when the parsed
// command is to run.
std::optional<int> ParseCommandLine(CLI::App& app, const CLI::App& mount, int argc, char** argv) {
  std::string error;
  std::vector<std::string> args = MountCommandLine(app, mount, argc, argv, error);
  if (!error.empty()) return Refuse(error);
  std::vector<char*> arg_ptrs;
  for (std::string& arg : args) arg_ptrs.push_back(arg.data());
  argc = static_cast<int>(arg_ptrs.size());
  argv = arg_ptrs.data();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    return Refuse(ParseErrorLine(app, e.what(), argc, argv));
  }
  return std::nullopt;
}

// The remote options filled from their strings, then how SOURCE is to be opened; nullopt
// after the one-line refusal of a malformed one. The key is discovery's (OpenOptions), not
// the read path's.
std::optional<ckptfs::OpenOptions> FinishOpenOptions(RemoteArgs& remote,
                                                     const ModelKeyArg& model_key) {
  if (!remote.Finish()) return std::nullopt;
  return ckptfs::OpenOptions(remote.options, model_key.Value());
}

// A local SOURCE behind a directory that does not let this user in: named, rather than
// the opener's "permission denied" on a path the user may not see why. False after that
// refusal. For the commands that read SOURCE in place; mount checks it in PrepareMount.
bool SourceReachable(const std::string& source) {
  if (source.find("://") == std::string::npos) {
    if (ckptfs::Status s = ckptfs::CheckSourceReachable(ckptfs::AbsolutePath(source)); !s.ok()) {
      ckptfs::PrintRefusal(s);
      return false;
    }
  }
  return true;
}

// ckptfs mount: its options, bound here by AddTo; once parsed, Run checks them all (each
// refusal one line, exit 2, before anything is opened) and starts the mount.
struct MountCommand {
  CLI::App* cmd = nullptr;
  std::string source, mountpoint;
  ckptfs::MountOptions mount_options;
  std::vector<std::string> o_options;
  bool allow_non_empty = false;
  std::string cache_size = "512M";
  ckptfs::ReadOptions read_options;
  FuseHabitArgs habits;
  ModelKeyArg model_key;
  OwnershipArgs ownership;
  std::string zip_crc = "auto";
  CLI::Option* zip_crc_option = nullptr;
  RemoteArgs remote;
  RunArgs run_args;
  bool verbose = false, quiet = false;
  std::string log_level = "warn";

  // The options in the order help lists them, and -o spells them (fs/mount_args.h).
  void AddTo(CLI::App& app) {
    cmd = app.add_subcommand(
        "mount", "Mount SOURCE read-only at MOUNTPOINT; returns once the mount answers");
    cmd->add_option("SOURCE", source,
                    "checkpoint directory (index + shards), one .safetensors/.bin/.pt file, or an "
                    "http(s)://, s3:// or hf://ORG/NAME[@REV][/PATH] URL of either; or a "
                    "training-run directory of checkpoints "
                    "(one directory each, plus latest and best)")
        ->required();
    cmd->add_option("MOUNTPOINT", mountpoint, "an existing empty directory outside SOURCE")
        ->required();
    cmd->add_flag("-f,--foreground", mount_options.foreground,
                  "stay in the foreground; unmount to exit");
    cmd->add_flag("-d,--debug", mount_options.debug,
                  "log every FUSE request to stderr; implies -f");
    cmd->add_flag("--allow-non-empty", allow_non_empty,
                  "mount over a MOUNTPOINT that holds files, hiding them while mounted "
                  "(refused otherwise)");
    cmd->add_option("--cache-size", cache_size,
                    "bytes of decoded frames kept in memory, shared by every view (default 512M)");
    cmd->add_option("--spill-dir", read_options.spill_dir,
                    "where single-frame .zst shards are decoded once (default /var/tmp)");
    cmd->add_option("--log-file", mount_options.log_file,
                    "append daemon log lines (read errors, warnings) to FILE instead of syslog");
    habits.AddTo(cmd);
    model_key.AddTo(cmd);
    ownership.AddTo(cmd);
    remote.AddTo(cmd);
    remote.AddCacheDirTo(cmd);
    run_args.AddTo(cmd);
    zip_crc_option =
        cmd->add_option("--zip-crc", zip_crc,
                        "CRC-32s in pytorch_model.bin for zip testers (torch ignores them). auto, "
                        "the default: a sidecar from an earlier mount, verify or pack, else a "
                        "background pass computes them for the next mount (local sources); mount: "
                        "computed before serving (reads every tensor); off: left 0. --zip-crc "
                        "alone (-o zip_crc) means mount")
            ->expected(0, 1)
            // No default_str: CLI11 would print it as the default and also take it for a bare
            // --zip-crc, which is read as mount after parsing instead.
            ->check(CLI::Validator(
                [](std::string& value) {
                  return value.empty() || ckptfs::ParseZipCrcMode(value)
                             ? std::string()
                             : "--zip-crc " + value + ": not auto, mount or off";
                },
                "{auto,mount,off} (default auto)"));
    cmd->add_flag("-v,--verbose", verbose,
                  "once mounted, print what was mounted and how (format, views, caches, log)");
    cmd->add_flag("-q,--quiet", quiet, "print errors only")->excludes("--verbose");
    cmd->add_option("--log-level", log_level,
                    "least severe lines the daemon logs: error, warn, info or debug (default warn)")
        ->check(CLI::IsMember({"error", "warn", "info", "debug"}));
    cmd->add_option("-o", o_options,
                    "mount options, comma separated: any long option above spelt NAME[=VALUE] "
                    "with _ for - (cache_size=4G, zip_crc=off); mount(8)'s own (defaults, nofail, "
                    "_netdev, noauto, x-*, ...) ignored; the rest go to FUSE (noatime, max_read=N)")
        ->allow_extra_args(false);
  }

  // Fills mount_options and read_options from the parsed strings: what can be judged from
  // the options alone (PrepareMount judges them against the file system). The first
  // refusal, else Ok.
  ckptfs::Status FinishOptions() {
    mount_options.mountpoint = mountpoint;
    mount_options.foreground |= mount_options.debug;
    auto bytes = ckptfs::ParseByteSize(cache_size);
    if (!bytes || *bytes == 0) {
      return ckptfs::Status::InvalidArgument("--cache-size " + cache_size +
                                             ": not a size above 0 (e.g. 512M, 4G)");
    }
    read_options.cache_bytes = *bytes;
    read_options.warn = [](const std::string& line) { ckptfs::LogWarn("%s", line.c_str()); };
    mount_options.fuse_options = o_options;
    habits.AppendTo(mount_options.fuse_options);
    if (zip_crc_option->count() > 0 && zip_crc_option->as<std::string>().empty()) {
      zip_crc = "mount";  // a bare --zip-crc (-o zip_crc)
    }
    if (auto unknown = ckptfs::FirstUnknownFuseOption(o_options)) {
      return ckptfs::Status::InvalidArgument(
          ckptfs::UnknownMountOptionLine(*unknown, ckptfs::LongOptionsOf(*cmd)));
    }
    return ownership.Finish(mount_options.ownership);
  }

  // The options checked, the log levels set, then the mount started (Mount).
  int Run() {
    const std::optional<ckptfs::OpenOptions> open = FinishOpenOptions(remote, model_key);
    if (!open) return 2;
    if (ckptfs::Status s = FinishOptions(); !s.ok()) {
      ckptfs::PrintRefusal(s);
      return 2;
    }
    ckptfs::SetLogLevels(quiet     ? ckptfs::LogLevel::kError
                         : verbose ? ckptfs::LogLevel::kInfo
                                   : ckptfs::LogLevel::kWarn,
                         *ckptfs::ParseLogLevel(log_level));
    return Mount(source, mount_options, allow_non_empty, read_options,
                 *ckptfs::ParseZipCrcMode(zip_crc), *open, run_args, verbose, log_level);
  }
};

// ckptfs umount: MOUNTPOINT and -z, run by RunUmount (fs/commands.h).
struct UmountCommand {
  CLI::App* cmd = nullptr;
  std::string mountpoint;
  bool lazy = false;

  void AddTo(CLI::App& app) {
    cmd = app.add_subcommand(
        "umount", "Unmount the ckptfs mount at MOUNTPOINT (fusermount3 -u); refuses other mounts");
    cmd->add_option("MOUNTPOINT", mountpoint, "a ckptfs mount point")->required();
    cmd->add_flag("-z,--lazy", lazy,
                  "lazy unmount (fusermount3 -uz): detach now even if busy; the daemon exits "
                  "once the last open file is closed");
    cmd->footer(
        "Exit codes: 0 unmounted; 1 busy (a process has a file open there: see fuser -vm or "
        "lsof, or use -z) or the unmount failed; 2 not mounted or not a ckptfs mount.");
  }
  int Run() const { return ckptfs::RunUmount(mountpoint, lazy); }
};

// ckptfs inspect: SOURCE (mount's remote options and --model-key apply), listed by
// RunInspect (fs/commands.h) without mounting.
struct InspectCommand {
  CLI::App* cmd = nullptr;
  std::string source;
  bool json = false;
  RemoteArgs remote;
  ModelKeyArg model_key;

  void AddTo(CLI::App& app) {
    cmd = app.add_subcommand(
        "inspect",
        "List shards and tensors (dtype, shape, bytes), or a run's checkpoints, without mounting");
    cmd->add_option("SOURCE", source, "checkpoint or run directory, weights file, or URL")
        ->required();
    cmd->add_flag("--json", json, "machine-readable output");
    remote.AddTo(cmd);
    remote.AddCacheDirTo(cmd);
    model_key.AddTo(cmd);
  }
  // Inspect reads with the default read options: it has no --cache-size or --spill-dir.
  int Run() {
    const std::optional<ckptfs::OpenOptions> open = FinishOpenOptions(remote, model_key);
    if (!open || !SourceReachable(source)) return 2;
    const ckptfs::ReadOptions read_options;
    return ckptfs::RunInspect(source, json, read_options, *open);
  }
};

// ckptfs verify: SOURCE (mount's remote options and --model-key apply), read whole by
// RunVerify (fs/commands.h).
struct VerifyCommand {
  CLI::App* cmd = nullptr;
  std::string source;
  RemoteArgs remote;
  ModelKeyArg model_key;

  void AddTo(CLI::App& app) {
    cmd = app.add_subcommand("verify", "Check structure and read every byte; exit 0 only if sound");
    cmd->add_option("SOURCE", source, "checkpoint directory or weights file")->required();
    remote.AddTo(cmd);
    remote.AddCacheDirTo(cmd);
    model_key.AddTo(cmd);
  }
  // Verify reads with the default read options: it has no --cache-size or --spill-dir.
  int Run() {
    const std::optional<ckptfs::OpenOptions> open = FinishOpenOptions(remote, model_key);
    if (!open || !SourceReachable(source)) return 2;
    const ckptfs::ReadOptions read_options;
    return ckptfs::RunVerify(source, read_options, *open);
  }
};

// ckptfs pack: SOURCE into DEST as seekable zstd, its sizes and thread count checked here,
// the work done by RunPack (fs/commands.h).
struct PackCommand {
  CLI::App* cmd = nullptr;
  std::string source, dest, frame_size = "4M", shard_size = "0";
  int level = 3;
  bool force = false;
  int threads = 0;
  bool byte_group = ckptfs::PackOptions{}.byte_group;
  bool no_byte_group = false;
  RemoteArgs remote;

  void AddTo(CLI::App& app) {
    cmd = app.add_subcommand(
        "pack", "Write SOURCE as seekable-zstd shards (random access, checksums) into DEST");
    cmd->add_option("SOURCE", source, "checkpoint directory or weights file")->required();
    cmd->add_option("DEST", dest,
                    "new or empty directory; an interrupted pack's leftovers (NAME.part) there "
                    "are removed and the pack starts over")
        ->required();
    cmd->add_flag("--force", force,
                  "replace the files a previous pack wrote into DEST; other files are never "
                  "touched (refused)");
    cmd->add_option("--level", level, "zstd level (default 3)");
    cmd->add_option("--frame-size", frame_size,
                    "decoded bytes per frame: the unit of random access (default 4M)");
    cmd->add_option("--threads", threads,
                    "threads that read and compress frames (default 0: one per core); the "
                    "output is the same for any count");
    cmd->add_option("--shard-size", shard_size,
                    "regroup tensors into shards of at most this many bytes (default: keep)");
    cmd->add_flag("--byte-group", byte_group,
                  "regroup the bytes of multi-byte elements by byte position in each frame "
                  "before compressing (smaller shards; ckptfs mounts undo it, `zstd -d` gives "
                  "the grouped bytes)");
    cmd->add_flag("--no-byte-group", no_byte_group,
                  "store the bytes as they are, so that `zstd -d` gives the original shards "
                  "(the default)")
        ->excludes("--byte-group");
    remote.AddTo(cmd);
  }

  int Run() {
    if (!remote.Finish() || !SourceReachable(source)) return 2;
    auto frame = ckptfs::ParseByteSize(frame_size);
    auto shard = ckptfs::ParseByteSize(shard_size);
    if (!frame || *frame == 0 || !shard) {
      return Refuse(
          "pack: " +
          (!frame || *frame == 0 ? "--frame-size " + frame_size : "--shard-size " + shard_size) +
          ": not a size (e.g. 4M, 2G)");
    }
    if (threads < 0 || threads > kMaxPackThreads) {
      std::string line = "pack: --threads ";
      line += std::to_string(threads);
      line += ": not a thread count from 0 (one per core) to ";
      line += std::to_string(kMaxPackThreads);
      return Refuse(line);
    }
    ckptfs::PackOptions options;
    options.threads = static_cast<size_t>(threads);
    options.level = level;
    options.frame_size = *frame;
    options.shard_size = *shard;
    options.force = force;
    options.byte_group = byte_group && !no_byte_group;
    return ckptfs::RunPack(source, Absolute(dest), options, remote.options);
  }
};

// What `ckptfs --help` prints after the commands.
constexpr char kAppFooter[] =
    "Environment:\n"
    "  CKPTFS_HTTP_PASSWORD  password of the user an http(s):// URL names (else ~/.netrc)\n"
    "  AWS_ACCESS_KEY_ID     with AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN): s3:// "
    "credentials (else AWS_PROFILE's in ~/.aws)\n"
    "  AWS_REGION            region of s3:// sources (else AWS_DEFAULT_REGION, the profile's)\n"
    "  AWS_ENDPOINT_URL      S3-compatible endpoint when --endpoint is not given\n"
    "  HF_TOKEN              token for hf:// sources (else the file HF_TOKEN_PATH names, "
    "else $HF_HOME/token, ~/.cache/huggingface/token)\n"
    "  HF_ENDPOINT           the Hub for hf:// sources when --endpoint is not given\n"
    "  XDG_CACHE_HOME        where zip CRC sidecars go without --cache-dir (~/.cache)\n"
    "  XDG_STATE_HOME        where the daemon logs without syslog (~/.local/state)\n"
    "\n"
    // One line, which the help formatter breaks at 80 columns.
    "Logs: syslog as `ckptfs` (journalctl -t ckptfs), or --log-file; stderr with -f. "
    "Without syslog (no /dev/log) a detached daemon appends to "
    "$XDG_STATE_HOME/ckptfs/ckptfs.log, else ~/.local/state/ckptfs/ckptfs.log, or "
    "/var/log/ckptfs/ckptfs.log for root.";

}  // namespace

int main(int argc, char** argv) {
  // The formats from the format table, so that a format added there is named here too.
  const std::string formats = "Formats of SOURCE: " + ckptfs::FormatTitles() + ".";
  CLI::App app{
      ckptfs::WrapHelp(
          "ckptfs: mount an ML checkpoint, or a training run of checkpoints, local, over HTTP "
          "or in S3, as one read-only file system. " +
          formats + " man ckptfs.") +
          "\nExit codes: 0 ok, 1 runtime failure, 2 bad usage or invalid checkpoint.\n" +
          ckptfs::WrapHelp(
              "`ckptfs SOURCE MOUNTPOINT [-o OPTS]` is `ckptfs mount` (what mount(8) runs for "
              "an fstab line of type fuse.ckptfs)."),
      "ckptfs"};  // named, not argv[0]: help (and the man page made from it) says "ckptfs"
  // Before the subcommands are added: each takes the app's formatter when it is made.
  app.formatter(ckptfs::WrappingHelpFormatter());
  app.require_subcommand(1);
  app.set_version_flag("-V,--version", std::string("ckptfs ") + ckptfs::VersionString(),
                       "print the version (and the git commit it was built from) and exit");
  // Added in the order help lists them. CLI11 keeps pointers to their members: they stay put.
  MountCommand mount;
  mount.AddTo(app);
  UmountCommand umount;
  umount.AddTo(app);
  InspectCommand inspect;
  inspect.AddTo(app);
  VerifyCommand verify;
  verify.AddTo(app);
  PackCommand pack;
  pack.AddTo(app);
  for (CLI::App* cmd : {mount.cmd, inspect.cmd, verify.cmd, pack.cmd}) cmd->footer(formats);
  // Set last: subcommands made before it would each repeat it.
  app.footer(kAppFooter);

  // Refusals are one line on stderr; only --help and --version print more, to stdout.
  if (std::optional<int> exit_code = ParseCommandLine(app, *mount.cmd, argc, argv)) {
    return *exit_code;
  }
  RaiseOpenFileLimit();
  BoundAllocatorMemory();
  if (mount.cmd->parsed()) return mount.Run();
  if (umount.cmd->parsed()) return umount.Run();
  if (inspect.cmd->parsed()) return inspect.Run();
  if (verify.cmd->parsed()) return verify.Run();
  if (pack.cmd->parsed()) return pack.Run();
  return 2;
}

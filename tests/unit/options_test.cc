// The command line's checks that need no mount: sizes, -o options, paths, and the escaping
// that keeps every message one line (fs/commands.h, fs/preflight.h, core/status.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "core/status.h"
#include "fs/commands.h"
#include "fs/help.h"
#include "fs/log.h"
#include "fs/mount_args.h"
#include "fs/ownership.h"
#include "fs/preflight.h"

namespace ckptfs {
namespace {

TEST(OwnershipTest, ModesAreOctalUpTo0777) {
  EXPECT_EQ(ParseMode("--umask", "022").value(), 022u);
  EXPECT_EQ(ParseMode("--umask", "0").value(), 0u);
  EXPECT_EQ(ParseMode("--file-mode", "0440").value(), 0440u);
  EXPECT_EQ(ParseMode("--file-mode", "0o755").value(), 0755u);
  for (const char* text : {"99", "8", "", "-1", "+7", " 7", "0x1ff", "1777", "4755", "07777",
                           "00000", "rw-r--r--", "0o"}) {
    Result<uint32_t> r = ParseMode("--umask", text);
    ASSERT_FALSE(r.ok()) << "'" << text << "'";
    EXPECT_EQ(r.status().message(),
              std::string("--umask ") + text + ": not an octal mode from 0 to 0777");
  }
}

TEST(OwnershipTest, OwnersAreIdsOrNames) {
  EXPECT_EQ(ParseOwner("--uid", "65534", false).value(), 65534u);
  EXPECT_EQ(ParseOwner("--uid", "0", false).value(), 0u);
  EXPECT_EQ(ParseOwner("--uid", "root", false).value(), 0u);
  EXPECT_EQ(ParseOwner("--gid", "root", true).value(), 0u);
  for (const char* text : {"-1", "4294967295", "99999999999", "", "no-such-user-ckptfs", "1 2"}) {
    Result<uint32_t> r = ParseOwner("--uid", text, false);
    ASSERT_FALSE(r.ok()) << "'" << text << "'";
    EXPECT_EQ(r.status().message().rfind(std::string("--uid ") + text + ": ", 0), 0u)
        << r.status().message();
  }
}

// Read and execute bits never exceed the source's; write bits only when asked for.
TEST(OwnershipTest, ShownModeIsNeverMoreReadableThanTheSource) {
  EXPECT_EQ(ShownMode(0444, 0555, 0), 0444u);  // defaults: the source-derived mode
  EXPECT_EQ(ShownMode(0555, 0555, 0), 0555u);
  EXPECT_EQ(ShownMode(0400, 0444, 0), 0400u);    // a 0600 source stays its owner's
  EXPECT_EQ(ShownMode(0444, 0440, 0), 0440u);    // --file-mode 0440
  EXPECT_EQ(ShownMode(0444, 0555, 077), 0400u);  // --umask 077
  EXPECT_EQ(ShownMode(0400, 0644, 0), 0600u);    // write asked for: shown, read is not widened
  EXPECT_EQ(ShownMode(0555, 0755, 022), 0755u);
  EXPECT_EQ(ShownMode(0555, 0777, 022), 0755u);
  EXPECT_EQ(ShownMode(0444, 0777, 0777), 0u);
}

TEST(ParseByteSizeTest, Units) {
  EXPECT_EQ(ParseByteSize("0"), 0u);
  EXPECT_EQ(ParseByteSize("1048576"), 1048576u);
  EXPECT_EQ(ParseByteSize("64K"), 64u << 10);
  EXPECT_EQ(ParseByteSize("512M"), 512u << 20);
  EXPECT_EQ(ParseByteSize("4GiB"), uint64_t{4} << 30);
  EXPECT_EQ(ParseByteSize("2t"), uint64_t{2} << 40);
  EXPECT_EQ(ParseByteSize("18446744073709551615"), UINT64_MAX);
}

// stoull takes a sign and wraps "-1" to 2^64-1, which made a cache unbounded.
TEST(ParseByteSizeTest, RefusesSignsBlanksAndOverflow) {
  for (const char* text :
       {"-1", "-1G", "-0", "+5", " 5", "\t5M", "", "G", "5Q", "5 M", "18446744073709551616",
        "99999999999999999999999", "16777216T", "17179869184G"}) {
    EXPECT_EQ(ParseByteSize(text), std::nullopt) << "'" << text << "'";
  }
}

TEST(EscapeControlCharsTest, EscapesControlBytesOnly) {
  EXPECT_EQ(EscapeControlChars("plain name.safetensors"), "plain name.safetensors");
  EXPECT_EQ(EscapeControlChars("a\nb"), "a\\x0ab");
  EXPECT_EQ(EscapeControlChars("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(EscapeControlChars(std::string("nul\0", 4)), "nul\\x00");
  EXPECT_EQ(EscapeControlChars("tab\tdel\x7f"), "tab\\x09del\\x7f");
  EXPECT_EQ(EscapeControlChars("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 kept
  // Idempotent: a message escaped when made may be escaped again when printed.
  EXPECT_EQ(EscapeControlChars(EscapeControlChars("a\r\nb")), "a\\x0d\\x0ab");
}

TEST(EscapeControlCharsTest, StatusMessagesAreOneLine) {
  const Status s = Status::Corruption("shard\n-00001\x1b[2J.safetensors: header too long");
  EXPECT_EQ(s.message(), "shard\\x0a-00001\\x1b[2J.safetensors: header too long");
  EXPECT_EQ(Status::NotFound("a\nb").message().find('\n'), std::string::npos);
  EXPECT_EQ(Status::IoError("a\rb", EACCES).errno_value(), EACCES);
}

TEST(CheckFuseOptionsTest, RefusesWhatMakesTheMountWritable) {
  EXPECT_TRUE(CheckFuseOptions({}).ok());
  EXPECT_TRUE(CheckFuseOptions({"ro", "allow_other", "fsname=a\\,b"}).ok());
  for (const std::vector<std::string>& options : std::vector<std::vector<std::string>>{
           {"rw"}, {"ro", "rw"}, {"allow_other", "rw", "ro"}, {"r\\w"}, {"\\rw"}, {"fsname=x\\"}}) {
    const Status s = CheckFuseOptions(options);
    EXPECT_FALSE(s.ok()) << options.back();
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  }
}

TEST(AbsolutePathTest, AgainstTheCurrentDirectory) {
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  const std::string here = cwd;
  EXPECT_EQ(AbsolutePath("/var/tmp"), "/var/tmp");
  EXPECT_EQ(AbsolutePath("/var//tmp/./x/../"), "/var/tmp");
  EXPECT_EQ(AbsolutePath("log.txt"), (here == "/" ? "" : here) + "/log.txt");
  EXPECT_EQ(AbsolutePath("a/../b"), (here == "/" ? "" : here) + "/b");
  EXPECT_EQ(AbsolutePath("/"), "/");
}

TEST(CheckOutsideMountTest, InsideOrSameIsRefused) {
  EXPECT_FALSE(CheckOutsideMount("--log-file", "/mnt/ckpt/log", "/mnt/ckpt").ok());
  EXPECT_FALSE(CheckOutsideMount("--spill-dir", "/mnt/ckpt", "/mnt/ckpt").ok());
  EXPECT_FALSE(CheckOutsideMount("--spill-dir", "/mnt/ckpt/a/b/c", "/mnt/ckpt").ok());
  EXPECT_TRUE(CheckOutsideMount("--log-file", "/mnt/ckpt.log", "/mnt/ckpt").ok());
  EXPECT_TRUE(CheckOutsideMount("--log-file", "/mnt/log", "/mnt/ckpt").ok());
}

TEST(FindMountTest, KnowsTheRoot) {
  const auto root = FindMount("/");
  ASSERT_TRUE(root.has_value());
  EXPECT_FALSE(root->fstype.empty());
  EXPECT_FALSE(FindMount("/no/such/mount/point").has_value());
}

// The -o spelling comes from the subcommand's own options: one added later is covered.
TEST(LongOptionsOfTest, FromTheCli11OptionList) {
  CLI::App cmd;
  std::string size, mode;
  bool flag = false;
  cmd.add_option("--cache-size", size);
  cmd.add_flag("-f,--foreground", flag);
  cmd.add_option("--zip-crc", mode)->expected(0, 1);
  cmd.add_option("SOURCE", size);
  const std::vector<LongOption> options = LongOptionsOf(cmd);
  auto find = [&](const std::string& name) -> const LongOption* {
    for (const LongOption& o : options) {
      if (o.name == name) return &o;
    }
    return nullptr;
  };
  ASSERT_NE(find("cache-size"), nullptr);
  EXPECT_TRUE(find("cache-size")->needs_value);
  ASSERT_NE(find("foreground"), nullptr);
  EXPECT_FALSE(find("foreground")->needs_value);
  ASSERT_NE(find("zip-crc"), nullptr);
  EXPECT_FALSE(find("zip-crc")->needs_value);
  EXPECT_NE(find("help"), nullptr);
  EXPECT_EQ(find("SOURCE"), nullptr);
}

const std::vector<LongOption> kMountOptions = {{"cache-size", true},
                                               {"log-file", true},
                                               {"zip-crc", false},
                                               {"foreground", false},
                                               {"model-key", true}};

std::vector<std::string> Args(const Result<MountArgs>& r) {
  return r.ok() ? r->args : std::vector<std::string>{};
}

TEST(ExpandMountArgsTest, OursBecomeLongOptionsInPlace) {
  const auto r = ExpandMountArgs({"-o", "cache_size=1G,allow_other,zip_crc", "SRC", "MNT"},
                                 kMountOptions, MountCaller::kUser);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->args, (std::vector<std::string>{"--cache-size=1G", "--zip-crc", "SRC", "MNT"}));
  EXPECT_EQ(r->fuse_options, std::vector<std::string>{"allow_other"});
  // Both spellings together, -o glued to its list, a flag given a value.
  const auto glued = ExpandMountArgs({"SRC", "--cache-size", "2G", "-ofsname=x,foreground=true"},
                                     kMountOptions, MountCaller::kUser);
  EXPECT_EQ(Args(glued),
            (std::vector<std::string>{"SRC", "--cache-size", "2G", "--foreground=true"}));
  EXPECT_EQ(glued->fuse_options, std::vector<std::string>{"fsname=x"});
}

// An empty value is a value (model_key=: every tensor), not the next argument's: CLI11
// takes `--model-key=` as a missing value, so it is passed as its own empty argument.
TEST(ExpandMountArgsTest, EmptyValueStaysAnEmptyValue) {
  const auto r = ExpandMountArgs({"-o", "model_key=,allow_other", "SRC", "MNT"}, kMountOptions,
                                 MountCaller::kUser);
  EXPECT_EQ(Args(r), (std::vector<std::string>{"--model-key", "", "SRC", "MNT"}));
  const auto key = ExpandMountArgs({"-o", "model_key=ema"}, kMountOptions, MountCaller::kUser);
  EXPECT_EQ(Args(key), std::vector<std::string>{"--model-key=ema"});
}

// mount.fuse3's command line for `SRC MNT fuse.ckptfs cache_size=64M,allow_other,nofail 0 0`.
TEST(ExpandMountArgsTest, WhatMountFuse3Passes) {
  const auto r = ExpandMountArgs({"SRC", "MNT", "-o", "rw,cache_size=64M,allow_other,dev,suid"},
                                 kMountOptions, MountCaller::kMountHelper);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->args, (std::vector<std::string>{"SRC", "MNT", "--cache-size=64M"}));
  EXPECT_EQ(r->fuse_options, (std::vector<std::string>{"allow_other", "dev", "suid"}));
  // From a user, rw stays, for CheckFuseOptions to refuse.
  const auto user = ExpandMountArgs({"-o", "rw"}, kMountOptions, MountCaller::kUser);
  ASSERT_TRUE(user.ok());
  EXPECT_FALSE(CheckFuseOptions(user->fuse_options).ok());
}

TEST(ExpandMountArgsTest, MountOnlyOptionsAreDropped) {
  const auto r = ExpandMountArgs(
      {"-o",
       "defaults,auto,noauto,nofail,_netdev,user,users,nouser,user=alice,x-systemd.automount,"
       "comment=x,ro,noatime"},
      kMountOptions, MountCaller::kUser);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->args.empty());
  EXPECT_EQ(r->fuse_options, std::vector<std::string>{"noatime"});
  EXPECT_FALSE(IsMountOnlyOption("allow_other"));
  EXPECT_FALSE(IsMountOnlyOption("nofailx"));
}

// libfuse's escapes: "\," is a comma inside a value, not a separator.
TEST(ExpandMountArgsTest, EscapedCommasStayInTheirItem) {
  const auto r = ExpandMountArgs({"-o", "fsname=a\\,b,log_file=/tmp/x\\,y"}, kMountOptions,
                                 MountCaller::kUser);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->fuse_options, std::vector<std::string>{"fsname=a\\,b"});
  EXPECT_EQ(r->args, std::vector<std::string>{"--log-file=/tmp/x,y"});
}

TEST(ExpandMountArgsTest, ValuesAndTheEndOfOptionsAreNotRead) {
  const auto r =
      ExpandMountArgs({"--log-file", "-o", "--", "-o", "x"}, kMountOptions, MountCaller::kUser);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->args, (std::vector<std::string>{"--log-file", "-o", "--", "-o", "x"}));
  EXPECT_TRUE(r->fuse_options.empty());
}

TEST(ExpandMountArgsTest, Refusals) {
  const auto no_value = ExpandMountArgs({"-o", "cache_size"}, kMountOptions, MountCaller::kUser);
  ASSERT_FALSE(no_value.ok());
  EXPECT_NE(no_value.status().message().find("cache_size"), std::string::npos);
  EXPECT_FALSE(ExpandMountArgs({"SRC", "-o"}, kMountOptions, MountCaller::kUser).ok());
}

TEST(UnknownMountOptionLineTest, SuggestsTheNearOptionOrSaysWhereTheyAre) {
  const std::vector<LongOption> ours = {{"cache-size", true}, {"zip-crc", true}, {"uid", true}};
  EXPECT_EQ(UnknownMountOptionLine("cache_sise=1G", ours),
            "-o cache_sise=1G: not a mount option of ckptfs or FUSE; did you mean -o cache_size?");
  EXPECT_NE(UnknownMountOptionLine("zipcrc=off", ours).find("did you mean -o zip_crc?"),
            std::string::npos);
  // Nothing near: no guess, and a short name is not "near" a long one by a few edits.
  for (const char* far : {"frobnicate", "ui", "x"}) {
    const std::string line = UnknownMountOptionLine(far, ours);
    EXPECT_EQ(line.find("did you mean"), std::string::npos) << line;
    EXPECT_NE(line.find(std::string("-o ") + far + ":"), std::string::npos) << line;
    EXPECT_NE(line.find("man ckptfs"), std::string::npos) << line;
  }
}

// (issue 38) A mistyped long option gets the -o form's hint; values and `--` are skipped.
TEST(UnknownLongOptionLineTest, SuggestsTheNearOption) {
  const std::vector<LongOption> ours = {
      {"cache-size", true}, {"log-file", true}, {"allow-other", false}, {"help", false}};
  EXPECT_EQ(UnknownLongOptionLine({"--cache-szie", "1G", "src", "mnt"}, ours, "ckptfs mount"),
            "--cache-szie: not an option of ckptfs mount; did you mean --cache-size?");
  EXPECT_EQ(UnknownLongOptionLine({"--cache-szie=1G"}, ours, "ckptfs mount"),
            "--cache-szie: not an option of ckptfs mount; did you mean --cache-size?");
  EXPECT_EQ(UnknownLongOptionLine({"--allow-othr"}, ours, "ckptfs mount"),
            "--allow-othr: not an option of ckptfs mount; did you mean --allow-other?");
  // A swap of neighbours is one edit: the commonest typo.
  const std::vector<LongOption> short_names = {{"json", false}, {"level", true}};
  EXPECT_EQ(UnknownLongOptionLine({"--jsno"}, short_names, "ckptfs inspect"),
            "--jsno: not an option of ckptfs inspect; did you mean --json?");
  EXPECT_EQ(UnknownLongOptionLine({"--levle", "3"}, short_names, "ckptfs pack"),
            "--levle: not an option of ckptfs pack; did you mean --level?");
  EXPECT_EQ(UnknownLongOptionLine({"--frobnicate"}, ours, "ckptfs mount"),
            "--frobnicate: not an option of ckptfs mount (see ckptfs mount --help)");
  // Known options, a value that looks like an option, and what follows `--`: no line.
  EXPECT_EQ(UnknownLongOptionLine({"--log-file", "--weird", "--allow-other", "--", "--x"}, ours,
                                  "ckptfs mount"),
            std::nullopt);
  EXPECT_EQ(UnknownLongOptionLine({"-f", "src", "-", "--cache-size=1G"}, ours, "ckptfs mount"),
            std::nullopt);
}

// (issue 38) Help text kept to 80 columns: broken at blanks, continued at the text column.
TEST(WrapHelpTest, BreaksLongLinesAtTheTextColumn) {
  const std::string option = "  --cache-size TEXT           " +
                             std::string(60, 'a').replace(10, 1, " ") + " " + std::string(30, 'b');
  const std::string wrapped = WrapHelp(option + "\nshort line\n");
  std::istringstream lines(wrapped);
  std::vector<std::string> got;
  for (std::string line; std::getline(lines, line);) got.push_back(line);
  ASSERT_EQ(got.size(), 4u) << wrapped;
  for (const std::string& line : got) EXPECT_LE(line.size(), 80u) << line;
  EXPECT_EQ(got[0].rfind("  --cache-size TEXT           aaaaaaaaaa", 0), 0u) << wrapped;
  EXPECT_EQ(got[1], std::string(30, ' ') + std::string(49, 'a'));
  EXPECT_EQ(got[2], std::string(30, ' ') + std::string(30, 'b'));
  EXPECT_EQ(got[3], "short line");
  // A paragraph with no text column continues at its own indentation.
  const std::string paragraph = WrapHelp(std::string(50, 'x') + " " + std::string(50, 'y'));
  EXPECT_EQ(paragraph, std::string(50, 'x') + "\n" + std::string(50, 'y'));
  EXPECT_EQ(WrapHelp("fits\n"), "fits\n");
}

// The help names the formats from the table: Keras and DCP too, which it used to miss.
TEST(FormatTitlesTest, EveryFormatOfTheTable) {
  const std::string titles = FormatTitles();
  for (const char* title :
       {"safetensors", "torch.save", "Keras", "DeepSpeed ZeRO", "PyTorch distributed checkpoint"}) {
    EXPECT_NE(titles.find(title), std::string::npos) << title << " not in " << titles;
  }
}

TEST(LooksLikeSourceTest, PathsUrlsAndExistingNames) {
  EXPECT_TRUE(LooksLikeSource("/data/llama"));
  EXPECT_TRUE(LooksLikeSource("s3://bucket/model/"));
  EXPECT_TRUE(LooksLikeSource("./inspect"));
  EXPECT_TRUE(LooksLikeSource("."));
  EXPECT_FALSE(LooksLikeSource("inpsect-no-such-file"));
}

TEST(LogLevelTest, ParseAndThresholds) {
  EXPECT_EQ(ParseLogLevel("error"), LogLevel::kError);
  EXPECT_EQ(ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(ParseLogLevel("verbose"), std::nullopt);
  SetLogLevels(LogLevel::kError, LogLevel::kWarn);
  EXPECT_TRUE(LogEnabled(LogLevel::kError));
  EXPECT_FALSE(LogEnabled(LogLevel::kWarn));
  SetLogLevels(LogLevel::kWarn, LogLevel::kWarn);
  EXPECT_TRUE(LogEnabled(LogLevel::kWarn));
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
}

}  // namespace
}  // namespace ckptfs

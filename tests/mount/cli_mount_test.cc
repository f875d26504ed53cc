// The command line as a user meets it (issue 11, item 8), through the real binary:
// --version/-V with the git description, the man page and bash completion the build
// makes, inspect's natural order, parameter counts and compression ratios, a pack killed
// half-way and run again, verify naming the tensors of a damaged frame, progress lines on
// a terminal (under script(1)), and umount's own messages, exit codes and -z. Issue 38:
// every --help in 80 columns naming every format, long-option typos with a hint, the
// options other FUSE mounts take, inspect/verify naming a file SOURCE, and the directory
// that keeps a user out of SOURCE.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstring>
#include <random>
#include <regex>
#include <set>

#include "mount_harness.h"

extern char** environ;

namespace ckptfs::mount_test {
namespace {

struct TensorSpec {
  std::string name;
  std::string dtype;  // F32, BF16...
  std::vector<uint64_t> shape;
};

uint64_t ElementSize(const std::string& dtype) { return dtype == "F32" ? 4 : 2; }
uint64_t Elements(const TensorSpec& t) {
  uint64_t n = 1;
  for (uint64_t d : t.shape) n *= d;
  return n;
}

// A safetensors file of `tensors` in the given order, data random (`random`) or zeros.
// Returns the header's size (8 + JSON), where tensor data starts.
uint64_t WriteSafetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                          bool random) {
  std::string json = "{";
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    const uint64_t bytes = Elements(t) * ElementSize(t.dtype);
    std::string shape;
    for (uint64_t d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    json += (json.size() > 1 ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"" +
            t.dtype + "\",\"shape\":[" + shape + "],\"data_offsets\":[" + std::to_string(offset) +
            "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  json += "}";
  while (json.size() % 8) json += ' ';
  std::string data(offset, '\0');
  std::mt19937 rng(7);
  if (random) {
    for (char& c : data) c = static_cast<char>(rng());
  }
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = json.size();
  out.write(reinterpret_cast<const char*>(&n), 8);  // little-endian hosts only
  out << json << data;
  return 8 + n;
}

// Runs argv under script(1), so that its stderr is a terminal; returns what it printed.
ProcessResult OnTerminal(const std::vector<std::string>& argv, milliseconds timeout) {
  std::string command;
  for (const std::string& a : argv) command += (command.empty() ? "'" : " '") + a + "'";
  return RunProcess({"script", "-qec", command, "/dev/null"}, timeout);
}

bool HaveProgram(const std::string& name) {
  return RunProcess({"sh", "-c", "command -v " + name}, kRefusalTimeout).exit_code == 0;
}

std::vector<std::string> DirEntries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

class CliTest : public MountFixture {};

TEST_F(CliTest, VersionNamesTheCommit) {
  const ProcessResult version = Ckptfs({"--version"}, kRefusalTimeout);
  const ProcessResult v = Ckptfs({"-V"}, kRefusalTimeout);
  ASSERT_EQ(version.exit_code, 0) << version.Describe();
  ASSERT_EQ(v.exit_code, 0) << v.Describe();
  EXPECT_EQ(version.out, v.out);
  EXPECT_TRUE(std::regex_match(version.out,
                               std::regex(R"(ckptfs \d+\.\d+\.\d+( \(git [0-9A-Za-z._-]+\))?\n)")))
      << version.out;
  // Built from a git checkout: the description is the one git gives for it.
  const ProcessResult git =
      RunProcess({"git", "-C", kSourceDir, "describe", "--always", "--dirty"}, kRefusalTimeout);
  if (git.exit_code == 0) {
    EXPECT_NE(version.out.find(" (git " + git.out.substr(0, git.out.find('\n')) + ")"),
              std::string::npos)
        << version.out << " vs git describe " << git.out;
  }
}

// The man page (docs/ckptfs.1, as the build installs it), rendered by man(1), carries
// the version of the binary and every long option that `ckptfs --help` or a command's
// --help lists, so it cannot fall behind the binary. Its width, warnings, sections and
// FILES are checked without FUSE by the unit test ManPageTest.
TEST_F(CliTest, ManPageDocumentsEveryOption) {
  if (!HaveProgram("man")) GTEST_SKIP() << "no man(1) to render the page (apt-get install man-db)";
  ASSERT_TRUE(fs::exists(CKPTFS_MAN_PAGE)) << CKPTFS_MAN_PAGE;
  const ProcessResult man =
      RunProcess({"env", "MANWIDTH=80", "MANPAGER=cat", "man", "--warnings", "-l", CKPTFS_MAN_PAGE},
                 kCheckTimeout);
  ASSERT_EQ(man.exit_code, 0) << man.Describe();
  const ProcessResult version = Ckptfs({"--version"}, kRefusalTimeout);
  std::smatch number_match;
  ASSERT_TRUE(std::regex_search(version.out, number_match, std::regex(R"(\d+\.\d+\.\d+)")));
  EXPECT_NE(man.out.find("ckptfs " + number_match.str()), std::string::npos)
      << "the page does not carry version " << number_match.str();

  std::set<std::string> options;
  const std::regex long_option(R"(--[a-z][a-z0-9-]+)");
  for (const char* command : {"", "mount", "umount", "inspect", "verify", "pack"}) {
    std::vector<std::string> args;
    if (*command) args.push_back(command);
    args.push_back("--help");
    const ProcessResult help = Ckptfs(args, kRefusalTimeout);
    ASSERT_EQ(help.exit_code, 0) << help.Describe();
    // The option column only: "  -f,--foreground    text" up to the first two spaces.
    std::istringstream help_lines(help.out);
    for (std::string line; std::getline(help_lines, line);) {
      if (line.rfind("  -", 0) != 0) continue;
      const std::string column = line.substr(0, line.find("  ", 2));
      for (std::sregex_iterator it(column.begin(), column.end(), long_option), end; it != end;
           ++it) {
        options.insert(it->str());
      }
    }
  }
  ASSERT_GT(options.size(), 30u) << "too few options read from --help";
  for (const std::string& option : options) {
    // The whole option: --cache-dir-size does not document --cache-dir.
    EXPECT_TRUE(std::regex_search(man.out, std::regex(option + "($|[^a-z0-9-])")))
        << "the man page lacks " << option;
  }
}

// Bash's completion of COMP_WORDS=(`words`) at COMP_CWORD=`cword`: what COMPREPLY holds.
ProcessResult BashComplete(const std::string& words, int cword) {
  const std::string script = "source '" + ScriptPath("completion/ckptfs.bash") + "'; COMP_WORDS=(" +
                             words + "); COMP_CWORD=" + std::to_string(cword) +
                             "; _ckptfs; echo \"${COMPREPLY[*]}\"";
  return RunProcess({"bash", "-c", script}, kCheckTimeout);
}

TEST_F(CliTest, BashCompletionOffersSubcommandsAndOptions) {
  const std::string bin = std::string("'") + kCkptfs + "'";
  ProcessResult r = BashComplete(bin + " ''", 1);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out, "mount umount inspect verify pack\n") << r.Describe();
  r = BashComplete(bin + " pa", 1);
  EXPECT_EQ(r.out, "pack\n") << r.Describe();
  r = BashComplete(bin + " umount -", 2);
  EXPECT_NE(r.out.find("--lazy"), std::string::npos) << r.Describe();
  EXPECT_NE(r.out.find("-z"), std::string::npos) << r.Describe();
  r = BashComplete(bin + " pack --f", 2);
  EXPECT_EQ(r.out, "--force --frame-size\n") << r.Describe();
}

// A run with three checkpoints, for --checkpoint's completion: checkpoint-1/ to -3/.
std::string MakeSmallRun(TempDir& scratch) {
  const std::string run = scratch.Path("run");
  const ProcessResult made = RunProcess(
      {kPython, ScriptPath("tests/mount/make_run.py"), "many", run, "3"}, kGenerateTimeout);
  EXPECT_EQ(made.exit_code, 0) << made.Describe();
  return run;
}

// Values, not file names, after an enum option (read from --help's {a,b,c}), and after
// --checkpoint latest, best and the entries of the run on the line, wherever it stands.
TEST_F(CliTest, BashCompletionOffersOptionValues) {
  const std::string bin = std::string("'") + kCkptfs + "'";
  EXPECT_EQ(BashComplete(bin + " mount --zip-crc ''", 3).out, "auto mount off\n");
  EXPECT_EQ(BashComplete(bin + " mount -v --log-level ''", 4).out, "error warn info debug\n");
  EXPECT_EQ(BashComplete(bin + " inspect --addressing v", 3).out, "virtual\n");
  EXPECT_EQ(BashComplete(bin + " mount --cache-size ''", 3).out, "\n");
  const std::string run = MakeSmallRun(*scratch_);
  ProcessResult r = BashComplete(bin + " mount --checkpoint '' '" + run + "' mnt", 3);
  EXPECT_EQ(r.out, "latest best checkpoint-1 checkpoint-2 checkpoint-3\n") << r.Describe();
  r = BashComplete(bin + " mount -o allow_other '" + run + "' mnt --checkpoint checkpoint-2", 7);
  EXPECT_EQ(r.out, "checkpoint-2\n") << r.Describe();
  // A SOURCE that is not a run: the two names alone.
  EXPECT_EQ(BashComplete(bin + " mount --checkpoint '' /nonexistent mnt", 3).out, "latest best\n");
}

// zsh's completion (completion/_ckptfs), driven for real on a pseudo-terminal: the
// subcommands, enum values, --checkpoint's run entries; and every long option a
// command's --help lists is in the script.
TEST_F(CliTest, ZshCompletion) {
  const std::string script = ReadTextFile(ScriptPath("completion/_ckptfs"));
  for (const char* command : {"mount", "umount", "inspect", "verify", "pack"}) {
    const ProcessResult help = Ckptfs({command, "--help"}, kRefusalTimeout);
    std::istringstream lines(help.out);
    for (std::string line; std::getline(lines, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, std::regex(R"(^  (?:-\w,)?(--[a-z][a-z0-9-]+))"))) continue;
      if (m[1] == "--help") continue;
      EXPECT_TRUE(std::regex_search(
          script, std::regex("'(\\([^)]*\\))?(\\{[^}]*)?" + m[1].str() + "[\\[,}]")))
          << "completion/_ckptfs lacks " << command << " " << m[1];
    }
  }
  if (!HaveProgram("zsh")) GTEST_SKIP() << "no zsh to drive (apt-get install zsh)";
  // `ckptfs` on PATH is the binary under test, as an installed one would be.
  const std::string path =
      "PATH=" + fs::path(kCkptfs).parent_path().string() + ":" + getenv("PATH");
  auto complete = [&](const std::string& line) {
    return RunProcess({"env", path, "zsh", "-f", ScriptPath("tests/mount/complete_zsh.zsh"),
                       ScriptPath("completion"), line},
                      kCheckTimeout);
  };
  const auto expect_words = [](const ProcessResult& r, const std::vector<std::string>& words) {
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    for (const std::string& word : words) {
      EXPECT_TRUE(std::regex_search(r.out, std::regex("(^|[^a-z0-9-])" + word + "($|[^a-z0-9-])")))
          << "no " << word << " offered; " << r.Describe();
    }
  };
  expect_words(complete("ckptfs "), {"mount", "umount", "inspect", "verify", "pack"});
  expect_words(complete("ckptfs mount --zip-crc "), {"auto", "mount", "off"});
  expect_words(complete("ckptfs mount --log-level "), {"error", "warn", "info", "debug"});
  const std::string run = MakeSmallRun(*scratch_);
  expect_words(complete("ckptfs mount " + run + " mnt --checkpoint "),
               {"latest", "best", "checkpoint-1", "checkpoint-3"});
}

// layers.2 before layers.10; parameters in total and per dtype; a compressed shard's
// stored size and ratio; the same in --json.
TEST_F(CliTest, InspectSortsNaturallyAndCountsParameters) {
  const std::string dir = scratch_->MakeDir("ck");
  std::vector<TensorSpec> shard1 = {{"layers.10.w", "F32", {64, 64}},
                                    {"layers.2.w", "F32", {64, 64}},
                                    {"embed", "BF16", {100, 64}}};
  std::vector<TensorSpec> shard2 = {{"layers.1.w", "F32", {64, 64}}, {"layers.11.w", "F32", {64}}};
  WriteSafetensors(dir + "/model-00001-of-00002.safetensors", shard1, /*random=*/false);
  WriteSafetensors(dir + "/model-00002-of-00002.safetensors", shard2, /*random=*/true);
  std::string map;
  for (const auto& t : shard1) map += "\"" + t.name + "\":\"model-00001-of-00002.safetensors\",";
  for (const auto& t : shard2) map += "\"" + t.name + "\":\"model-00002-of-00002.safetensors\",";
  map.pop_back();
  std::ofstream(dir + "/model.safetensors.index.json") << "{\"weight_map\":{" << map << "}}";
  // Zeros compress well: shard 1 stored as zstd.
  ASSERT_EQ(
      RunProcess({"zstd", "-q", "--rm", dir + "/model-00001-of-00002.safetensors"}, kCheckTimeout)
          .exit_code,
      0);
  const uint64_t params = 3 * 4096 + 64 + 6400;

  const ProcessResult table = Ckptfs({"inspect", dir}, kCheckTimeout);
  ASSERT_EQ(table.exit_code, 0) << table.Describe();
  const std::string& out = table.out;
  std::vector<size_t> at;
  for (const char* name : {"layers.1.w", "layers.2.w", "layers.10.w", "layers.11.w"}) {
    at.push_back(out.find(std::string("\n") + name + " "));
    ASSERT_NE(at.back(), std::string::npos) << name << " not listed:\n" << out;
  }
  EXPECT_TRUE(std::is_sorted(at.begin(), at.end())) << "not in natural order:\n" << out;
  EXPECT_NE(out.find("params   18,752\n"), std::string::npos) << out;
  EXPECT_EQ(params, 18752u);
  EXPECT_NE(out.find("F32      12,352 in 4 tensor(s), 48."), std::string::npos) << out;
  EXPECT_NE(out.find("BF16     6,400 in 1 tensor(s), 12.5 KiB"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(
      out, std::regex(R"(model-00001-of-00002\.safetensors\.zst  \S+ \S+ stored, 44\.\d KiB )"
                      R"(decoded, ratio \d+\.\d\d)")))
      << out;

  const ProcessResult json = Ckptfs({"inspect", dir, "--json"}, kCheckTimeout);
  ASSERT_EQ(json.exit_code, 0) << json.Describe();
  const std::string& j = json.out;
  EXPECT_NE(j.find("\"parameter_count\": 18752"), std::string::npos) << j;
  EXPECT_TRUE(std::regex_search(j, std::regex(R"("F32": \{\s*"bytes": 49408,\s*"parameters": )"
                                              R"(12352,\s*"tensors": 4)")))
      << j;
  EXPECT_TRUE(j.find("\"name\": \"layers.2.w\"") < j.find("\"name\": \"layers.10.w\"")) << j;
  EXPECT_NE(j.find("\"stored_as\": \"model-00001-of-00002.safetensors.zst\""), std::string::npos);
  EXPECT_TRUE(std::regex_search(j, std::regex(R"("ratio": ([2-9]\d|\d{3,})\.)"))) << j;
}

// Names come from the file: an ESC or a newline in a tensor name (JSON-escaped in the
// header) is printed escaped, so it can neither drive the terminal nor forge a table row.
TEST_F(CliTest, InspectEscapesControlCharactersInNames) {
  const std::string dir = scratch_->MakeDir("control");
  WriteSafetensors(dir + "/model.safetensors",
                   {{R"(evil\u001b[2J\nforged.row)", "F32", {4}}, {"plain", "F32", {4}}},
                   /*random=*/false);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"inspect", dir}, {"verify", dir}}) {
    const ProcessResult r = Ckptfs(args, kCheckTimeout);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    EXPECT_EQ((r.out + r.err).find('\x1b'), std::string::npos) << r.Describe();
    EXPECT_EQ(r.out.find("\nforged.row"), std::string::npos) << r.Describe();
  }
  const ProcessResult table = Ckptfs({"inspect", dir}, kCheckTimeout);
  EXPECT_NE(table.out.find(R"(evil\x1b[2J\x0aforged.row  F32)"), std::string::npos) << table.out;
}

// A pack killed with SIGKILL half-way leaves finished shards and a NAME.part; run again,
// it removes the leftover, packs everything and the result verifies. A finished pack is
// replaced only with --force, and a file pack does not write is never touched.
TEST_F(CliTest, PackKilledHalfWayCanBeRunAgain) {
  const std::string plain = scratch_->Path("plain");
  ASSERT_NO_FATAL_FAILURE(
      Generate(plain, {"--kind", "bench", "--total-bytes", "48M", "--shards", "6"}));
  const std::string dest = scratch_->Path("packed");
  // Level 19 is slow enough to catch it between shards.
  std::vector<std::string> argv = {kCkptfs, "pack", plain, dest, "--level", "19"};
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, kCkptfs, &actions, nullptr, args.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  bool caught = false;
  for (auto deadline = std::chrono::steady_clock::now() + seconds(120);
       !caught && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(milliseconds(20));
    if (!fs::exists(dest)) continue;
    const auto names = DirEntries(dest);
    const bool part = std::any_of(names.begin(), names.end(),
                                  [](const std::string& n) { return n.ends_with(".zst.part"); });
    const bool done = std::any_of(names.begin(), names.end(),
                                  [](const std::string& n) { return n.ends_with(".zst"); });
    caught = part && done;
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(caught) << "pack was never seen with a finished shard and a .part one";
  ASSERT_TRUE(WIFSIGNALED(status)) << "pack finished before it could be killed";

  // The leftovers of a killed pack: rerun, complete, sound.
  ProcessResult again = Ckptfs({"pack", plain, dest, "--frame-size", kFrameSize}, kCheckTimeout);
  ASSERT_EQ(again.exit_code, 0) << again.Describe();
  EXPECT_TRUE(std::regex_search(
      again.out,
      std::regex(
          R"(packed \d+ tensors into .*: \S+ \.\.\. \S+ \(6 shards\) and \d+ files copied, 48\.\d MiB -> )"
          R"(\S+ \S+ \(ratio \d+\.\d\d\) in \S+ s, \d+\.\d MB/s\n)")))
      << again.out;
  for (const std::string& name : DirEntries(dest)) {
    EXPECT_FALSE(name.ends_with(".part")) << name << " left in " << dest;
  }
  const ProcessResult verify = Ckptfs({"verify", dest}, kVerifyTimeout);
  EXPECT_EQ(verify.exit_code, 0) << verify.Describe();
  RunCheck("check_packed.py", {plain, dest, std::to_string(kFrameBytes)});

  // Finished: refused without --force, replaced with it.
  ExpectRefusal(Ckptfs({"pack", plain, dest}, kCheckTimeout), {dest});
  again = Ckptfs({"pack", plain, dest, "--force", "--frame-size", kFrameSize}, kCheckTimeout);
  EXPECT_EQ(again.exit_code, 0) << again.Describe();
  // Something pack does not write: refused, named, left alone, with or without --force.
  std::ofstream(dest + "/notes.txt") << "mine";
  const ProcessResult foreign = Ckptfs({"pack", plain, dest, "--force"}, kCheckTimeout);
  ExpectRefusal(foreign, {"notes.txt"});
  EXPECT_EQ(ReadTextFile(dest + "/notes.txt"), "mine");
}

// `pack FILE DEST` and `pack DIR DEST` say what they made: SOURCE as given, the shard file
// DEST now holds, what was copied, and the command that mounts DEST.
TEST_F(CliTest, PackSaysWhatItMade) {
  const std::string plain = scratch_->Path("plain");
  ASSERT_NO_FATAL_FAILURE(Generate(plain, {"--kind", "llama", "--single"}));
  const std::string file = plain + "/model.safetensors";
  const std::string one = scratch_->Path("one");
  const ProcessResult pack_file = Ckptfs({"pack", file, one}, kCheckTimeout);
  ASSERT_EQ(pack_file.exit_code, 0) << pack_file.Describe();
  EXPECT_EQ(pack_file.out.rfind(file + ": packed ", 0), 0u) << pack_file.out;
  EXPECT_NE(pack_file.out.find(" into " + one + ": model.safetensors.zst (1 shard), "),
            std::string::npos)
      << pack_file.out;
  EXPECT_NE(pack_file.out.find("\nmount it: ckptfs mount " + one + " MOUNTPOINT\n"),
            std::string::npos)
      << pack_file.out;
  EXPECT_TRUE(fs::exists(one + "/model.safetensors.zst"));

  // A thread count out of range is refused before anything is written; one is fine.
  for (const char* threads : {"-1", "1025"}) {
    const ProcessResult refused =
        Ckptfs({"pack", plain, scratch_->Path("refused"), "--threads", threads}, kCheckTimeout);
    EXPECT_EQ(refused.exit_code, 2) << refused.Describe();
    EXPECT_NE(refused.err.find(std::string("--threads ") + threads + ": not a thread count"),
              std::string::npos)
        << refused.Describe();
    EXPECT_FALSE(fs::exists(scratch_->Path("refused")));
  }

  const std::string all = scratch_->Path("all");
  const ProcessResult pack_dir = Ckptfs({"pack", plain, all, "--threads", "1"}, kCheckTimeout);
  ASSERT_EQ(pack_dir.exit_code, 0) << pack_dir.Describe();
  size_t copied = 0;
  for (const auto& entry : fs::directory_iterator(plain))
    copied += !entry.path().string().ends_with(".safetensors");
  EXPECT_NE(pack_dir.out.find("model.safetensors.zst (1 shard) and " + std::to_string(copied) +
                              " files copied, "),
            std::string::npos)
      << pack_dir.out;
}

// --zip-crc's help states its default, auto, and nothing that contradicts it: CLI11's
// printed default was once "=mount" (the value a bare --zip-crc takes).
TEST_F(CliTest, ZipCrcHelpSaysTheDefaultIsAuto) {
  const ProcessResult help = Ckptfs({"mount", "--help"}, kCheckTimeout);
  ASSERT_EQ(help.exit_code, 0) << help.Describe();
  const size_t at = help.out.find("--zip-crc");
  ASSERT_NE(at, std::string::npos) << help.out;
  const std::string entry = help.out.substr(at, help.out.find("\n  -", at) - at);
  EXPECT_NE(entry.find("{auto,mount,off} (default auto)"), std::string::npos) << entry;
  EXPECT_EQ(entry.find("=mount"), std::string::npos) << entry;
  EXPECT_EQ(entry.find("(default)"), std::string::npos) << entry;
  // A bare --zip-crc still means mount, and a wrong value is one line naming it.
  ExpectRefusal(Ckptfs({"mount", "--zip-crc", "sometimes", "SRC", "MNT"}, kRefusalTimeout),
                {"sometimes"});
}

// On a terminal pack and verify rewrite one progress line (bytes, MB/s, ETA); the final
// lines are printed either way.
TEST_F(CliTest, ProgressOnATerminal) {
  if (!HaveProgram("script")) GTEST_SKIP() << "no script(1) to give ckptfs a terminal";
  const std::string plain = scratch_->Path("plain");
  ASSERT_NO_FATAL_FAILURE(Generate(plain, {"--kind", "bench", "--total-bytes", "16M"}));
  const std::string dest = scratch_->Path("packed");
  const ProcessResult pack = OnTerminal({kCkptfs, "pack", plain, dest}, kCheckTimeout);
  ASSERT_EQ(pack.exit_code, 0) << pack.Describe();
  EXPECT_TRUE(std::regex_search(pack.out, std::regex(R"(\rpack: \S+ \S+ of 16\.\d MiB \(\d+%\), )"
                                                     R"(\d+\.\d MB/s, ETA )")))
      << pack.out;
  EXPECT_NE(pack.out.find("(ratio "), std::string::npos) << pack.out;
  const ProcessResult verify = OnTerminal({kCkptfs, "verify", dest}, kCheckTimeout);
  ASSERT_EQ(verify.exit_code, 0) << verify.Describe();
  EXPECT_TRUE(std::regex_search(verify.out, std::regex(R"(\rverify: \S+ \S+ of \S+ \S+ \(\d+%\), )"
                                                       R"(\d+\.\d MB/s)")))
      << verify.out;
  EXPECT_NE(verify.out.find(": ok ("), std::string::npos) << verify.out;
  // Not a terminal: no progress line at all.
  const ProcessResult quiet = Ckptfs({"verify", dest}, kCheckTimeout);
  EXPECT_EQ(quiet.err, "") << quiet.Describe();
}

// A damaged frame: verify's line gives the shard, the frame's byte range and exactly the
// tensors stored there, in natural order.
TEST_F(CliTest, VerifyNamesTheTensorsOfADamagedFrame) {
  const std::string plain = scratch_->MakeDir("plain");
  std::vector<TensorSpec> tensors;
  for (int i = 0; i < 12; ++i)
    tensors.push_back({"layers." + std::to_string(i) + ".w", "F32", {1000}});
  const uint64_t data_start = WriteSafetensors(plain + "/model.safetensors", tensors, true);
  const std::string dest = scratch_->Path("packed");
  ASSERT_EQ(Ckptfs({"pack", plain, dest, "--frame-size", "8K"}, kCheckTimeout).exit_code, 0);
  const std::string zst = dest + "/model.safetensors.zst";
  {
    std::fstream f(zst, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(zst) / 2));
    f.write("\xde\xad\xbe\xef\xde\xad\xbe\xef", 8);
  }
  const ProcessResult r = Ckptfs({"verify", dest}, kVerifyTimeout);
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m,
                                std::regex(R"(; bytes (\d+)-(\d+) of model\.safetensors, (\d+) )"
                                           R"(tensors?: (.*)\n)")))
      << r.Describe();
  EXPECT_EQ(LineCount(r.err), 1) << r.Describe();
  const uint64_t begin = std::stoull(m[1]), end = std::stoull(m[2]);
  std::string want;
  size_t count = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t from = data_start + 4000 * i;
    if (from < end && begin < from + 4000) {
      want += (want.empty() ? "" : ", ") + tensors[i].name;
      ++count;
    }
  }
  EXPECT_EQ(m[4].str(), want) << r.err;
  EXPECT_EQ(std::stoull(m[3]), count);
  EXPECT_GT(count, 1u);  // 8 KiB frames over 4000-byte tensors
}

// umount's own words: not mounted (2), busy (1, with the way out), and -z.
TEST_F(CliTest, UmountMessagesAndLazyUnmount) {
  const std::string source = scratch_->Path("mixed");
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");

  ProcessResult r = Ckptfs({"umount", mountpoint}, kRefusalTimeout);
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_EQ(r.err, "ckptfs: " + mountpoint + ": not mounted\n") << r.Describe();
  r = Ckptfs({"umount", scratch_->Path("missing")}, kRefusalTimeout);
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_EQ(r.err, "ckptfs: " + scratch_->Path("missing") + ": not mounted\n");

  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint));
  const int fd = ::open((mountpoint + "/config.json").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << strerror(errno);
  r = Ckptfs({"umount", mountpoint}, kMountTimeout);
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_EQ(LineCount(r.err), 1) << r.Describe();
  for (const std::string& want : {mountpoint + ": busy", std::string("fuser -vm " + mountpoint),
                                  std::string("lsof"), std::string("ckptfs umount -z")}) {
    EXPECT_NE(r.err.find(want), std::string::npos) << "no \"" << want << "\": " << r.Describe();
  }
  EXPECT_TRUE(IsMounted(mountpoint));

  // -z detaches at once; the open file still reads; the daemon ends once it is closed.
  r = Ckptfs({"umount", "-z", mountpoint}, kMountTimeout);
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.err, "");
  EXPECT_FALSE(IsMounted(mountpoint));
  char buf[16];
  EXPECT_GT(::read(fd, buf, sizeof(buf)), 0) << strerror(errno);
  ::close(fd);
  EXPECT_TRUE(WaitForNoDaemon(mountpoint, kDaemonExitTimeout))
      << "the daemon outlived its lazily unmounted mount";
}

// The titles of the format table, read from the readers' sources (`.title = "..."` in
// core/checkpoint/*_reader.cc): the help must name each, and this list cannot fall behind.
std::vector<std::string> FormatTitlesFromSource() {
  std::vector<std::string> titles;
  // An entry's own title, not its run record's (`record.title = ...`).
  const std::regex title(R"re(\n\s+\.title = "([^"]+)")re");
  for (const auto& e : fs::recursive_directory_iterator(ScriptPath("core/format"))) {
    const std::string name = e.path().filename();
    if (!name.ends_with("_reader.cc")) continue;
    const std::string text = ReadTextFile(e.path());
    for (std::sregex_iterator m(text.begin(), text.end(), title), end; m != end; ++m) {
      titles.push_back((*m)[1]);
    }
  }
  return titles;
}

// Every run of blanks and newlines as one blank: wrapped text read as one line.
std::string Unwrapped(const std::string& text) {
  return std::regex_replace(text, std::regex(R"(\s+)"), " ");
}

// (issue 38) Every command's --help fits 80 columns (the mount options ran to 300), and the
// help of each command that takes a SOURCE names every format of the format table (Keras
// and DCP were missing).
TEST_F(CliTest, HelpFitsEightyColumnsAndNamesEveryFormat) {
  const std::vector<std::string> titles = FormatTitlesFromSource();
  ASSERT_GE(titles.size(), 7u) << "too few `.title = \"...\"` in core/format/*/*_reader.cc";
  for (const std::string command : {"", "mount", "inspect", "verify", "pack", "umount"}) {
    SCOPED_TRACE("ckptfs " + command + " --help");
    std::vector<std::string> args = {"--help"};
    if (!command.empty()) args.insert(args.begin(), command);
    const ProcessResult help = Ckptfs(args, kRefusalTimeout);
    ASSERT_EQ(help.exit_code, 0) << help.Describe();
    std::istringstream lines(help.out);
    int number = 0;
    for (std::string line; std::getline(lines, line);) {
      ++number;
      EXPECT_LE(line.size(), 80u) << "line " << number << " is wider than 80 columns: " << line;
    }
    if (command == "umount") continue;
    const std::string text = Unwrapped(help.out);
    for (const std::string& title : titles) {
      EXPECT_NE(text.find(title), std::string::npos)
          << "does not name the format " << title << ":\n"
          << help.out;
    }
  }
}

// (issue 38) A mistyped long option gets the hint a mistyped -o option gets, in one line.
TEST_F(CliTest, LongOptionTypoGetsTheDidYouMeanHint) {
  const std::string source = scratch_->Path("mixed");
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  mounts_.push_back(mountpoint);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"mount", "--cache-szie", "1G", source, mountpoint}, "did you mean --cache-size?"},
      {{"mount", "--allow-othr", source, mountpoint}, "did you mean --allow-other?"},
      {{"inspect", "--jsno", source}, "did you mean --json?"},
      {{"pack", "--levle", "3", source, scratch_->Path("out")}, "did you mean --level?"},
      {{"mount", "--no-such-thing", source, mountpoint}, "see ckptfs mount --help"},
  };
  for (const auto& [args, hint] : cases) {
    SCOPED_TRACE(args[1]);
    const ProcessResult r = Ckptfs(args, kRefusalTimeout);
    ExpectRefusal(r, {args[1] + ": not an option of ckptfs " + args[0]});
    EXPECT_NE(r.err.find(hint), std::string::npos) << r.Describe();
  }
  EXPECT_FALSE(IsMounted(mountpoint));
}

// (issue 38) What other FUSE mounts take: --allow-other and --allow-root (libfuse's -o
// allow_other, allow_root), --read-only (a ckptfs mount is anyway), --foreground (-f).
TEST_F(CliTest, OptionsOtherMountsTakeAreTaken) {
  const std::string source = scratch_->Path("mixed");
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint, nullptr, {"--allow-other", "--read-only"}));
  std::string options;
  std::istringstream mounts(ReadTextFile("/proc/self/mounts"));
  for (std::string device, point, type, opts, rest; mounts >> device >> point >> type >> opts;) {
    std::getline(mounts, rest);
    if (UnescapeMountField(point) == mountpoint) options = opts;
  }
  EXPECT_NE(options.find("ro,"), std::string::npos) << options;
  EXPECT_NE(options.find("allow_other"), std::string::npos) << options;
  ASSERT_EQ(Ckptfs({"umount", mountpoint}, kMountTimeout).exit_code, 0);

  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint, nullptr, {"--allow-root"}));
  ASSERT_EQ(Ckptfs({"umount", mountpoint}, kMountTimeout).exit_code, 0);
  ExpectRefusal(
      Ckptfs({"mount", "--allow-other", "--allow-root", source, mountpoint}, kRefusalTimeout),
      {"--allow-root", "--allow-other"});
  EXPECT_FALSE(IsMounted(mountpoint));
  const ProcessResult help = Ckptfs({"mount", "--help"}, kRefusalTimeout);
  for (const std::string option :
       {"--foreground", "--allow-other", "--allow-root", "--read-only"}) {
    EXPECT_NE(help.out.find(option), std::string::npos) << option << ": " << help.Describe();
  }
}

// (issue 38) inspect and verify of one FILE name that file, not the directory it is in.
TEST_F(CliTest, InspectAndVerifyOfAFileNameTheFile) {
  const std::string file = scratch_->MakeDir("single") + "/model.safetensors";
  WriteSafetensors(file, {{"a.weight", "F32", {4, 4}}, {"b.bias", "BF16", {8}}}, true);
  const ProcessResult inspect = Ckptfs({"inspect", file}, kCheckTimeout);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.Describe();
  EXPECT_EQ(inspect.out.substr(0, inspect.out.find('\n')), "source   " + file) << inspect.out;
  const ProcessResult json = Ckptfs({"inspect", "--json", file}, kCheckTimeout);
  EXPECT_NE(json.out.find("\"source\": \"" + file + "\""), std::string::npos) << json.out;
  const ProcessResult verify = Ckptfs({"verify", file}, kVerifyTimeout);
  ASSERT_EQ(verify.exit_code, 0) << verify.Describe();
  EXPECT_EQ(verify.out.rfind(file + ": ok (", 0), 0u) << verify.Describe();
}

// (issue 38) A user kept out of SOURCE by a directory of another user (0700) is told which
// directory: it used to be a bare "Permission denied" on SOURCE.
TEST_F(CliTest, ADirectoryThatKeepsTheUserOutIsNamed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to run ckptfs as nobody";
  if (!HaveProgram("setpriv")) GTEST_SKIP() << "no setpriv(1) (util-linux)";
  constexpr uid_t kNobody = 65534;
  // The scratch directory is 0700 too: opened for the way through, so that the private
  // directory inside it is the one that blocks.
  ASSERT_EQ(::chmod(scratch_->path().c_str(), 0711), 0) << strerror(errno);
  const std::string blocked = scratch_->MakeDir("private");
  ASSERT_EQ(::chmod(blocked.c_str(), 0700), 0);
  const std::string source = blocked + "/ckpt";
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_EQ(::chown(mountpoint.c_str(), kNobody, kNobody), 0) << strerror(errno);
  mounts_.push_back(mountpoint);
  const std::vector<std::string> as_nobody = {
      "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", kCkptfs};
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"mount", source, mountpoint},
        std::vector<std::string>{"inspect", source}, std::vector<std::string>{"verify", source}}) {
    SCOPED_TRACE(args[0]);
    std::vector<std::string> argv = as_nobody;
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessResult r = RunProcess(argv, kRefusalTimeout);
    if (r.exit_code == 127 || r.err.find("setpriv:") != std::string::npos) {
      GTEST_SKIP() << "cannot run as nobody here: " << r.Describe();
    }
    ExpectRefusal(r, {source + ": permission denied: " + blocked + " (owner root, mode 0700)"});
  }
  EXPECT_FALSE(IsMounted(mountpoint));
}

}  // namespace
}  // namespace ckptfs::mount_test

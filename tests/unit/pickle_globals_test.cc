// The pickle tripwire follows Python's name resolution (issue 37): dotted names at protocol
// >= 4, _compat_pickle's renames below protocol 3, the widened families; and the
// weights_only verdict of core/encoding/pickle_globals.h.

#include "core/encoding/pickle_globals.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/encoding/pickle.h"
#include "core/encoding/weights_only.h"

namespace ckptfs {
namespace {

// A protocol 4 pickle calling STACK_GLOBAL(module, name)(), and the byte STACK_GLOBAL is at.
std::pair<std::string, size_t> StackGlobalCall(std::string_view module, std::string_view name) {
  std::string out = "\x80\x04";
  for (std::string_view s : {module, name}) {
    out += '\x8c';
    out += static_cast<char>(s.size());
    out.append(s);
  }
  const size_t at = out.size();
  out += "\x93)R.";
  return {out, at};
}

// A protocol `protocol` pickle calling GLOBAL module\nname\n(); GLOBAL at byte 2.
std::string GlobalCall(std::string_view module, std::string_view name, int protocol) {
  std::string out = {'\x80', static_cast<char>(protocol)};
  out.append("c").append(module).append("\n").append(name).append("\n)R.");
  return out;
}

std::string RefusalOf(std::string_view bytes) {
  Result<PickleTree> tree = Unpickle(bytes, "ckpt.bin");
  if (tree.ok()) return "";
  EXPECT_EQ(tree.status().code(), Status::Code::kUnsupported) << tree.status().message();
  return tree.status().message();
}

// The dotted spellings of issue 37: what find_class's attribute walk reaches.
TEST(PickleGlobals, DottedNamesAreWalkedAsPythonDoes) {
  for (auto [module, name] :
       {std::pair{"torch", "os.system"}, std::pair{"builtins", "eval.__call__"},
        std::pair{"builtins", "exec.__call__"}, std::pair{"inspect", "builtins.exec"},
        std::pair{"collections", "os.popen"}, std::pair{"torch.serialization", "torch.load"},
        std::pair{"torch", "load.__wrapped__"}, std::pair{"torch", "serialization.load"},
        std::pair{"numpy", "lib.npyio.load"}, std::pair{"logging", "os.system"},
        std::pair{"torch", "_utils.builtins.eval"}, std::pair{"omegaconf", "OmegaConf.load"},
        std::pair{"pathlib", "PosixPath.write_text"}, std::pair{"numpy", "ndarray.tofile"},
        std::pair{"torch", "Tensor.__class__.__subclasses__"},
        std::pair{"mypkg", "f.__globals__"}}) {
    SCOPED_TRACE(std::string(module) + " + " + name);
    EXPECT_TRUE(IsDeniedPickleGlobal(module, name, 4));
    const auto [bytes, at] = StackGlobalCall(module, name);
    EXPECT_EQ(RefusalOf(bytes), "ckpt.bin: data.pkl: global " + std::string(module) + "." + name +
                                    " is not allowed (byte " + std::to_string(at) + ")");
  }
}

// Judging every suffix is quadratic in the dots: a name of many is denied unjudged.
TEST(PickleGlobals, ManyDotsAreDenied) {
  EXPECT_TRUE(IsDeniedPickleGlobal("torch", std::string(1 << 20, '.'), 4));
  EXPECT_TRUE(IsDeniedPickleGlobal(std::string(1 << 20, '.'), "x", 2));
  EXPECT_FALSE(IsDeniedPickleGlobal("a.b.c", "D.E.F", 4));
}

// Python 2 names that _compat_pickle renames below protocol 3: denied there, where Python
// would import the Python 3 module; at protocol 3 Python finds no such module.
TEST(PickleGlobals, Python2NamesAreMappedBelowProtocol3) {
  for (auto [module, name] :
       {std::pair{"urllib2", "urlopen"}, std::pair{"anydbm", "open"},
        std::pair{"thread", "start_new_thread"}, std::pair{"urllib", "urlretrieve"},
        std::pair{"dumbdbm", "open"}, std::pair{"httplib", "HTTPConnection"},
        std::pair{"SocketServer", "TCPServer"}, std::pair{"cStringIO", "StringIO"},
        std::pair{"__builtin__", "intern"}, std::pair{"_winreg", "OpenKey"},
        std::pair{"Tkinter", "Tcl"}}) {
    SCOPED_TRACE(std::string(module) + "." + name);
    EXPECT_TRUE(IsDeniedPickleGlobal(module, name, 2));
    EXPECT_TRUE(IsDeniedPickleGlobal(module, name, 0));
    EXPECT_EQ(RefusalOf(GlobalCall(module, name, 2)), "ckpt.bin: data.pkl: global " +
                                                          std::string(module) + "." + name +
                                                          " is not allowed (byte 2)");
  }
  // The renames follow the protocol of the latest PROTO (0 before any, as in Python).
  EXPECT_FALSE(IsDeniedPickleGlobal("thread", "start_new_thread", 3));
  EXPECT_EQ(RefusalOf("cthread\nstart_new_thread\n)R."),
            "ckpt.bin: data.pkl: global thread.start_new_thread is not allowed (byte 0)");
  EXPECT_EQ(RefusalOf(GlobalCall("thread", "start_new_thread", 3)), "");
  EXPECT_EQ(CompatPickleName("__builtin__", "xrange", 2),
            (std::pair<std::string, std::string>("builtins", "range")));
  EXPECT_EQ(CompatPickleName("exceptions", "StandardError", 1),
            (std::pair<std::string, std::string>("builtins", "Exception")));
  EXPECT_EQ(CompatPickleName("multiprocessing", "TimeoutError", 2),
            (std::pair<std::string, std::string>("multiprocessing.context", "TimeoutError")));
  EXPECT_EQ(CompatPickleName("copy_reg", "_reconstructor", 2),
            (std::pair<std::string, std::string>("copyreg", "_reconstructor")));
  EXPECT_EQ(CompatPickleName("copy_reg", "_reconstructor", 3),
            (std::pair<std::string, std::string>("copy_reg", "_reconstructor")));
}

// Modules and functions that run commands, open or create files, import or compile code,
// or load other pickles or arrays from paths, which the list lacked.
TEST(PickleGlobals, WidenedFamiliesAreDenied) {
  for (auto [module, name] : {std::pair{"_osx_support", "_read_output"},
                              std::pair{"imaplib", "IMAP4_stream"},
                              std::pair{"torch.utils.collect_env", "run"},
                              std::pair{"logging", "FileHandler"},
                              std::pair{"logging.config", "dictConfig"},
                              std::pair{"logging.handlers", "SocketHandler"},
                              std::pair{"numpy.core.memmap", "memmap"},
                              std::pair{"numpy._core.memmap", "memmap"},
                              std::pair{"tokenize", "open"},
                              std::pair{"numpy.lib._datasource", "open"},
                              std::pair{"torch.fx.graph_module", "_forward_from_src"},
                              std::pair{"torch", "from_file"},
                              std::pair{"torch._inductor.codecache", "PyCodeCache"},
                              std::pair{"numpy.lib.format", "open_memmap"},
                              std::pair{"joblib", "load"},
                              std::pair{"yaml", "unsafe_load"},
                              std::pair{"site", "addsitedir"},
                              std::pair{"pkg_resources", "load_entry_point"},
                              std::pair{"py_compile", "compile"},
                              std::pair{"mailcap", "findmatch"},
                              std::pair{"uuid", "_get_command_stdout"},
                              std::pair{"inspect", "getattr_static"},
                              std::pair{"pandas", "read_pickle"}}) {
    SCOPED_TRACE(std::string(module) + "." + name);
    EXPECT_TRUE(IsDeniedPickleGlobal(module, name, 2));
    EXPECT_EQ(RefusalOf(GlobalCall(module, name, 2)), "ckpt.bin: data.pkl: global " +
                                                          std::string(module) + "." + name +
                                                          " is not allowed (byte 2)");
  }
}

// What checkpoints name, at every protocol, dotted (a nested class) or Python 2 spelled.
TEST(PickleGlobals, LegitNamesStillPass) {
  for (auto [module, name] :
       {std::pair{"collections", "OrderedDict"},
        std::pair{"torch._utils", "_rebuild_tensor_v2"},
        std::pair{"torch", "FloatStorage"},
        std::pair{"torch.serialization", "_get_layout"},
        std::pair{"argparse", "Namespace"},
        std::pair{"types", "SimpleNamespace"},
        std::pair{"pathlib", "PosixPath"},
        std::pair{"numpy.core.multiarray", "_reconstruct"},
        std::pair{"numpy.core.multiarray", "scalar"},
        std::pair{"numpy", "dtype"},
        std::pair{"__builtin__", "set"},
        std::pair{"copy_reg", "_reconstructor"},
        std::pair{"mypkg.config", "Trainer.Config"},
        std::pair{"mypkg", "types.SimpleNamespace"},
        std::pair{"my.os", "system"},
        std::pair{"logging", "Logger"},
        std::pair{"omegaconf.dictconfig", "DictConfig"},
        std::pair{"torch.distributed.checkpoint.metadata", "TensorProperties"},
        std::pair{"transformers.training_args", "TrainingArguments"},
        std::pair{"lightning_fabric.utilities.data", "AttributeDict"},
        std::pair{"torch", "loader"},
        std::pair{"mypkg", "profile"}}) {
    for (uint32_t protocol : {0u, 2u, 4u, 5u}) {
      EXPECT_FALSE(IsDeniedPickleGlobal(module, name, protocol))
          << module << " + " << name << " at protocol " << protocol;
    }
  }
}

TEST(PickleGlobals, TreeRecordsNamesAndOpcodes) {
  Result<PickleTree> tree = Unpickle(
      "\x80\x02"
      "ccollections\nOrderedDict\n)R"
      "cargparse\nNamespace\n)R"
      "ccollections\n"
      "OrderedDict\n)R\x87.",
      "ckpt.bin");
  ASSERT_TRUE(tree.ok()) << tree.status().message();
  const PickleNames& names = tree->names;
  ASSERT_EQ(names.globals.size(), 2u);
  EXPECT_EQ(names.globals[0], (std::pair<std::string, std::string>("collections", "OrderedDict")));
  EXPECT_EQ(names.globals[1], (std::pair<std::string, std::string>("argparse", "Namespace")));
  EXPECT_TRUE(names.opcodes['c'] && names.opcodes[0x80] && names.opcodes[0x87]);
  EXPECT_FALSE(names.opcodes[0x8c]);
}

PickleNames Names(std::initializer_list<std::pair<std::string, std::string>> globals,
                  std::string_view opcodes =
                      "\x80"
                      "cq)R}(Xu.") {
  PickleNames out;
  out.globals.assign(globals.begin(), globals.end());
  for (char op : opcodes) out.opcodes.set(static_cast<uint8_t>(op));
  return out;
}

TEST(PickleGlobals, WeightsOnlyVerdictFollowsTorchsAllowlist) {
  const WeightsOnlyVerdict plain =
      WeightsOnlyVerdictOf(Names({{"collections", "OrderedDict"},
                                  {"torch._utils", "_rebuild_tensor_v2"},
                                  {"torch", "FloatStorage"},
                                  {"torch", "bfloat16"},
                                  {"torch.nn.parameter", "Parameter"},
                                  {"__builtin__", "set"},
                                  {"torch.cuda", "HalfStorage"},
                                  {"torch.cuda.sparse", "FloatTensor"}}));
  EXPECT_TRUE(plain.loads);
  EXPECT_EQ(WeightsOnlyLine(plain), "would load");
  EXPECT_EQ(WeightsOnlyJson(plain), R"({"loads":true,"globals":[],"opcodes":[]})");

  const WeightsOnlyVerdict odd = WeightsOnlyVerdictOf(Names({{"collections", "OrderedDict"},
                                                             {"argparse", "Namespace"},
                                                             {"numpy.core.multiarray", "scalar"},
                                                             {"numpy", "dtype"},
                                                             {"torch.sparse", "BoolTensor"},
                                                             {"os", "getcwd"}},
                                                            "\x80\x8c\x93\x94\x95."));
  EXPECT_FALSE(odd.loads);
  EXPECT_EQ(odd.globals,
            (std::vector<std::string>{"argparse.Namespace", "numpy.core.multiarray.scalar",
                                      "numpy.dtype", "os.getcwd", "torch.sparse.BoolTensor"}));
  EXPECT_EQ(odd.opcodes,
            (std::vector<std::string>{"SHORT_BINUNICODE", "STACK_GLOBAL", "MEMOIZE", "FRAME"}));
  EXPECT_EQ(WeightsOnlyLine(odd),
            "would refuse: argparse.Namespace, numpy.core.multiarray.scalar, numpy.dtype, "
            "os.getcwd, torch.sparse.BoolTensor, opcode SHORT_BINUNICODE, opcode STACK_GLOBAL, "
            "opcode MEMOIZE, opcode FRAME");

  // Bounded, and no control byte reaches a terminal.
  PickleNames many;
  for (int i = 0; i < 25; ++i) many.globals.emplace_back("m", "C" + std::to_string(100 + i));
  many.globals.emplace_back("evil\x1b[2J", "x");
  const std::string line = WeightsOnlyLine(WeightsOnlyVerdictOf(many));
  EXPECT_TRUE(line.ends_with("m.C118 and 6 more")) << line;
  EXPECT_EQ(line.find('\x1b'), std::string::npos);
  EXPECT_TRUE(line.starts_with("would refuse: evil\\x1b[2J.x, m.C100")) << line;

  WeightsOnlyVerdict merged = plain;
  MergeWeightsOnlyVerdict(merged, odd);
  EXPECT_FALSE(merged.loads);
  EXPECT_EQ(merged.globals, odd.globals);
}

TEST(PickleGlobals, WeightsOnlyAllowlistSpelledOut) {
  for (std::string_view name :
       {"torch.Tensor", "torch.Size", "torch.device", "collections.Counter", "_codecs.encode",
        "builtins.bytearray", "builtins.complex", "torch.float8_e4m3fn", "torch.uint3",
        "torch.storage.UntypedStorage", "torch.QUInt4x2Storage", "torch.cuda.BoolTensor",
        "torch._utils._rebuild_parameter_with_state", "torch._tensor._rebuild_from_type_v2",
        "torch.per_channel_affine"}) {
    EXPECT_TRUE(IsWeightsOnlyAllowed(name)) << name;
  }
  for (std::string_view name :
       {"builtins.getattr", "builtins.dict", "torch.load", "torch.sparse.BoolTensor",
        "torch.cuda.QInt8Storage", "torch.sparse.FloatStorage", "torch.FloatStorage.x",
        "numpy.core.multiarray._reconstruct", "argparse.Namespace", "torch", ""}) {
    EXPECT_FALSE(IsWeightsOnlyAllowed(name)) << name;
  }
}

// (issue 38) getattr(CLASS, 'NAME') is only a name where NAME is in capitals (an enum
// member, as Python 3.11.0-3.11.6 pickle one) and the walk CLASS.NAME is not denied; the
// unpickler then reads it as data.
TEST(PickleGlobals, GetattrOfAnEnumMemberInCapitals) {
  EXPECT_TRUE(IsEnumMemberGetattr("__main__.Phase", "TRAIN"));
  EXPECT_TRUE(IsEnumMemberGetattr("mytrain.config.Split", "VAL_2"));
  for (const char* name : {"Train", "train", "system", "__globals__", "_TRAIN", "", "A.B"}) {
    EXPECT_FALSE(IsEnumMemberGetattr("__main__.Phase", name)) << name;
  }
  EXPECT_FALSE(IsEnumMemberGetattr("Phase", "TRAIN"));      // not a global's "module.name"
  EXPECT_FALSE(IsEnumMemberGetattr("os.environ", "PATH"));  // os is denied whatever follows
  EXPECT_FALSE(IsEnumMemberGetattr("builtins.eval", "X"));  // under a denied global
  using namespace std::string_literals;
  std::string pickle =
      "\x80\x02"
      "cbuiltins\ngetattr\nc__main__\nPhase\nX\x05\x00\x00\x00TRAIN\x86R."s;
  EXPECT_TRUE(Unpickle(pickle, "ckpt.pt").ok());
  pickle.replace(pickle.find("TRAIN"), 5, "Train");
  EXPECT_FALSE(Unpickle(pickle, "ckpt.pt").ok());
}

}  // namespace
}  // namespace ckptfs

// Unpickle over real pickles (python's pickle module and torch.save, captured as hex) and
// over hand-made hostile ones.
#include "core/encoding/pickle.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "core/encoding/torch_file.h"

namespace ckptfs {
namespace {

using std::string_view_literals::operator""sv;

// Captured with /usr/bin/python3 (3.11) and torch 1.13:
//   shared = [1, 2]; selfref = []; selfref.append(selfref)
//   obj = {'ints': [0, 1, -1, 255, 256, 65535, 65536, -129, 2**31-1, -2**31, 2**31,
//                   2**63-1, -2**63],
//          'floats': [1.5, -0.25, 1e300, float('inf')], 'str': 'h\u00e9llo \u2713 \\ \n end',
//          'misc': (True, False, None), 'nested': ([1, (2, 3)], (), [], {}),
//          'p': shared, 'q': shared, 'self': selfref, 7: 'int key'}
//   kPythonProtocolN = pickle.dumps(obj, protocol=N)
//   kBytesProtocol3 = pickle.dumps({'b': b'\x00\xff'}, protocol=3)
//   kSetsProtocol4 = pickle.dumps({'b': b'\x00\xff', 's': {1, 2}, 'fs': frozenset({3})}, 4)
//   kByteArrayProtocol5 = pickle.dumps({'ba': bytearray(b'ab')}, protocol=5)
//   t = torch.arange(6, dtype=torch.float32).reshape(2, 3); t2 = torch.tensor([1, 2])
//   torch.save(collections.OrderedDict(a=t, b=t2, c=t), 'x.bin')  -> kTorchTiedTensors
//   torch.save(torch.nn.Linear(2, 2).state_dict(), 'sd.bin')      -> kTorchLinearStateDict
// (the data.pkl record of each zip; torch 1.13 names the zip's folder after the file, so
// it is x/data.pkl, not archive/data.pkl).
constexpr std::string_view kPythonProtocol0 =
    "286470300a56696e74730a70310a286c70320a49300a6149310a61492d310a61493235350a61493235360a61"
    "4936353533350a614936353533360a61492d3132390a6149323134373438333634370a61492d323134373438"
    "333634380a614c323134373438333634384c0a614c393232333337323033363835343737353830374c0a614c"
    "2d393232333337323033363835343737353830384c0a617356666c6f6174730a70330a286c70340a46312e35"
    "0a61462d302e32350a614631652b3330300a6146696e660a6173567374720a70350a5668e96c6c6f205c7532"
    "373133205c7530303563205c753030306120656e640a70360a73566d6973630a70370a284930310a4930300a"
    "4e7470380a73566e65737465640a70390a28286c7031300a49310a612849320a49330a747031310a61287428"
    "6c7031320a28647031330a747031340a7356700a7031350a286c7031360a49310a6149320a617356710a7031"
    "370a6731360a735673656c660a7031380a286c7031390a6731390a617349370a56696e74206b65790a703230"
    "0a732e";
constexpr std::string_view kPythonProtocol1 =
    "7d7100285804000000696e747371015d7102284b004b014affffffff4bff4d00014dffff4a000001004a7fff"
    "ffff4affffff7f4a000000804c323134373438333634384c0a4c393232333337323033363835343737353830"
    "374c0a4c2d393232333337323033363835343737353830384c0a655806000000666c6f61747371035d710428"
    "473ff800000000000047bfd0000000000000477e37e43c8800759c477ff00000000000006558030000007374"
    "727105581200000068c3a96c6c6f20e29c93205c200a20656e64710658040000006d6973637107284930310a"
    "4930300a4e74710858060000006e65737465647109285d710a284b01284b024b0374710b65295d710c7d710d"
    "74710e580100000070710f5d7110284b014b026558010000007171116810580400000073656c6671125d7113"
    "6813614b075807000000696e74206b65797114752e";
constexpr std::string_view kPythonProtocol2 =
    "80027d7100285804000000696e747371015d7102284b004b014affffffff4bff4d00014dffff4a000001004a"
    "7fffffff4affffff7f4a000000808a0500000080008a08ffffffffffffff7f8a080000000000000080655806"
    "000000666c6f61747371035d710428473ff800000000000047bfd0000000000000477e37e43c8800759c477f"
    "f00000000000006558030000007374727105581200000068c3a96c6c6f20e29c93205c200a20656e64710658"
    "040000006d697363710788894e87710858060000006e65737465647109285d710a284b014b024b0386710b65"
    "295d710c7d710d74710e580100000070710f5d7110284b014b02655801000000717111681058040000007365"
    "6c6671125d71136813614b075807000000696e74206b65797114752e";
constexpr std::string_view kPythonProtocol3 =
    "80037d7100285804000000696e747371015d7102284b004b014affffffff4bff4d00014dffff4a000001004a"
    "7fffffff4affffff7f4a000000808a0500000080008a08ffffffffffffff7f8a080000000000000080655806"
    "000000666c6f61747371035d710428473ff800000000000047bfd0000000000000477e37e43c8800759c477f"
    "f00000000000006558030000007374727105581200000068c3a96c6c6f20e29c93205c200a20656e64710658"
    "040000006d697363710788894e87710858060000006e65737465647109285d710a284b014b024b0386710b65"
    "295d710c7d710d74710e580100000070710f5d7110284b014b02655801000000717111681058040000007365"
    "6c6671125d71136813614b075807000000696e74206b65797114752e";
constexpr std::string_view kPythonProtocol4 =
    "800495ef000000000000007d94288c04696e7473945d94284b004b014affffffff4bff4d00014dffff4a0000"
    "01004a7fffffff4affffff7f4a000000808a0500000080008a08ffffffffffffff7f8a080000000000000080"
    "658c06666c6f617473945d9428473ff800000000000047bfd0000000000000477e37e43c8800759c477ff000"
    "0000000000658c03737472948c1268c3a96c6c6f20e29c93205c200a20656e64948c046d6973639488894e87"
    "948c066e657374656494285d94284b014b024b03869465295d947d9474948c0170945d94284b014b02658c01"
    "719468108c0473656c66945d946813614b078c07696e74206b657994752e";
constexpr std::string_view kPythonProtocol5 =
    "800595ef000000000000007d94288c04696e7473945d94284b004b014affffffff4bff4d00014dffff4a0000"
    "01004a7fffffff4affffff7f4a000000808a0500000080008a08ffffffffffffff7f8a080000000000000080"
    "658c06666c6f617473945d9428473ff800000000000047bfd0000000000000477e37e43c8800759c477ff000"
    "0000000000658c03737472948c1268c3a96c6c6f20e29c93205c200a20656e64948c046d6973639488894e87"
    "948c066e657374656494285d94284b014b024b03869465295d947d9474948c0170945d94284b014b02658c01"
    "719468108c0473656c66945d946813614b078c07696e74206b657994752e";
constexpr std::string_view kBytesProtocol3 = "80037d71005801000000627101430200ff7102732e";
constexpr std::string_view kSetsProtocol4 =
    "80049524000000000000007d94288c016294430200ff948c0173948f94284b014b02908c02667394284b0391"
    "94752e";
constexpr std::string_view kByteArrayProtocol5 =
    "80059515000000000000007d948c02626194960200000000000000616294732e";
constexpr std::string_view kTorchTiedTensors =
    "800263636f6c6c656374696f6e730a4f726465726564446963740a7100295271012858010000006171026374"
    "6f7263682e5f7574696c730a5f72656275696c645f74656e736f725f76320a71032828580700000073746f72"
    "616765710463746f7263680a466c6f617453746f726167650a71055801000000307106580300000063707571"
    "074b06747108514b004b024b038671094b034b0186710a8968002952710b74710c52710d580100000062710e"
    "68032828680463746f7263680a4c6f6e6753746f726167650a710f580100000031711068074b02747111514b"
    "004b028571124b01857113896800295271147471155271165801000000637117680d752e";
constexpr std::string_view kTorchLinearStateDict =
    "800263636f6c6c656374696f6e730a4f726465726564446963740a7100295271012858060000007765696768"
    "74710263746f7263682e5f7574696c730a5f72656275696c645f74656e736f725f76320a7103282858070000"
    "0073746f72616765710463746f7263680a466c6f617453746f726167650a7105580100000030710658030000"
    "0063707571074b04747108514b004b024b028671094b024b0186710a8968002952710b74710c52710d580400"
    "000062696173710e6803282868046805580100000031710f68074b02747110514b004b028571114b01857112"
    "89680029527113747114527115757d711658090000005f6d6574616461746171176800295271185800000000"
    "71197d711a580700000076657273696f6e711b4b01737373622e";

std::string FromHex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  }
  return out;
}

Result<PickleTree> Load(std::string_view bytes) { return Unpickle(bytes, "ckpt.bin"); }

PickleTree LoadOk(std::string_view bytes) {
  Result<PickleTree> tree = Load(bytes);
  EXPECT_TRUE(tree.ok()) << tree.status().message();
  return tree.ok() ? std::move(tree).value() : PickleTree{};
}

// The error of a pickle that must be refused; "" if it was accepted.
std::string ErrorOf(std::string_view bytes, Status::Code code) {
  Result<PickleTree> tree = Load(bytes);
  if (tree.ok()) return "";
  EXPECT_EQ(tree.status().code(), code) << tree.status().message();
  return tree.status().message();
}
std::string CorruptionOf(std::string_view bytes) {
  return ErrorOf(bytes, Status::Code::kCorruption);
}
std::string RefusalOf(std::string_view bytes) { return ErrorOf(bytes, Status::Code::kUnsupported); }

// The value of `key` (a str) in the dict `dict`, or UINT32_MAX.
uint32_t Find(const PickleTree& tree, uint32_t dict, std::string_view key) {
  const PickleValue& d = tree.at(dict);
  EXPECT_EQ(d.kind, PickleKind::kDict);
  for (size_t i = 0; i + 1 < d.items.size(); i += 2) {
    const PickleValue& k = tree.at(d.items[i]);
    if (k.kind == PickleKind::kString && k.text == key) return d.items[i + 1];
  }
  ADD_FAILURE() << "no key " << key;
  return UINT32_MAX;
}

// The int values of a list/tuple/set of ints.
std::vector<int64_t> Ints(const PickleTree& tree, uint32_t seq) {
  std::vector<int64_t> out;
  for (uint32_t item : tree.at(seq).items) {
    EXPECT_EQ(tree.at(item).kind, PickleKind::kInt);
    out.push_back(tree.at(item).int_value);
  }
  return out;
}

// Every item, state and root index points into the arena; total items stay below the input
// size (each item was pushed by at least one byte).
void ExpectSane(const PickleTree& tree, size_t input_size) {
  ASSERT_LT(tree.root, tree.values.size());
  EXPECT_LE(tree.values.size(), input_size);
  size_t items = 0;
  for (const PickleValue& v : tree.values) {
    for (uint32_t item : v.items) ASSERT_LT(item, tree.values.size());
    if (v.state != PickleValue::kNoState) {
      ASSERT_LT(v.state, tree.values.size());
    }
    items += v.items.size();
  }
  EXPECT_LE(items, input_size);
}

TEST(PickleGlobals, DenylistNamesWhatRunsOpensOrEvaluates) {
  // Each family of pickle.h's list: processes, files and network, imports and code,
  // builtins, and the loaders of torch and numpy; submodules with their module.
  for (auto [module, name] : {std::pair{"os", "system"},
                              std::pair{"os.path", "join"},
                              std::pair{"posix", "system"},
                              std::pair{"nt", "system"},
                              std::pair{"subprocess", "Popen"},
                              std::pair{"sys", "modules"},
                              std::pair{"shutil", "rmtree"},
                              std::pair{"socket", "socket"},
                              std::pair{"importlib", "import_module"},
                              std::pair{"importlib.util", "find_spec"},
                              std::pair{"runpy", "run_path"},
                              std::pair{"pickle", "loads"},
                              std::pair{"_pickle", "loads"},
                              std::pair{"marshal", "loads"},
                              std::pair{"code", "interact"},
                              std::pair{"types", "CodeType"},
                              std::pair{"ctypes", "CDLL"},
                              std::pair{"multiprocessing", "Process"},
                              std::pair{"signal", "signal"},
                              std::pair{"io", "open"},
                              std::pair{"tempfile", "mkstemp"},
                              std::pair{"pty", "spawn"},
                              std::pair{"webbrowser", "open"},
                              std::pair{"operator", "attrgetter"},
                              std::pair{"timeit", "timeit"},
                              std::pair{"pydoc", "locate"},
                              std::pair{"builtins", "eval"},
                              std::pair{"builtins", "exec"},
                              std::pair{"builtins", "compile"},
                              std::pair{"builtins", "open"},
                              std::pair{"builtins", "getattr"},
                              std::pair{"builtins", "__import__"},
                              std::pair{"builtins", "globals"},
                              std::pair{"builtins", "locals"},
                              std::pair{"builtins", "vars"},
                              std::pair{"builtins", "setattr"},
                              std::pair{"builtins", "delattr"},
                              std::pair{"builtins", "input"},
                              std::pair{"builtins", "breakpoint"},
                              std::pair{"__builtin__", "eval"},
                              std::pair{"__builtin__", "execfile"},
                              std::pair{"__builtin__", "apply"},
                              std::pair{"torch", "load"},
                              std::pair{"torch.hub", "load"},
                              std::pair{"torch.jit", "load"},
                              std::pair{"_posixsubprocess", "fork_exec"},
                              std::pair{"zipfile", "ZipFile"},
                              std::pair{"sqlite3", "connect"},
                              std::pair{"torch.storage", "_load_from_bytes"},
                              std::pair{"torch.serialization", "load"},
                              std::pair{"numpy", "load"},
                              std::pair{"numpy", "fromfile"},
                              std::pair{"numpy.lib.npyio", "load"},
                              std::pair{"codecs", "open"}}) {
    EXPECT_TRUE(IsDeniedPickleGlobal(module, name)) << module << "." << name;
  }
  // Data: what checkpoints hold, and names that only look like denied ones.
  for (auto [module, name] : {std::pair{"collections", "OrderedDict"},
                              std::pair{"torch._utils", "_rebuild_tensor_v2"},
                              std::pair{"torch", "FloatStorage"},
                              std::pair{"torch.serialization", "_get_layout"},
                              std::pair{"argparse", "Namespace"},
                              std::pair{"types", "SimpleNamespace"},
                              std::pair{"pathlib", "PosixPath"},
                              std::pair{"numpy.core.multiarray", "_reconstruct"},
                              std::pair{"numpy", "dtype"},
                              std::pair{"builtins", "set"},
                              std::pair{"__builtin__", "set"},
                              std::pair{"builtins", "frozenset"},
                              std::pair{"_codecs", "encode"},
                              std::pair{"transformers.training_args", "TrainingArguments"},
                              std::pair{"osmium", "Thing"},
                              std::pair{"my.os", "system"},
                              std::pair{"posixpath", "join"},
                              std::pair{"torch", "float16"},
                              std::pair{"torch", "loader"},
                              std::pair{"", ""}}) {
    EXPECT_FALSE(IsDeniedPickleGlobal(module, name)) << module << "." << name;
  }
  EXPECT_FALSE(IsDeniedPickleGlobal("torch", std::string(1 << 20, 'x')));
  EXPECT_TRUE(IsDeniedPickleGlobal(std::string(1 << 20, 'x') + ".os", "x") == false);
}

// One refusal per opcode that names a global, the byte the global's opcode starts at.
TEST(PickleGlobals, DeniedGlobalsAreRefusedWithTheirByte) {
  for (std::string_view full :
       {"os.system", "subprocess.check_output", "sys.exit", "shutil.rmtree",
        "socket.create_connection", "importlib.import_module", "runpy.run_module", "pickle.loads",
        "marshal.loads", "builtins.eval", "builtins.exec", "builtins.compile", "builtins.open",
        "builtins.__import__", "builtins.getattr", "ctypes.CDLL", "types.FunctionType", "io.FileIO",
        "tempfile.mktemp"}) {
    const size_t dot = full.rfind('.');
    const std::string module(full.substr(0, dot)), name(full.substr(dot + 1));
    if (full == "builtins.getattr") {  // named, then refused where it is called
      EXPECT_EQ(RefusalOf(std::string("\x80\x02") + "cbuiltins\ngetattr\n)R."),
                "ckpt.bin: data.pkl: builtins.getattr is allowed only as getattr("
                "deepspeed.runtime.zero.config.ZeroStageEnum, 'name') or getattr(CLASS, 'NAME') "
                "(byte 21)");
      continue;
    }
    // GLOBAL at byte 2, called: refused before the call.
    EXPECT_EQ(RefusalOf(std::string("\x80\x02") + "c" + module + "\n" + name + "\n)R."),
              "ckpt.bin: data.pkl: global " + std::string(full) + " is not allowed (byte 2)")
        << full;
    // INST at byte 1, after its MARK.
    EXPECT_EQ(RefusalOf("(i" + module + "\n" + name + "\n."),
              "ckpt.bin: data.pkl: global " + std::string(full) + " is not allowed (byte 1)")
        << full;
  }
}

TEST(PickleProtocols, PythonDictAtEveryProtocol) {
  const std::string_view pickles[] = {kPythonProtocol0, kPythonProtocol1, kPythonProtocol2,
                                      kPythonProtocol3, kPythonProtocol4, kPythonProtocol5};
  for (size_t p = 0; p < std::size(pickles); ++p) {
    SCOPED_TRACE("protocol " + std::to_string(p));
    const std::string bytes = FromHex(pickles[p]);
    const PickleTree t = LoadOk(bytes);
    if (t.values.empty()) continue;
    ExpectSane(t, bytes.size());
    const PickleValue& root = t.at(t.root);
    ASSERT_EQ(root.kind, PickleKind::kDict);
    ASSERT_EQ(root.items.size(), 18u);

    EXPECT_EQ(Ints(t, Find(t, t.root, "ints")),
              (std::vector<int64_t>{0, 1, -1, 255, 256, 65535, 65536, -129, INT32_MAX, INT32_MIN,
                                    int64_t{1} << 31, INT64_MAX, INT64_MIN}));

    const PickleValue& floats = t.at(Find(t, t.root, "floats"));
    ASSERT_EQ(floats.items.size(), 4u);
    EXPECT_EQ(t.at(floats.items[0]).float_value, 1.5);
    EXPECT_EQ(t.at(floats.items[1]).float_value, -0.25);
    EXPECT_EQ(t.at(floats.items[2]).float_value, 1e300);
    EXPECT_EQ(t.at(floats.items[3]).float_value, std::numeric_limits<double>::infinity());

    const PickleValue& str = t.at(Find(t, t.root, "str"));
    EXPECT_EQ(str.kind, PickleKind::kString);
    EXPECT_EQ(str.text, "h\xc3\xa9llo \xe2\x9c\x93 \\ \n end");

    const PickleValue& misc = t.at(Find(t, t.root, "misc"));
    ASSERT_EQ(misc.kind, PickleKind::kTuple);
    ASSERT_EQ(misc.items.size(), 3u);
    EXPECT_EQ(t.at(misc.items[0]).kind, PickleKind::kBool);
    EXPECT_EQ(t.at(misc.items[0]).int_value, 1);
    EXPECT_EQ(t.at(misc.items[1]).kind, PickleKind::kBool);
    EXPECT_EQ(t.at(misc.items[1]).int_value, 0);
    EXPECT_EQ(t.at(misc.items[2]).kind, PickleKind::kNone);

    const PickleValue& nested = t.at(Find(t, t.root, "nested"));
    ASSERT_EQ(nested.kind, PickleKind::kTuple);
    ASSERT_EQ(nested.items.size(), 4u);
    const PickleValue& inner = t.at(nested.items[0]);
    ASSERT_EQ(inner.kind, PickleKind::kList);
    ASSERT_EQ(inner.items.size(), 2u);
    EXPECT_EQ(Ints(t, inner.items[1]), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(t.at(inner.items[1]).kind, PickleKind::kTuple);
    EXPECT_EQ(t.at(nested.items[1]).kind, PickleKind::kTuple);
    EXPECT_EQ(t.at(nested.items[2]).kind, PickleKind::kList);
    EXPECT_EQ(t.at(nested.items[3]).kind, PickleKind::kDict);
    EXPECT_TRUE(t.at(nested.items[3]).items.empty());

    // One list reached twice is one value; a list holding itself holds its own index.
    EXPECT_EQ(Find(t, t.root, "p"), Find(t, t.root, "q"));
    EXPECT_EQ(Ints(t, Find(t, t.root, "p")), (std::vector<int64_t>{1, 2}));
    const uint32_t self = Find(t, t.root, "self");
    EXPECT_EQ(t.at(self).items, std::vector<uint32_t>{self});

    EXPECT_EQ(t.at(root.items[16]).kind, PickleKind::kInt);
    EXPECT_EQ(t.at(root.items[16]).int_value, 7);
    EXPECT_EQ(t.at(root.items[17]).text, "int key");
  }
}

TEST(PickleProtocols, BytesSetsAndByteArrays) {
  PickleTree t = LoadOk(FromHex(kBytesProtocol3));
  EXPECT_EQ(t.at(Find(t, t.root, "b")).kind, PickleKind::kBytes);
  EXPECT_EQ(t.at(Find(t, t.root, "b")).text, std::string("\0\xff", 2));

  t = LoadOk(FromHex(kSetsProtocol4));
  EXPECT_EQ(t.at(Find(t, t.root, "b")).text, std::string("\0\xff", 2));
  EXPECT_EQ(t.at(Find(t, t.root, "s")).kind, PickleKind::kSet);
  EXPECT_EQ(Ints(t, Find(t, t.root, "s")), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(t.at(Find(t, t.root, "fs")).kind, PickleKind::kSet);
  EXPECT_EQ(Ints(t, Find(t, t.root, "fs")), (std::vector<int64_t>{3}));

  t = LoadOk(FromHex(kByteArrayProtocol5));
  EXPECT_EQ(t.at(Find(t, t.root, "ba")).kind, PickleKind::kBytes);
  EXPECT_EQ(t.at(Find(t, t.root, "ba")).text, "ab");
}

TEST(PickleProtocols, Python3BytesAndSetsBeforeTheirProtocolAreCalls) {
  // Below protocol 3 python writes bytes as _codecs.encode(str, 'latin1'), and below 4 a
  // set as __builtin__.set([...]): inert calls, for the interpreter to read.
  const PickleTree bytes = LoadOk(FromHex(
      "8002635f636f646563730a656e636f64650a710058020000006162710158060000006c6174696e317102867103"
      "5271042e"));
  ASSERT_EQ(bytes.at(bytes.root).kind, PickleKind::kCall);
  EXPECT_EQ(bytes.at(bytes.at(bytes.root).items[0]).text, "_codecs.encode");
  const PickleTree set =
      LoadOk(FromHex("8002635f5f6275696c74696e5f5f0a7365740a71005d7101284b014b02658571025271032e"));
  ASSERT_EQ(set.at(set.root).kind, PickleKind::kCall);
  EXPECT_EQ(set.at(set.at(set.root).items[0]).text, "__builtin__.set");
}

TEST(PickleProtocols, IntegersBeyond64BitsAreRefused) {
  // pickle.dumps(2**63, protocol=p): text LONG for 0 and 1, LONG1 from 2 on.
  for (std::string_view hex :
       {"4c393232333337323033363835343737353830384c0a2e", "80028a090000000000000080002e",
        "8004950c000000000000008a090000000000000080002e"}) {
    EXPECT_NE(CorruptionOf(FromHex(hex)).find("integer too large"), std::string::npos) << hex;
  }
  EXPECT_NE(CorruptionOf("L-9223372036854775809L\n."sv).find("integer too large"),
            std::string::npos);
  EXPECT_NE(CorruptionOf("I99999999999999999999\n."sv).find("integer too large"),
            std::string::npos);
  // LONG1 as python reads it: any width, two's complement, sign-extended bytes allowed.
  EXPECT_EQ(LoadOk(std::string("\x8a\x00.", 3)).values[0].int_value, 0);
  EXPECT_EQ(LoadOk("\x8a\x09" + std::string(9, '\xff') + ".").values[0].int_value, -1);
  EXPECT_EQ(
      LoadOk("\x8a\x09" + std::string(7, '\xff') + std::string("\x7f\x00.", 3)).values[0].int_value,
      INT64_MAX);
  EXPECT_EQ(LoadOk("\x8a\x09" + std::string(7, '\0') + "\x80\xff.").values[0].int_value, INT64_MIN);
  EXPECT_NE(CorruptionOf("\x8a\x09" + std::string(7, '\0') + std::string("\x80\x00.", 3)), "");
  EXPECT_NE(CorruptionOf("\x8a\x0a" + std::string(8, '\xff') + "\x00\xff."), "");
}

TEST(PickleProtocols, TextOpcodesOfProtocolZero) {
  PickleTree t = LoadOk("S'a\\x00b\\n\\'q\\101\\z'\np0\n."sv);
  EXPECT_EQ(t.at(t.root).kind, PickleKind::kBytes);
  EXPECT_EQ(t.at(t.root).text, std::string("a\0b\n'qA\\z", 9));
  t = LoadOk("S\"x\"\n."sv);
  EXPECT_EQ(t.at(t.root).text, "x");
  // raw-unicode-escape: latin-1 bytes, \u and \U escapes, an even run of backslashes is
  // literal.
  t = LoadOk("Vab\\u00e9\\U0001F600\xe9\\\\u0041\\x\n."sv);
  EXPECT_EQ(t.at(t.root).kind, PickleKind::kString);
  EXPECT_EQ(t.at(t.root).text, "ab\xc3\xa9\xf0\x9f\x98\x80\xc3\xa9\\\\u0041\\x");
  t = LoadOk("I01\n."sv);
  EXPECT_EQ(t.at(t.root).kind, PickleKind::kBool);
  EXPECT_EQ(t.at(t.root).int_value, 1);
  EXPECT_EQ(LoadOk("I00\n."sv).values[0].kind, PickleKind::kBool);
  EXPECT_EQ(LoadOk("I-12\n."sv).values[0].int_value, -12);
  EXPECT_EQ(LoadOk("L-5L\n."sv).values[0].int_value, -5);
  EXPECT_EQ(LoadOk("L5\n."sv).values[0].int_value, 5);
  EXPECT_EQ(LoadOk("F-1.5\n."sv).values[0].float_value, -1.5);
  EXPECT_TRUE(std::isnan(LoadOk("Fnan\n."sv).values[0].float_value));
  EXPECT_EQ(LoadOk("K\x07r\x00\x00\x01\x00"
                   "0j\x00\x00\x01\x00."sv)
                .values.size(),
            1u);

  EXPECT_NE(CorruptionOf("S'abc\n."sv), "");
  EXPECT_NE(CorruptionOf("S'ab\\x4'\n."sv), "");
  EXPECT_NE(CorruptionOf("V\\u12\n."sv), "");
  EXPECT_NE(RefusalOf("V\\ud800\n."sv), "");
  EXPECT_NE(CorruptionOf("I12x\n."sv), "");
  EXPECT_NE(CorruptionOf("F1.5.5\n."sv), "");
  EXPECT_NE(CorruptionOf("p-1\n."sv), "");
}

TEST(PickleTorch, TiedTensorsInAnOrderedDict) {
  const std::string bytes = FromHex(kTorchTiedTensors);
  const PickleTree t = LoadOk(bytes);
  ASSERT_FALSE(t.values.empty());
  ExpectSane(t, bytes.size());
  // OrderedDict() followed by SETITEMS: the state dict is a dict.
  ASSERT_EQ(t.at(t.root).kind, PickleKind::kDict);
  ASSERT_EQ(t.at(t.root).items.size(), 6u);
  const uint32_t a = Find(t, t.root, "a");
  EXPECT_EQ(Find(t, t.root, "c"), a);  // tied: one value, reached twice

  const PickleValue& call = t.at(a);
  ASSERT_EQ(call.kind, PickleKind::kCall);
  ASSERT_EQ(call.items.size(), 2u);
  EXPECT_EQ(t.at(call.items[0]).kind, PickleKind::kGlobal);
  EXPECT_EQ(t.at(call.items[0]).text, "torch._utils._rebuild_tensor_v2");
  EXPECT_EQ(call.state, PickleValue::kNoState);

  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, hooks)
  const PickleValue& args = t.at(call.items[1]);
  ASSERT_EQ(args.kind, PickleKind::kTuple);
  ASSERT_EQ(args.items.size(), 6u);
  const PickleValue& storage = t.at(args.items[0]);
  ASSERT_EQ(storage.kind, PickleKind::kPersistent);
  ASSERT_EQ(storage.items.size(), 1u);
  const PickleValue& pid = t.at(storage.items[0]);
  ASSERT_EQ(pid.kind, PickleKind::kTuple);
  ASSERT_EQ(pid.items.size(), 5u);
  EXPECT_EQ(t.at(pid.items[0]).text, "storage");
  EXPECT_EQ(t.at(pid.items[1]).kind, PickleKind::kGlobal);
  EXPECT_EQ(t.at(pid.items[1]).text, "torch.FloatStorage");
  EXPECT_EQ(t.at(pid.items[2]).text, "0");
  EXPECT_EQ(t.at(pid.items[3]).text, "cpu");
  EXPECT_EQ(t.at(pid.items[4]).int_value, 6);
  EXPECT_EQ(t.at(args.items[1]).int_value, 0);
  EXPECT_EQ(Ints(t, args.items[2]), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Ints(t, args.items[3]), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(t.at(args.items[4]).kind, PickleKind::kBool);
  EXPECT_EQ(t.at(args.items[5]).kind, PickleKind::kDict);  // backward hooks: OrderedDict()
  EXPECT_TRUE(t.at(args.items[5]).items.empty());

  const PickleValue& b = t.at(Find(t, t.root, "b"));
  ASSERT_EQ(b.kind, PickleKind::kCall);
  EXPECT_EQ(b.items[0], call.items[0]);  // the memoized global, fetched again
  const PickleValue& b_pid = t.at(t.at(t.at(b.items[1]).items[0]).items[0]);
  EXPECT_EQ(t.at(b_pid.items[0]).text, "storage");
  EXPECT_EQ(t.at(b_pid.items[1]).text, "torch.LongStorage");
  EXPECT_EQ(t.at(b_pid.items[2]).text, "1");
  EXPECT_EQ(t.at(b_pid.items[4]).int_value, 2);
}

TEST(PickleTorch, StateDictMetadataIsTheBuildState) {
  const PickleTree t = LoadOk(FromHex(kTorchLinearStateDict));
  ASSERT_FALSE(t.values.empty());
  const PickleValue& root = t.at(t.root);
  ASSERT_EQ(root.kind, PickleKind::kDict);
  EXPECT_EQ(t.at(root.items[0]).text, "weight");
  EXPECT_EQ(t.at(root.items[2]).text, "bias");
  // module.state_dict() carries its _metadata attribute, set by BUILD on the OrderedDict.
  ASSERT_NE(root.state, PickleValue::kNoState);
  const uint32_t metadata = Find(t, root.state, "_metadata");
  const uint32_t version = Find(t, Find(t, metadata, ""), "version");
  EXPECT_EQ(t.at(version).int_value, 1);
}

TEST(PickleHostile, DisallowedGlobalsNameThemselves) {
  EXPECT_EQ(RefusalOf("\x80\x02"
                      "cos\nsystem\n(S'echo hi'\ntR."sv),
            "ckpt.bin: data.pkl: global os.system is not allowed (byte 2)");
  EXPECT_EQ(RefusalOf("cposix\nsystem\n(S'echo hi'\ntR."sv),
            "ckpt.bin: data.pkl: global posix.system is not allowed (byte 0)");
  EXPECT_EQ(RefusalOf("\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93."sv),
            "ckpt.bin: data.pkl: global os.system is not allowed (byte 16)");
  EXPECT_EQ(RefusalOf("\x80\x04\x8c\x08\x62uiltins\x8c\x04\x65val\x93."sv),
            "ckpt.bin: data.pkl: global builtins.eval is not allowed (byte 18)");
  // Control bytes are not copied into the message.
  EXPECT_EQ(RefusalOf("cos.\x1b\nsystem\n."sv),
            "ckpt.bin: data.pkl: global os.?.system is not allowed (byte 0)");
  // STACK_GLOBAL takes two str values, not bytes.
  EXPECT_NE(CorruptionOf("C\x05torchC\x04Size\x93."sv), "");
  EXPECT_NE(CorruptionOf("K\x01K\x02\x93."sv), "");
  EXPECT_EQ(LoadOk("\x8c\x05torch\x8c\x04Size\x93."sv).values.back().text, "torch.Size");
}

TEST(PickleHostile, RefusedOpcodesAreNamed) {
  EXPECT_EQ(RefusalOf("(S'ls'\nios\nsystem\n."sv),
            "ckpt.bin: data.pkl: global os.system is not allowed (byte 7)");
  EXPECT_EQ(RefusalOf("(cos\nsystem\nS'ls'\no."sv),
            "ckpt.bin: data.pkl: global os.system is not allowed (byte 1)");
  EXPECT_NE(RefusalOf("\x82\x01."sv).find("(EXT1)"), std::string::npos);
  EXPECT_NE(RefusalOf("\x83\x01\x00."sv).find("(EXT2)"), std::string::npos);
  EXPECT_NE(RefusalOf("\x84\x01\x00\x00\x00."sv).find("(EXT4)"), std::string::npos);
  EXPECT_NE(RefusalOf("P0\n."sv).find("(PERSID)"), std::string::npos);
  EXPECT_NE(RefusalOf("\x97."sv).find("(NEXT_BUFFER)"), std::string::npos);
  EXPECT_NE(RefusalOf("C\x01x\x98."sv).find("(READONLY_BUFFER)"), std::string::npos);
  EXPECT_EQ(RefusalOf("N\xff."sv),
            "ckpt.bin: data.pkl: opcode 0xff (unknown) is not supported (byte 1)");
  EXPECT_NE(RefusalOf("\x80\x06N."sv), "");  // protocol 6 does not exist yet
}

TEST(PickleHostile, EveryTruncationIsAnError) {
  for (std::string_view hex : {kTorchTiedTensors, kTorchLinearStateDict, kPythonProtocol0,
                               kPythonProtocol2, kPythonProtocol5, kSetsProtocol4}) {
    const std::string bytes = FromHex(hex);
    for (size_t n = 0; n < bytes.size(); ++n) {
      Result<PickleTree> tree = Load(std::string_view(bytes).substr(0, n));
      EXPECT_FALSE(tree.ok()) << n;
      EXPECT_EQ(tree.status().code(), Status::Code::kCorruption) << tree.status().message();
    }
  }
}

TEST(PickleHostile, StackAndMarkMisuse) {
  EXPECT_EQ(CorruptionOf("."sv), "ckpt.bin: data.pkl: stack underflow (byte 0)");
  EXPECT_EQ(CorruptionOf(""sv), "ckpt.bin: data.pkl: truncated: no STOP (byte 0)");
  EXPECT_EQ(CorruptionOf("N"sv), "ckpt.bin: data.pkl: truncated: no STOP (byte 1)");
  EXPECT_EQ(CorruptionOf("(N."sv), "ckpt.bin: data.pkl: STOP inside an unclosed MARK (byte 2)");
  EXPECT_EQ(CorruptionOf("N.N"sv), "ckpt.bin: data.pkl: trailing bytes after STOP (byte 2)");
  EXPECT_EQ(CorruptionOf("1N."sv), "ckpt.bin: data.pkl: MARK missing (byte 0)");
  EXPECT_NE(CorruptionOf("Nt."sv), "");
  EXPECT_NE(CorruptionOf("0."sv), "");
  EXPECT_NE(CorruptionOf("2."sv), "");
  EXPECT_NE(CorruptionOf("N\x85\x86."sv), "");
  EXPECT_NE(CorruptionOf("]N(a."sv), "");  // APPEND may not reach under a MARK
  EXPECT_NE(CorruptionOf("](N\x86."sv), "");
  EXPECT_NE(CorruptionOf("(q\x00."sv), "");                   // PUT with nothing above the mark
  EXPECT_EQ(LoadOk("(0N."sv).at(0).kind, PickleKind::kNone);  // POP drops an empty mark
  EXPECT_EQ(LoadOk("NN."sv).values.size(), 2u);  // python ignores what STOP leaves under
}

TEST(PickleHostile, MemoAndMutationMisuse) {
  EXPECT_EQ(CorruptionOf("h\x05."sv), "ckpt.bin: data.pkl: memo entry 5 was never set (byte 0)");
  EXPECT_NE(CorruptionOf("j\x00\x00\x01\x00."sv), "");
  EXPECT_NE(CorruptionOf("g3\n."sv), "");
  EXPECT_EQ(CorruptionOf("K\x01}b."sv), "ckpt.bin: data.pkl: BUILD on int (byte 3)");
  EXPECT_NE(CorruptionOf("cmy\nC\n}b."sv), "");  // on a class
  EXPECT_EQ(LoadOk("]}b."sv).at(0).state, 1u);   // a list subclass's attributes
  EXPECT_NE(CorruptionOf("\x80\x04"
                         "cmy\nC\n)K\x01\x92."sv),
            "");                                              // kwargs not a dict
  EXPECT_NE(CorruptionOf("(o."sv), "");                       // OBJ without a class
  EXPECT_NE(CorruptionOf("cmy\nC\n)\x81(K\x01\x90."sv), "");  // ADDITEMS onto an object
  EXPECT_EQ(CorruptionOf("}K\x01"
                         "a."sv),
            "ckpt.bin: data.pkl: APPEND onto dict (byte 3)");
  EXPECT_NE(CorruptionOf(")(K\x01"
                         "e."sv),
            "");
  EXPECT_NE(CorruptionOf("]NNs."sv), "");
  EXPECT_NE(CorruptionOf("}(K\x01u."sv), "");  // odd SETITEMS
  EXPECT_NE(CorruptionOf("(K\x01"
                         "d."sv),
            "");  // odd DICT
  EXPECT_NE(CorruptionOf("](K\x01\x90."sv), "");
  EXPECT_NE(RefusalOf("K\x01)R."sv), "");                  // only globals are called
  EXPECT_NE(CorruptionOf("ctorch\nSize\nK\x01R."sv), "");  // arguments must be a tuple
  EXPECT_NE(RefusalOf("]K\x01\x85\x81."sv), "");
}

TEST(PickleHostile, DepthAndHugeLengths) {
  const std::string deep = std::string(kMaxPickleDepth, '(') + std::string(kMaxPickleDepth, 't');
  EXPECT_EQ(LoadOk(deep + ".").values.size(), kMaxPickleDepth);
  EXPECT_NE(CorruptionOf("(" + deep + "t.").find("MARKs nested too deep"), std::string::npos);

  // Lengths near 2^63 and 2^64 must fail the bounds check, not wrap a pointer.
  for (char top : {'\x7f', '\x80', '\xff'}) {
    for (char op : {'\x8d', '\x8e', '\x96'}) {  // BINUNICODE8, BINBYTES8, BYTEARRAY8
      EXPECT_NE(
          CorruptionOf(std::string(1, op) + std::string(7, '\xff') + top + ".").find("truncated"),
          std::string::npos);
    }
    EXPECT_NE(CorruptionOf("\x95" + std::string(7, '\xff') + top + "N."), "");  // FRAME
  }
  EXPECT_NE(CorruptionOf("X\xff\xff\xff\xff."sv), "");
  EXPECT_NE(CorruptionOf("B\xff\xff\xff\xff."sv), "");
  EXPECT_NE(CorruptionOf("\x8b\xff\xff\xff\x7f."sv), "");  // LONG4, 2 GiB
  EXPECT_NE(CorruptionOf("\x8b\xff\xff\xff\xff."sv).find("negative"), std::string::npos);
  EXPECT_NE(CorruptionOf("T\xff\xff\xff\xff."sv).find("negative"), std::string::npos);
  EXPECT_NE(CorruptionOf("cos\nsystem"sv), "");  // GLOBAL line without its newline
}

TEST(PickleHostile, InvalidUtf8) {
  EXPECT_EQ(CorruptionOf("X\x02\x00\x00\x00\xc3\x28."sv),
            "ckpt.bin: data.pkl: string is not valid UTF-8 (byte 0)");
  EXPECT_NE(CorruptionOf("\x8c\x03\xed\xa0\x80."sv), "");      // surrogate
  EXPECT_NE(CorruptionOf("\x8c\x02\xc0\x80."sv), "");          // overlong NUL
  EXPECT_NE(CorruptionOf("\x8c\x04\xf4\x90\x80\x80."sv), "");  // above U+10FFFF
  EXPECT_NE(CorruptionOf("\x8c\x01\xe2."sv), "");
  EXPECT_EQ(LoadOk("\x8c\x04\xf0\x9f\x98\x80."sv).values[0].text, "\xf0\x9f\x98\x80");
  EXPECT_EQ(LoadOk("C\x02\xc3\x28."sv).values[0].kind, PickleKind::kBytes);  // bytes: anything
}

TEST(PickleSemantics, RepeatedDictKeysKeepFirstPositionLastValue) {
  const PickleTree t = LoadOk("}(K\x01K\x0aK\x02K\x14K\x01K\x1eu."sv);
  EXPECT_EQ(Ints(t, t.root), (std::vector<int64_t>{1, 30, 2, 20}));
  // Equal strings are equal keys even when they are different values.
  const PickleTree s = LoadOk("}(\x8c\x01xK\x01\x8c\x01yK\x02\x8c\x01xK\x03u\x8c\x01yK\x04s."sv);
  ASSERT_EQ(s.at(s.root).items.size(), 4u);
  EXPECT_EQ(s.at(s.at(s.root).items[1]).int_value, 3);
  EXPECT_EQ(s.at(s.at(s.root).items[3]).int_value, 4);
  // Containers are keys by identity: two empty tuples are two keys.
  EXPECT_EQ(LoadOk("}()K\x01)K\x02u."sv).values[0].items.size(), 4u);
  // Sets keep one of each.
  EXPECT_EQ(Ints(LoadOk("\x8f(K\x01K\x02K\x01\x90(K\x02K\x03\x90."sv), 0),
            (std::vector<int64_t>{1, 2, 3}));
}

TEST(PickleSemantics, MemoHoldsReferences) {
  // l = []; t = (l, l); l.append(5): the tuple sees the append through both references.
  const PickleTree t = LoadOk(
      "]q\x00(h\x00h\x00tq\x01"
      "0h\x00K\x05"
      "a0h\x01."sv);
  const PickleValue& tuple = t.at(t.root);
  ASSERT_EQ(tuple.kind, PickleKind::kTuple);
  ASSERT_EQ(tuple.items.size(), 2u);
  EXPECT_EQ(tuple.items[0], tuple.items[1]);
  EXPECT_EQ(Ints(t, tuple.items[0]), (std::vector<int64_t>{5}));
  // DUP pushes the same list, not a copy.
  EXPECT_EQ(Ints(LoadOk("]2K\x01"
                        "a."sv),
                 0),
            (std::vector<int64_t>{1}));
  // Indices python never writes still work, and MEMOIZE counts entries, not the top index.
  EXPECT_EQ(LoadOk("K\x01p18446744073709551615\n0g18446744073709551615\n."sv).values.size(), 1u);
  const PickleTree m = LoadOk("K\x01q\x05K\x02\x94h\x05h\x01."sv);
  EXPECT_EQ(m.at(m.root).int_value, 2);
  EXPECT_EQ(m.at(0).int_value, 1);
  // MEMOIZE numbers entries as they come.
  EXPECT_EQ(LoadOk("\x80\x04K\x01\x94K\x02\x94h\x00."sv).values.size(), 2u);
}

TEST(PickleSemantics, CallsAndBuild) {
  // NEWOBJ of a global, then BUILD: the state lands on the call.
  const PickleTree t = LoadOk("ctorch.nn.parameter\nParameter\n)\x81}b."sv);
  const PickleValue& call = t.at(t.root);
  ASSERT_EQ(call.kind, PickleKind::kCall);
  EXPECT_EQ(t.at(call.items[0]).text, "torch.nn.parameter.Parameter");
  EXPECT_EQ(t.at(call.items[1]).kind, PickleKind::kTuple);
  ASSERT_NE(call.state, PickleValue::kNoState);
  EXPECT_EQ(t.at(call.state).kind, PickleKind::kDict);
  // OrderedDict with arguments stays a call for the caller to judge.
  EXPECT_EQ(LoadOk("ccollections\nOrderedDict\n]\x85R."sv).values.back().kind, PickleKind::kCall);
}

// The opcodes python writes for objects, each an inert call: INST and OBJ (protocols 0
// and 1), NEWOBJ_EX (keyword-only __new__ arguments), BUILD on any object, slotstate, and
// SETITEMS / APPENDS onto a dict or list subclass.
TEST(PickleSemantics, ObjectsOfAnyClass) {
  // INST: MARK, args, "i module\nname\n".
  PickleTree t = LoadOk("(K\x01K\x02imy.mod\nPoint\n}b."sv);
  const PickleValue* call = &t.at(t.root);
  ASSERT_EQ(call->kind, PickleKind::kCall);
  EXPECT_EQ(t.at(call->items[0]).text, "my.mod.Point");
  ASSERT_EQ(t.at(call->items[1]).items.size(), 2u);
  EXPECT_EQ(t.at(t.at(call->items[1]).items[1]).int_value, 2);
  EXPECT_EQ(t.at(call->state).kind, PickleKind::kDict);
  // OBJ: MARK, class, args, "o".
  t = LoadOk("(cmy.mod\nPoint\nK\x07o."sv);
  call = &t.at(t.root);
  ASSERT_EQ(call->kind, PickleKind::kCall);
  EXPECT_EQ(t.at(call->items[0]).text, "my.mod.Point");
  EXPECT_EQ(t.at(t.at(call->items[1]).items[0]).int_value, 7);
  // NEWOBJ_EX: cls, args, kwargs; then a (None, slots) state.
  t = LoadOk(
      "\x80\x04\x8c\x06my.mod\x8c\x05Point\x93)}\x92N}\x8c\x01x\x94K\x03s\x86"
      "b."sv);
  call = &t.at(t.root);
  ASSERT_EQ(call->kind, PickleKind::kCall);
  ASSERT_EQ(call->items.size(), 3u);
  EXPECT_EQ(t.at(call->items[2]).kind, PickleKind::kDict);
  ASSERT_NE(call->state, PickleValue::kNoState);
  EXPECT_EQ(t.at(call->state).items.size(), 2u);
  // A dict subclass: SETITEMS land in the object's contents.
  t = LoadOk(
      "cmy\nAttrDict\n)\x81(X\x01\x00\x00\x00"
      "aK\x01u."sv);
  call = &t.at(t.root);
  ASSERT_NE(call->contents, PickleValue::kNoState);
  EXPECT_EQ(t.at(Find(t, call->contents, "a")).int_value, 1);
  // A list subclass: APPENDS likewise.
  t = LoadOk(
      "cmy\nL\n)\x81(K\x01K\x02"
      "e."sv);
  ASSERT_NE(t.at(t.root).contents, PickleValue::kNoState);
  EXPECT_EQ(t.at(t.at(t.root).contents).items.size(), 2u);
  // Verbatim bytes remember where they lie; escaped ones do not.
  t = LoadOk(
      "\x80\x03"
      "C\x02"
      "ab."sv);
  EXPECT_EQ(t.at(t.root).int_value, 5);  // 1 + offset 4
  EXPECT_EQ(LoadOk("S'ab'\n."sv).at(0).int_value, 0);
}

TEST(PickleSemantics, NoOpcodeCopiesWithoutBound) {
  // DUP and GET floods push indices: one value however many references.
  const std::string dups = "]" + std::string(100000, '2') + ".";
  EXPECT_EQ(LoadOk(dups).values.size(), 1u);
  std::string gets(std::string_view("]q\x00", 3));
  for (int i = 0; i < 50000; ++i) gets += "h\x00"sv;
  EXPECT_EQ(LoadOk(gets + ".").values.size(), 1u);
  // A 256 KiB key set 50000 times through the memo: hashed once, so this is fast.
  std::string big = "\x8d" + std::string("\x00\x00\x04\x00\x00\x00\x00\x00", 8) +
                    std::string(256 << 10, 'k') +
                    std::string(
                        "q\x00"
                        "0",
                        3);
  std::string sets = "}";
  for (int i = 0; i < 50000; ++i) sets += std::string("h\x00K\x01s", 5);
  const std::string bytes = big + sets + ".";
  const PickleTree t = LoadOk(bytes);
  ExpectSane(t, bytes.size());
  EXPECT_EQ(t.at(t.root).items.size(), 2u);
}

// A list of `n` small ints, as pickle writes [i % 200 for i in range(n)]: BININT1 (2 bytes
// each), APPENDS in batches of 1000.
std::string SmallInts(size_t n) {
  std::string p = "\x80\x02]";
  for (size_t i = 0; i < n; ++i) {
    if (i % 1000 == 0) p += '(';
    p += 'K';
    p += static_cast<char>(i % 200);
    if (i % 1000 == 999 || i + 1 == n) p += 'e';
  }
  return p + ".";
}

// The tree's memory is charged to a MetadataBudget as it is built: 32 times the pickle plus
// 64 MiB. 7.8 MiB of pickled ints (4M values of ~100 bytes) took 485 MiB; 4M ints (7.6 MiB)
// are refused once the tree would pass 32 x 7.6 MiB + 64 MiB, in one line naming the file.
TEST(PickleMemory, MillionsOfSmallIntsAreRefusedPastTheBudget) {
  const std::string ints = SmallInts(4'000'000);
  const std::string error = RefusalOf(ints);
  EXPECT_NE(error.find("ckpt.bin: data.pkl: unpickling would take more than " +
                       std::to_string(32 * ints.size() + (64 << 20)) + " bytes of memory (32 " +
                       "times its " + std::to_string(ints.size()) + " bytes plus 64 MiB)"),
            std::string::npos)
      << error;
}

// What the budget leaves alone: a list of 200k ints (0.4 MiB of pickle, ~20 MiB of tree,
// within the fixed 64 MiB), and torch state dicts, ~20 times their pickle: 100k tensors in
// the most compact pickle there is (ckptfs's own merged pytorch_model.bin, memo references
// for every repeated value: 85 bytes a tensor; torch.save writes more).
TEST(PickleMemory, OrdinaryPicklesAreUnaffected) {
  EXPECT_EQ(LoadOk(SmallInts(200'000)).values.size(), 200'001u);
  const std::vector<uint64_t> shape{64, 64}, stride{64, 1};
  std::vector<std::string> names;
  std::vector<TorchPickleEntry> entries;
  for (int i = 0; i < 100'000; ++i) names.push_back("model.layers." + std::to_string(i) + ".w");
  for (int i = 0; i < 100'000; ++i) {
    entries.push_back({names[i], Dtype::kF32, static_cast<uint64_t>(i), 4096, 0, shape, stride});
  }
  const std::string state_dict = BuildTorchPickle(entries);
  EXPECT_GT(state_dict.size(), 8'000'000u);  // the fixed part is small beside 32 x this
  const PickleTree tree = LoadOk(state_dict);
  EXPECT_EQ(tree.at(tree.root).items.size(), 2 * entries.size());
}

// DeepSpeed mode. Captured with /usr/bin/python3 (3.11), numpy 1.24 and the stand-in package
// tests/deepspeed/deepspeed (module names as DeepSpeed's), protocol 2 as torch.save uses:
//   kDeepSpeedObjects = dumps({'stage': ZeroStageEnum.gradients, 'scaler':
//       LossScaler(scale=1.0), 'frag': fragment_address(numel=3, start=5), 'names': {'a'},
//       'args': argparse.Namespace(lr=0.5)})        (3.11 pickles the enum by getattr)
//   kStageByValue = dumps({'stage': ZeroStageEnum.gradients}) with copyreg reducing it to
//       ZeroStageEnum(2), as other Pythons do
//   kNumpyState = dumps({'numpy': state, 'loss': np.float64(0.25)}), state =
//       np.random.RandomState(1).get_state() with its key array cut to 2 entries
constexpr std::string_view kDeepSpeedObjects =
    "80027d710028580500000073746167657101635f5f6275696c74696e5f5f0a676574617474720a71026364656570"
    "73706565642e72756e74696d652e7a65726f2e636f6e6669670a5a65726f5374616765456e756d0a7103580900"
    "00006772616469656e7473710486710552710658060000007363616c65727107636465657073706565642e7275"
    "6e74696d652e667031362e6c6f73735f7363616c65720a4c6f73735363616c65720a7108298171097d710a2858"
    "090000006375725f7363616c65710b473ff0000000000000580700000064796e616d6963710c89756258040000"
    "0066726167710d636465657073706565642e7574696c732e74656e736f725f667261676d656e740a667261676d"
    "656e745f616464726573730a710e2981710f7d71102858050000006e756d656c71114b03580500000073746172"
    "7471124b05756258050000006e616d65737113635f5f6275696c74696e5f5f0a7365740a71145d711558010000"
    "006171166185711752711858040000006172677371196361726770617273650a4e616d6573706163650a711a29"
    "81711b7d711c58020000006c72711d473fe00000000000007362752e";
constexpr std::string_view kStageByValue =
    "80027d7100580500000073746167657101636465657073706565642e72756e74696d652e7a65726f2e636f6e66"
    "69670a5a65726f5374616765456e756d0a71024b02857103527104732e";
constexpr std::string_view kNumpyState =
    "80027d71002858050000006e756d707971012858070000004d5431393933377102636e756d70792e636f72652e"
    "6d756c746961727261790a5f7265636f6e7374727563740a7103636e756d70790a6e6461727261790a71044b00"
    "857105635f636f646563730a656e636f64650a7106580100000062710758060000006c6174696e31710886710952"
    "710a87710b52710c284b014b0285710d636e756d70790a64747970650a710e58020000007534710f8988877110"
    "527111284b0358010000003c71124e4e4e4affffffff4affffffff4b007471136289680658090000000100000066"
    "c289076c71146808867115527116747117624d70024b0047000000000000000074711858040000006c6f737371"
    "19636e756d70792e636f72652e6d756c746961727261790a7363616c61720a711a680e58020000006638711b89"
    "8887711c52711d284b0368124e4e4e4affffffff4affffffff4b0074711e6268065809000000000000000000c3"
    "903f711f6808867120527121867122527123752e";

Result<PickleTree> LoadDeepSpeed(std::string_view bytes) {
  return Unpickle(bytes, "ckpt.pt", PickleGlobals::kDeepSpeed);
}

TEST(PickleDeepSpeed, DeepSpeedObjectsAreInertCalls) {
  const std::string bytes = FromHex(kDeepSpeedObjects);
  // Both modes read it alike.
  EXPECT_EQ(LoadOk(bytes).values.size(), LoadDeepSpeed(bytes)->values.size());
  Result<PickleTree> tree = LoadDeepSpeed(bytes);
  ASSERT_TRUE(tree.ok()) << tree.status().message();
  ExpectSane(*tree, bytes.size());
  const PickleValue& stage = tree->at(Find(*tree, tree->root, "stage"));
  ASSERT_EQ(stage.kind, PickleKind::kCall);
  EXPECT_EQ(tree->at(stage.items[0]).text, "__builtin__.getattr");
  const PickleValue& args = tree->at(stage.items[1]);
  ASSERT_EQ(args.items.size(), 2u);
  EXPECT_EQ(tree->at(args.items[0]).text, "deepspeed.runtime.zero.config.ZeroStageEnum");
  EXPECT_EQ(tree->at(args.items[1]).text, "gradients");
  // NEWOBJ + BUILD: the call keeps its state, a dict.
  const PickleValue& scaler = tree->at(Find(*tree, tree->root, "scaler"));
  ASSERT_EQ(scaler.kind, PickleKind::kCall);
  EXPECT_EQ(tree->at(scaler.items[0]).text, "deepspeed.runtime.fp16.loss_scaler.LossScaler");
  ASSERT_NE(scaler.state, PickleValue::kNoState);
  EXPECT_EQ(tree->at(Find(*tree, scaler.state, "cur_scale")).float_value, 1.0);
  const PickleValue& frag = tree->at(Find(*tree, tree->root, "frag"));
  EXPECT_EQ(tree->at(Find(*tree, frag.state, "numel")).int_value, 3);
  EXPECT_EQ(tree->at(Find(*tree, frag.state, "start")).int_value, 5);
  const PickleValue& names = tree->at(Find(*tree, tree->root, "names"));
  EXPECT_EQ(tree->at(names.items[0]).text, "__builtin__.set");
  const PickleValue& ns = tree->at(Find(*tree, tree->root, "args"));
  EXPECT_EQ(tree->at(ns.items[0]).text, "argparse.Namespace");
  EXPECT_EQ(tree->at(Find(*tree, ns.state, "lr")).float_value, 0.5);

  Result<PickleTree> by_value = LoadDeepSpeed(FromHex(kStageByValue));
  ASSERT_TRUE(by_value.ok()) << by_value.status().message();
  const PickleValue& call = by_value->at(Find(*by_value, by_value->root, "stage"));
  EXPECT_EQ(by_value->at(call.items[0]).text, "deepspeed.runtime.zero.config.ZeroStageEnum");
  EXPECT_EQ(by_value->at(by_value->at(call.items[1]).items[0]).int_value, 2);
}

TEST(PickleDeepSpeed, NumpyRandomState) {
  const std::string bytes = FromHex(kNumpyState);
  EXPECT_EQ(LoadOk(bytes).values.size(), LoadDeepSpeed(bytes)->values.size());
  Result<PickleTree> tree = LoadDeepSpeed(bytes);
  ASSERT_TRUE(tree.ok()) << tree.status().message();
  const PickleValue& state = tree->at(Find(*tree, tree->root, "numpy"));
  ASSERT_EQ(state.kind, PickleKind::kTuple);
  ASSERT_EQ(state.items.size(), 5u);
  EXPECT_EQ(tree->at(state.items[0]).text, "MT19937");
  const PickleValue& array = tree->at(state.items[1]);
  ASSERT_EQ(array.kind, PickleKind::kCall);
  EXPECT_EQ(tree->at(array.items[0]).text, "numpy.core.multiarray._reconstruct");
  EXPECT_NE(array.state, PickleValue::kNoState);
}

TEST(PickleDeepSpeed, GetattrOnlyOnZeroStageEnum) {
  // getattr(argparse.Namespace, 'x'): both globals are allowed, the call is not.
  EXPECT_EQ(LoadDeepSpeed("\x80\x02"
                          "c__builtin__\ngetattr\ncargparse\nNamespace\n"
                          "X\x01\x00\x00\x00x\x86R."sv)
                .status()
                .message(),
            "ckpt.pt: data.pkl: __builtin__.getattr is allowed only as "
            "getattr(deepspeed.runtime.zero.config.ZeroStageEnum, 'name') or "
            "getattr(CLASS, 'NAME') (byte 50)");
  // getattr(__main__.Phase, 'TRAIN'): pickle_globals_test.cc (IsEnumMemberGetattr).
  // On the enum but with a non-string name, or with three arguments.
  EXPECT_FALSE(LoadDeepSpeed("\x80\x02"
                             "cbuiltins\ngetattr\n"
                             "cdeepspeed.runtime.zero.config\nZeroStageEnum\nK\x01\x86R."sv)
                   .ok());
  EXPECT_FALSE(LoadDeepSpeed("\x80\x02"
                             "cbuiltins\ngetattr\n"
                             "cdeepspeed.runtime.zero.config\nZeroStageEnum\n"
                             "X\x01\x00\x00\x00xK\x01\x87R."sv)
                   .ok());
  // Through NEWOBJ too.
  EXPECT_FALSE(LoadDeepSpeed("\x80\x02"
                             "cbuiltins\ngetattr\ncargparse\nNamespace\n"
                             "X\x01\x00\x00\x00x\x86\x81."sv)
                   .ok());
  // The accepted form.
  EXPECT_TRUE(LoadDeepSpeed("\x80\x02"
                            "cbuiltins\ngetattr\n"
                            "cdeepspeed.runtime.zero.config\nZeroStageEnum\n"
                            "X\x07\x00\x00\x00weights\x86R."sv)
                  .ok());
  // Anything else stays refused in DeepSpeed mode.
  EXPECT_EQ(LoadDeepSpeed("\x80\x02"
                          "cos\nsystem\n(S'echo hi'\ntR."sv)
                .status()
                .message(),
            "ckpt.pt: data.pkl: global os.system is not allowed (byte 2)");
}
}  // namespace
}  // namespace ckptfs

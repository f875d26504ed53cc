// torch.save files: the zip reader and writer, the tensor interpreter over the restricted
// unpickler, and the merged pytorch_model.bin view built by Layout.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ctime>
#include <nlohmann/json.hpp>

#include "core/checkpoint/assembly.h"
#include "core/encoding/pickle.h"
#include "core/encoding/torch_file.h"
#include "core/encoding/zip.h"
#include "core/format/formats.h"
#include "core/volume/verify.h"
#include "core/volume/volume.h"
#include "tests/unit/format_samples.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

// The table's sample of this format (format_samples.h); detect reads no bytes.
const testing::FormatSample kSample("torch", {{"pytorch_model.bin", "not parsed by detect"},
                                              {"config.json", "{}"}});

using ::testing::HasSubstr;
using testing::MakeZip;

// A real torch.save (PyTorch 1.13) of OrderedDict(w=arange(6).reshape(2,3) f32, tied=w,
// b=bf16[1.5,-2], slice=arange(10)[4:7] i64, t=w.t()), written to a BytesIO (archive/).
const std::string kRealTorchFile(
    "\x50\x4b\x03\x04\x00\x00\x08\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x10\x00\x12\x00\x61\x72"
    "\x63\x68\x69\x76\x65\x2f\x64\x61\x74\x61\x2e\x70\x6b\x6c\x46\x42\x0e\x00\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x80\x02\x63\x63\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x0a\x4f\x72\x64\x65\x72\x65\x64\x44"
    "\x69\x63\x74\x0a\x71\x00\x29\x52\x71"
    "\x01\x28\x58\x01\x00\x00\x00\x77\x71\x02\x63\x74\x6f\x72\x63\x68\x2e\x5f\x75\x74\x69\x6c\x73"
    "\x0a\x5f\x72\x65\x62\x75\x69\x6c\x64"
    "\x5f\x74\x65\x6e\x73\x6f\x72\x5f\x76\x32\x0a\x71\x03\x28\x28\x58\x07\x00\x00\x00\x73\x74\x6f"
    "\x72\x61\x67\x65\x71\x04\x63\x74\x6f"
    "\x72\x63\x68\x0a\x46\x6c\x6f\x61\x74\x53\x74\x6f\x72\x61\x67\x65\x0a\x71\x05\x58\x01\x00\x00"
    "\x00\x30\x71\x06\x58\x03\x00\x00\x00"
    "\x63\x70\x75\x71\x07\x4b\x06\x74\x71\x08\x51\x4b\x00\x4b\x02\x4b\x03\x86\x71\x09\x4b\x03\x4b"
    "\x01\x86\x71\x0a\x89\x68\x00\x29\x52"
    "\x71\x0b\x74\x71\x0c\x52\x71\x0d\x58\x04\x00\x00\x00\x74\x69\x65\x64\x71\x0e\x68\x0d\x58\x01"
    "\x00\x00\x00\x62\x71\x0f\x68\x03\x28"
    "\x28\x68\x04\x63\x74\x6f\x72\x63\x68\x0a\x42\x46\x6c\x6f\x61\x74\x31\x36\x53\x74\x6f\x72\x61"
    "\x67\x65\x0a\x71\x10\x58\x01\x00\x00"
    "\x00\x31\x71\x11\x68\x07\x4b\x02\x74\x71\x12\x51\x4b\x00\x4b\x02\x85\x71\x13\x4b\x01\x85\x71"
    "\x14\x89\x68\x00\x29\x52\x71\x15\x74"
    "\x71\x16\x52\x71\x17\x58\x05\x00\x00\x00\x73\x6c\x69\x63\x65\x71\x18\x68\x03\x28\x28\x68\x04"
    "\x63\x74\x6f\x72\x63\x68\x0a\x4c\x6f"
    "\x6e\x67\x53\x74\x6f\x72\x61\x67\x65\x0a\x71\x19\x58\x01\x00\x00\x00\x32\x71\x1a\x68\x07\x4b"
    "\x0a\x74\x71\x1b\x51\x4b\x04\x4b\x03"
    "\x85\x71\x1c\x4b\x01\x85\x71\x1d\x89\x68\x00\x29\x52\x71\x1e\x74\x71\x1f\x52\x71\x20\x58\x01"
    "\x00\x00\x00\x74\x71\x21\x68\x03\x28"
    "\x28\x68\x04\x68\x05\x68\x06\x68\x07\x4b\x06\x74\x71\x22\x51\x4b\x00\x4b\x03\x4b\x02\x86\x71"
    "\x23\x4b\x01\x4b\x03\x86\x71\x24\x89"
    "\x68\x00\x29\x52\x71\x25\x74\x71\x26\x52\x71\x27\x75\x2e\x50\x4b\x07\x08\x52\x45\xb8\x90\x8e"
    "\x01\x00\x00\x8e\x01\x00\x00\x50\x4b"
    "\x03\x04\x00\x00\x08\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x0e\x00\x36\x00\x61\x72\x63\x68"
    "\x69\x76\x65\x2f\x64\x61\x74\x61\x2f\x30\x46\x42\x32\x00\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40\x00\x00\xa0"
    "\x40\x50\x4b\x07\x08\x17\x90\xe7\x91"
    "\x18\x00\x00\x00\x18\x00\x00\x00\x50\x4b\x03\x04\x00\x00\x08\x08\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x0e\x00\x2c\x00\x61\x72\x63\x68\x69\x76\x65\x2f\x64\x61\x74\x61\x2f\x31\x46\x42\x28"
    "\x00\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\xc0\x3f\x00\xc0\x50\x4b\x07\x08\x07\x51\x5a\xe3\x04\x00\x00\x00\x04\x00\x00\x00\x50\x4b\x03"
    "\x04\x00\x00\x08\x08\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0e\x00\x40\x00\x61\x72\x63\x68\x69"
    "\x76\x65\x2f\x64\x61\x74\x61\x2f\x32"
    "\x46\x42\x3c\x00\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00"
    "\x00\x03\x00\x00\x00\x00\x00\x00\x00"
    "\x04\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x06\x00\x00\x00\x00\x00\x00"
    "\x00\x07\x00\x00\x00\x00\x00\x00\x00"
    "\x08\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x00\x00\x00\x00\x00\x50\x4b\x07\x08\xa4\xe4\x85"
    "\x5e\x50\x00\x00\x00\x50\x00\x00\x00"
    "\x50\x4b\x03\x04\x00\x00\x08\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x0f\x00\x33\x00\x61\x72"
    "\x63\x68\x69\x76\x65\x2f\x76\x65\x72\x73\x69\x6f\x6e\x46\x42\x2f\x00\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x33\x0a\x50\x4b\x07\x08\xd1\x9e\x67\x55\x02\x00\x00\x00\x02\x00\x00\x00\x50\x4b\x01\x02\x00"
    "\x00\x00\x00\x08\x08\x00\x00\x00\x00"
    "\x00\x00\x52\x45\xb8\x90\x8e\x01\x00\x00\x8e\x01\x00\x00\x10\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x61\x72\x63\x68\x69\x76\x65\x2f\x64\x61\x74\x61\x2e\x70\x6b\x6c\x50\x4b\x01\x02\x00\x00\x00"
    "\x00\x08\x08\x00\x00\x00\x00\x00\x00"
    "\x17\x90\xe7\x91\x18\x00\x00\x00\x18\x00\x00\x00\x0e\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\xde\x01\x00\x00\x61\x72"
    "\x63\x68\x69\x76\x65\x2f\x64\x61\x74\x61\x2f\x30\x50\x4b\x01\x02\x00\x00\x00\x00\x08\x08\x00"
    "\x00\x00\x00\x00\x00\x07\x51\x5a\xe3"
    "\x04\x00\x00\x00\x04\x00\x00\x00\x0e\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x68"
    "\x02\x00\x00\x61\x72\x63\x68\x69\x76"
    "\x65\x2f\x64\x61\x74\x61\x2f\x31\x50\x4b\x01\x02\x00\x00\x00\x00\x08\x08\x00\x00\x00\x00\x00"
    "\x00\xa4\xe4\x85\x5e\x50\x00\x00\x00"
    "\x50\x00\x00\x00\x0e\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xd4\x02\x00\x00\x61"
    "\x72\x63\x68\x69\x76\x65\x2f\x64\x61"
    "\x74\x61\x2f\x32\x50\x4b\x01\x02\x00\x00\x00\x00\x08\x08\x00\x00\x00\x00\x00\x00\xd1\x9e\x67"
    "\x55\x02\x00\x00\x00\x02\x00\x00\x00"
    "\x0f\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xa0\x03\x00\x00\x61\x72\x63\x68\x69"
    "\x76\x65\x2f\x76\x65\x72\x73\x69\x6f"
    "\x6e\x50\x4b\x06\x06\x2c\x00\x00\x00\x00\x00\x00\x00\x1e\x03\x2d\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x05\x00\x00\x00\x00\x00\x00"
    "\x00\x05\x00\x00\x00\x00\x00\x00\x00\x2f\x01\x00\x00\x00\x00\x00\x00\x12\x04\x00\x00\x00\x00"
    "\x00\x00\x50\x4b\x06\x07\x00\x00\x00"
    "\x00\x41\x05\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x50\x4b\x05\x06\x00\x00\x00\x00\x05\x00"
    "\x05\x00\x2f\x01\x00\x00\x12\x04\x00"
    "\x00\x00\x00",
    1443);

std::string Repeat(char c, size_t n) { return std::string(n, c); }

// torch 1.13's torch.save of {'extra': Obj(torch.tensor([1., 2.])) (a class of the writer's
// __main__, state {'w': tensor}), 'arr': np.array([1.5, -2.]), 'c': complex64 [1+2j],
// 'path': PosixPath('a/b'), 'ns': Namespace(lr=0.5, tags={'x'}), 'loss': np.float64(0.25)}
// at pickle_protocol 4 (the array's bytes verbatim) and 2 (latin-1 text), as hex.
constexpr std::string_view kAnyValuesProtocol4 =
    "504b03040000080800000000000000000000000000000000000010001200617263686976652f646174612e706b6c"
    "46420e005a5a5a5a5a5a5a5a5a5a5a5a5a5a80049528020000000000007d94288c056578747261948c085f5f6d61"
    "696e5f5f948c034f626a9493942981947d948c0177948c0c746f7263682e5f7574696c73948c125f72656275696c"
    "645f74656e736f725f763294939428288c0773746f72616765948c05746f726368948c0c466c6f617453746f7261"
    "67659493948c0130948c03637075944b027494514b004b0285944b018594898c0b636f6c6c656374696f6e73948c"
    "0b4f726465726564446963749493942952947494529473628c03617272948c156e756d70792e636f72652e6d756c"
    "74696172726179948c0c5f7265636f6e7374727563749493948c056e756d7079948c076e6461727261799493944b"
    "0085944301629487945294284b014b028594681e8c0564747970659493948c02663894898887945294284b038c01"
    "3c944e4e4e4affffffff4affffffff4b00749462894310000000000000f83f00000000000000c0947494628c0163"
    "94680a2828680b680c8c13436f6d706c6578466c6f617453746f726167659493948c01319468104b017494514b00"
    "4b0185944b018594896816295294749452948c0470617468948c07706174686c6962948c09506f73697850617468"
    "9493948c0161948c016294869452948c026e73948c086172677061727365948c094e616d65737061636594939429"
    "81947d94288c026c7294473fe00000000000008c0474616773948f94288c0178949075628c046c6f737394681b8c"
    "067363616c6172949394682a4308000000000000d03f9486945294752e504b070872ff4c8e330200003302000050"
    "4b0304000008080000000000000000000000000000000000000e001100617263686976652f646174612f3046420d"
    "005a5a5a5a5a5a5a5a5a5a5a5a5a0000803f00000040504b070876a53f2e0800000008000000504b030400000808"
    "0000000000000000000000000000000000000e003c00617263686976652f646174612f31464238005a5a5a5a5a5a"
    "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
    "5a5a5a5a0000803f00000040504b070876a53f2e0800000008000000504b03040000080800000000000000000000"
    "00000000000000000f003b00617263686976652f76657273696f6e464237005a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
    "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a330a504b0708"
    "d19e67550200000002000000504b010200000000080800000000000072ff4c8e3302000033020000100000000000"
    "000000000000000000000000617263686976652f646174612e706b6c504b010200000000080800000000000076a5"
    "3f2e08000000080000000e0000000000000000000000000083020000617263686976652f646174612f30504b0102"
    "00000000080800000000000076a53f2e08000000080000000e00000000000000000000000000d802000061726368"
    "6976652f646174612f31504b0102000000000808000000000000d19e675502000000020000000f00000000000000"
    "00000000000058030000617263686976652f76657273696f6e504b06062c000000000000001e032d000000000000"
    "00000004000000000000000400000000000000f300000000000000d203000000000000504b060700000000c50400"
    "000000000001000000504b05060000000004000400f3000000d20300000000";
constexpr std::string_view kAnyValuesProtocol2 =
    "504b03040000080800000000000000000000000000000000000010001200617263686976652f646174612e706b6c"
    "46420e005a5a5a5a5a5a5a5a5a5a5a5a5a5a80027d710028580500000065787472617101635f5f6d61696e5f5f0a"
    "4f626a0a7102298171037d7104580100000077710563746f7263682e5f7574696c730a5f72656275696c645f7465"
    "6e736f725f76320a71062828580700000073746f72616765710763746f7263680a466c6f617453746f726167650a"
    "710858010000003071095803000000637075710a4b0274710b514b004b0285710c4b0185710d8963636f6c6c6563"
    "74696f6e730a4f726465726564446963740a710e2952710f747110527111736258030000006172727112636e756d"
    "70792e636f72652e6d756c746961727261790a5f7265636f6e7374727563740a7113636e756d70790a6e64617272"
    "61790a71144b00857115635f636f646563730a656e636f64650a7116580100000062711758060000006c6174696e"
    "31711886711952711a87711b52711c284b014b0285711d636e756d70790a64747970650a711e5802000000663871"
    "1f8988877120527121284b0358010000003c71224e4e4e4affffffff4affffffff4b007471236289681658120000"
    "00000000000000c3b83f00000000000000c380712468188671255271267471276258010000006371286806282868"
    "0763746f7263680a436f6d706c6578466c6f617453746f726167650a7129580100000031712a680a4b0174712b51"
    "4b004b0185712c4b0185712d89680e2952712e74712f527130580400000070617468713163706174686c69620a50"
    "6f736978506174680a71325801000000617133580100000062713486713552713658020000006e73713763617267"
    "70617273650a4e616d6573706163650a7138298171397d713a2858020000006c72713b473fe00000000000005804"
    "00000074616773713c635f5f6275696c74696e5f5f0a7365740a713d5d713e580100000078713f61857140527141"
    "756258040000006c6f73737142636e756d70792e636f72652e6d756c746961727261790a7363616c61720a714368"
    "2168165809000000000000000000c3903f71446818867145527146867147527148752e504b0708a4fe0df0f10200"
    "00f1020000504b0304000008080000000000000000000000000000000000000e001300617263686976652f646174"
    "612f3046420f005a5a5a5a5a5a5a5a5a5a5a5a5a5a5a0000803f00000040504b070876a53f2e0800000008000000"
    "504b0304000008080000000000000000000000000000000000000e003c00617263686976652f646174612f314642"
    "38005a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
    "5a5a5a5a5a5a5a5a5a5a5a5a0000803f00000040504b070876a53f2e0800000008000000504b0304000008080000"
    "000000000000000000000000000000000f003b00617263686976652f76657273696f6e464237005a5a5a5a5a5a5a"
    "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
    "5a5a330a504b0708d19e67550200000002000000504b0102000000000808000000000000a4fe0df0f1020000f102"
    "0000100000000000000000000000000000000000617263686976652f646174612e706b6c504b0102000000000808"
    "00000000000076a53f2e08000000080000000e0000000000000000000000000041030000617263686976652f6461"
    "74612f30504b010200000000080800000000000076a53f2e08000000080000000e00000000000000000000000000"
    "98030000617263686976652f646174612f31504b0102000000000808000000000000d19e67550200000002000000"
    "0f0000000000000000000000000018040000617263686976652f76657273696f6e504b06062c000000000000001e"
    "032d00000000000000000004000000000000000400000000000000f3000000000000009204000000000000504b06"
    "0700000000850500000000000001000000504b05060000000004000400f3000000920400000000";

std::string FromHex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  }
  return out;
}

TEST(Zip, WrittenRecordsReadBackAligned) {
  const std::string zip =
      MakeZip({{"a/data.pkl", "pickle"}, {"a/data/0", Repeat('x', 100)}, {"a/version", "3\n"}});
  MemorySource source("x.zip", zip);
  auto entries = ReadZipDirectory(source);
  ASSERT_TRUE(entries.ok()) << entries.status().message();
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[1].name, "a/data/0");
  EXPECT_EQ((*entries)[1].size, 100u);
  for (const ZipEntry& e : *entries) EXPECT_EQ(e.data_offset % kZipAlignment, 0u) << e.name;
  EXPECT_EQ(zip.substr((*entries)[1].data_offset, 100), Repeat('x', 100));
  EXPECT_EQ(zip.substr((*entries)[2].data_offset, 2), "3\n");
}

TEST(Zip, EveryTruncationIsAnError) {
  const std::string zip = MakeZip({{"a/data.pkl", "pickle"}, {"a/data/0", Repeat('x', 70)}});
  for (size_t n = 0; n < zip.size(); ++n) {
    MemorySource source("cut.zip", zip.substr(0, n));
    auto entries = ReadZipDirectory(source);
    EXPECT_FALSE(entries.ok()) << n;
    if (!entries.ok()) {
      EXPECT_EQ(entries.status().message().rfind("cut.zip: ", 0), 0u);
    }
  }
}

TEST(Zip, LyingCentralDirectoryIsRefused) {
  std::string zip = MakeZip({{"a/data.pkl", "pickle"}});
  // The entry's size field (central directory offset + 20) claims more than the file holds.
  const size_t central = zip.rfind(std::string("PK\x01\x02", 4));
  zip[central + 20] = '\x7f';
  MemorySource source("lie.zip", zip);
  auto entries = ReadZipDirectory(source);
  ASSERT_FALSE(entries.ok());
  EXPECT_NE(entries.status().message().find("past the end"), std::string::npos)
      << entries.status().message();
}

TEST(TorchFile, ReadsRealTorchSave) {
  MemorySource source("real.bin", kRealTorchFile);
  auto file = ReadTorchFile(source);
  ASSERT_TRUE(file.ok()) << file.status().message();
  // What torch.save writes is what torch.load(weights_only=True) takes (issue 37).
  EXPECT_TRUE(file->weights_only.loads) << WeightsOnlyLine(file->weights_only);
  ASSERT_EQ(file->tensors.size(), 5u);
  std::map<std::string, const TorchTensor*> by_name;
  for (const TorchTensor& t : file->tensors) by_name[t.name] = &t;
  const TorchTensor& w = *by_name.at("w");
  EXPECT_EQ(w.shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(w.stride, (std::vector<uint64_t>{3, 1}));
  EXPECT_EQ(by_name.at("tied")->storage, w.storage);  // tied: one storage
  EXPECT_EQ(by_name.at("t")->storage, w.storage);
  EXPECT_EQ(by_name.at("t")->stride, (std::vector<uint64_t>{1, 3}));
  EXPECT_FALSE(IsRowMajor(by_name.at("t")->shape, by_name.at("t")->stride));
  const TorchTensor& slice = *by_name.at("slice");
  EXPECT_EQ(slice.storage_offset, 4u);
  const TorchStorage& s = file->storages[slice.storage];
  EXPECT_EQ(s.dtype, Dtype::kI64);
  EXPECT_EQ(s.size, 80u);
  // Element 4 of arange(10) is 4, stored little-endian.
  EXPECT_EQ(kRealTorchFile[s.data_offset + 4 * 8], '\x04');
  EXPECT_EQ(file->storages[by_name.at("b")->storage].dtype, Dtype::kBF16);
  EXPECT_TRUE(file->state_json.empty());
}

// A torch file with one storage record of `storage_bytes` and a pickle from `entries`.
// A mount measures pytorch_model.bin's pickle without making it: the count must be the
// size of the bytes, across SETITEMS batches, memo slots and every integer width.
TEST(TorchPickleBuilder, CountOnlyMatchesTheBytes) {
  const std::vector<uint64_t> shapes[] = {{}, {3}, {300, 70000}, {1ull << 33, 2}};
  std::vector<std::vector<uint64_t>> strides;
  std::vector<TorchPickleEntry> entries;
  std::vector<std::string> names;
  for (uint64_t i = 0; i < 2100; ++i) names.push_back("w." + std::to_string(i * 7919));
  for (uint64_t i = 0; i < 2100; ++i) strides.push_back(RowMajorStrides(shapes[i % 4]));
  for (uint64_t i = 0; i < 2100; ++i) {
    entries.push_back({names[i], i % 5 ? Dtype::kF32 : Dtype::kBF16, i, i * 1000, i % 3,
                       shapes[i % 4], strides[i]});
  }
  for (size_t n : {size_t{0}, size_t{1}, size_t{999}, size_t{1000}, size_t{1001}, size_t{2100}}) {
    std::span<const TorchPickleEntry> some(entries.data(), n);
    TorchPickleBuilder counter(/*count_only=*/true);
    for (const TorchPickleEntry& e : some) counter.Add(e);
    EXPECT_EQ(counter.Finish(), BuildTorchPickle(some).size()) << n << " entries";
    EXPECT_EQ(counter.Take(), "");
  }
}

std::string MakeTorchFile(const std::vector<TorchPickleEntry>& entries,
                          const std::string& storage_bytes) {
  return MakeZip({{"archive/data.pkl", BuildTorchPickle(entries)},
                  {"archive/data/0", storage_bytes},
                  {"archive/version", "3\n"}});
}

TEST(TorchFile, WrittenPickleReadsBack) {
  const std::vector<uint64_t> shape{2, 2}, stride{2, 1}, tshape{2}, tstride{1};
  std::vector<TorchPickleEntry> entries{{"x.weight", Dtype::kF32, 0, 6, 0, shape, stride},
                                        {"x.bias", Dtype::kF32, 0, 6, 4, tshape, tstride}};
  MemorySource source("m.bin", MakeTorchFile(entries, Repeat('\1', 24)));
  auto file = ReadTorchFile(source);
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ(file->tensors.size(), 2u);
  EXPECT_EQ(file->storages.size(), 1u);
  EXPECT_EQ(file->tensors[1].name, "x.bias");
  EXPECT_EQ(file->tensors[1].storage_offset, 4u);
}

// The refusal ReadTorchFile gives for a file of one storage record and `entries`.
std::string Refusal(const std::string& name, const std::vector<TorchPickleEntry>& entries,
                    size_t storage_bytes) {
  MemorySource source(name, MakeTorchFile(entries, Repeat('\0', storage_bytes)));
  auto file = ReadTorchFile(source);
  return file.ok() ? "accepted" : file.status().message();
}

TEST(TorchFile, ViewPastItsStorageIsRefused) {
  const std::vector<uint64_t> shape{4}, stride{1};
  // The storage holds 4 floats; the view starts at element 2 and wants 4.
  EXPECT_THAT(Refusal("big.bin", {{"x", Dtype::kF32, 0, 4, 2, shape, stride}}, 16),
              HasSubstr("big.bin: tensor \"x\""));
}

TEST(TorchFile, StorageSizeMustMatchItsRecord) {
  const std::vector<uint64_t> shape{4}, stride{1};
  EXPECT_THAT(Refusal("short.bin", {{"x", Dtype::kF32, 0, 8, 0, shape, stride}}, 16),
              HasSubstr("holds 16 bytes"));
}

TEST(TorchFile, MissingStorageRecordIsRefused) {
  const std::vector<uint64_t> shape{1}, stride{1};
  EXPECT_THAT(Refusal("miss.bin", {{"x", Dtype::kF32, 7, 1, 0, shape, stride}}, 4),
              HasSubstr("archive/data/7 is missing"));
}

TEST(TorchFile, NulInANameIsRefused) {
  const std::vector<uint64_t> shape{1}, stride{1};
  const std::string name("a\0b", 3);
  EXPECT_THAT(Refusal("nul.bin", {{name, Dtype::kF32, 0, 1, 0, shape, stride}}, 4),
              HasSubstr("NUL byte"));
}

TEST(TorchFile, LegacyFormatsAreNamed) {
  std::string tar(1024, '\0');
  tar.replace(257, 5, "ustar");
  MemorySource tar_source("old.tar", tar);
  EXPECT_NE(ReadTorchFile(tar_source).status().message().find("legacy tar"), std::string::npos);
  MemorySource pickle_source("old.pt", std::string("\x80\x02\x8a\x0a", 4) + Repeat('\0', 20));
  EXPECT_NE(ReadTorchFile(pickle_source).status().message().find("legacy pickle"),
            std::string::npos);
}

TEST(TorchFile, NestedStateBecomesNamesAndJson) {
  // torch.save({"epoch": 10, "model": {"fc.weight": torch.zeros(2)}, "tags": ["a"]}).
  const std::string saved(
      "\x50\x4b\x03\x04\x00\x00\x08\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x10\x00\x12\x00\x61\x72"
      "\x63\x68\x69\x76\x65\x2f\x64\x61\x74\x61\x2e\x70\x6b\x6c\x46\x42\x0e\x00\x5a\x5a\x5a\x5a\x5a"
      "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
      "\x80\x02\x7d\x71\x00\x28\x58\x05\x00\x00\x00\x65\x70\x6f\x63\x68\x71\x01\x4b\x0a\x58\x05\x00"
      "\x00\x00\x6d\x6f\x64\x65\x6c\x71\x02"
      "\x7d\x71\x03\x58\x09\x00\x00\x00\x66\x63\x2e\x77\x65\x69\x67\x68\x74\x71\x04\x63\x74\x6f\x72"
      "\x63\x68\x2e\x5f\x75\x74\x69\x6c\x73"
      "\x0a\x5f\x72\x65\x62\x75\x69\x6c\x64\x5f\x74\x65\x6e\x73\x6f\x72\x5f\x76\x32\x0a\x71\x05\x28"
      "\x28\x58\x07\x00\x00\x00\x73\x74\x6f"
      "\x72\x61\x67\x65\x71\x06\x63\x74\x6f\x72\x63\x68\x0a\x46\x6c\x6f\x61\x74\x53\x74\x6f\x72\x61"
      "\x67\x65\x0a\x71\x07\x58\x01\x00\x00"
      "\x00\x30\x71\x08\x58\x03\x00\x00\x00\x63\x70\x75\x71\x09\x4b\x02\x74\x71\x0a\x51\x4b\x00\x4b"
      "\x02\x85\x71\x0b\x4b\x01\x85\x71\x0c"
      "\x89\x63\x63\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x0a\x4f\x72\x64\x65\x72\x65\x64\x44\x69"
      "\x63\x74\x0a\x71\x0d\x29\x52\x71\x0e"
      "\x74\x71\x0f\x52\x71\x10\x73\x58\x04\x00\x00\x00\x74\x61\x67\x73\x71\x11\x5d\x71\x12\x58\x01"
      "\x00\x00\x00\x61\x71\x13\x61\x75\x2e"
      "\x50\x4b\x07\x08\xcd\xe8\xc0\x7c\xe0\x00\x00\x00\xe0\x00\x00\x00\x50\x4b\x03\x04\x00\x00\x08"
      "\x08\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0e\x00\x24\x00\x61\x72\x63\x68\x69\x76\x65\x2f\x64"
      "\x61\x74\x61\x2f\x30\x46\x42\x20\x00"
      "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
      "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x50\x4b\x07\x08\x69\xdf\x22\x65\x08\x00\x00\x00\x08\x00\x00"
      "\x00\x50\x4b\x03\x04\x00\x00\x08\x08"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0f\x00\x3b\x00\x61"
      "\x72\x63\x68\x69\x76\x65\x2f\x76\x65"
      "\x72\x73\x69\x6f\x6e\x46\x42\x37\x00\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
      "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
      "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
      "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
      "\x33\x0a\x50\x4b\x07\x08\xd1\x9e\x67\x55\x02\x00\x00\x00\x02\x00\x00\x00\x50\x4b\x01\x02\x00"
      "\x00\x00\x00\x08\x08\x00\x00\x00\x00"
      "\x00\x00\xcd\xe8\xc0\x7c\xe0\x00\x00\x00\xe0\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x61\x72\x63\x68\x69\x76\x65\x2f\x64\x61\x74\x61\x2e\x70\x6b\x6c\x50\x4b\x01\x02\x00\x00\x00"
      "\x00\x08\x08\x00\x00\x00\x00\x00\x00"
      "\x69\xdf\x22\x65\x08\x00\x00\x00\x08\x00\x00\x00\x0e\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x30\x01\x00\x00\x61\x72"
      "\x63\x68\x69\x76\x65\x2f\x64\x61\x74\x61\x2f\x30\x50\x4b\x01\x02\x00\x00\x00\x00\x08\x08\x00"
      "\x00\x00\x00\x00\x00\xd1\x9e\x67\x55"
      "\x02\x00\x00\x00\x02\x00\x00\x00\x0f\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x98"
      "\x01\x00\x00\x61\x72\x63\x68\x69\x76"
      "\x65\x2f\x76\x65\x72\x73\x69\x6f\x6e\x50\x4b\x06\x06\x2c\x00\x00\x00\x00\x00\x00\x00\x1e\x03"
      "\x2d\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x03\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\xb7\x00\x00\x00\x00\x00"
      "\x00\x00\x12\x02\x00\x00\x00\x00\x00"
      "\x00\x50\x4b\x06\x07\x00\x00\x00\x00\xc9\x02\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x50\x4b"
      "\x05\x06\x00\x00\x00\x00\x03\x00\x03"
      "\x00\xb7\x00\x00\x00\x12\x02\x00\x00\x00\x00",
      811);
  MemorySource source("state.pt", saved);
  auto file = ReadTorchFile(source);
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ(file->tensors.size(), 1u);
  EXPECT_EQ(file->tensors[0].name, "model.fc.weight");
  EXPECT_EQ(file->state_json, R"({"epoch":10,"tags":["a"]})");
}

TEST(TorchFile, ContainersSharedAtEveryLevelAreRefusedQuickly) {
  // l0 = [1]; l(i+1) = [l(i), l(i)]: 60 levels would be 2^60 paths to walk.
  std::string p = "\x80\x02]K\x01a";
  for (int i = 0; i < 60; ++i) p += std::string("q\x00(h\x00h\x00l", 8);
  p += ".";
  std::string zip = MakeZip({{"archive/data.pkl", p}, {"archive/version", "3\n"}});
  MemorySource source("dag.pt", zip);
  auto file = ReadTorchFile(source);
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("shared too many times"), std::string::npos)
      << file.status().message();
}

TEST(TorchFile, RowMajorIgnoresUnitDimensions) {
  EXPECT_TRUE(IsRowMajor(std::vector<uint64_t>{2, 1, 3}, std::vector<uint64_t>{3, 99, 1}));
  EXPECT_FALSE(IsRowMajor(std::vector<uint64_t>{2, 3}, std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(IsRowMajor(std::vector<uint64_t>{0, 3}, std::vector<uint64_t>{7, 7}));
  EXPECT_EQ(RowMajorStrides(std::vector<uint64_t>{2, 3, 4}), (std::vector<uint64_t>{12, 4, 1}));
}

// File `ino` of `volume`, read through the same plan a FUSE read uses.
std::string ReadWholeFile(const Volume& volume, uint64_t ino) {
  const uint64_t size = volume.layout().Find(ino)->size;
  std::vector<ReadPiece> plan;
  std::string bytes(size, '\0');
  if (!volume.PlanRead(ino, 0, size, &plan).ok() ||
      !volume.ReadInto(plan, reinterpret_cast<uint8_t*>(bytes.data())).ok()) {
    return "read failed";
  }
  return bytes;
}

TEST(TorchLayout, TorchSourceGetsEveryViewAndStridedTensorsOnlyInTheBin) {
  auto ckpt = OpenCheckpointIn(testing::MemoryDir({{"pytorch_model.bin", kRealTorchFile},
                                                   {"training_args.bin", "not weights"}}),
                               testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->format, FormatNamed("torch"));
  auto volume = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestContextPtr());
  const Layout& layout = volume->layout();
  const uint64_t tensors = layout.Lookup(Layout::kRoot, "tensors");
  EXPECT_NE(layout.Lookup(tensors, "w.npy"), 0u);
  EXPECT_NE(layout.Lookup(tensors, "tied.npy"), 0u);
  EXPECT_EQ(layout.Lookup(tensors, "t.npy"), 0u);  // strided
  EXPECT_EQ(layout.notes().size(), 1u);
  EXPECT_NE(layout.Lookup(Layout::kRoot, "training_args.bin"), 0u);  // not weights: shown

  // The merged .bin reads back with the same five tensors and three storages.
  const uint64_t bin = layout.Lookup(Layout::kRoot, "pytorch_model.bin");
  ASSERT_NE(bin, 0u);
  const std::string bytes = ReadWholeFile(*volume, bin);
  MemorySource merged("merged.bin", bytes);
  auto file = ReadTorchFile(merged);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->tensors.size(), 5u);
  EXPECT_EQ(file->storages.size(), 3u);
  // The CRCs came from the source zip, so they describe the bytes served.
  auto entries = ReadZipDirectory(merged);
  ASSERT_TRUE(entries.ok());
  for (const TorchStorage& s : file->storages) EXPECT_NE(s.crc32, 0u);

  const uint64_t meta = layout.Lookup(layout.Lookup(Layout::kRoot, ".ckptfs"), "metadata.json");
  ASSERT_NE(meta, 0u);
}

// torch.save({"w": <f32[6]>, "d": {"k0": 0, "k1": 1, ...}}) with `keys` keys in "d", as
// pickle writes a dict: SETITEMS in batches of 1000.
std::string TorchFileWithBigDict(size_t keys) {
  const std::vector<uint64_t> shape{6}, stride{1};
  const std::vector<TorchPickleEntry> w{{"w", Dtype::kF32, 0, 6, 0, shape, stride}};
  std::string p = BuildTorchPickle(w);
  p.resize(p.size() - 2);  // SETITEMS, STOP: "d" joins the root's items
  auto unicode = [&](const std::string& text) {
    p += 'X';
    for (int i = 0; i < 4; ++i) p += static_cast<char>(text.size() >> (8 * i));
    p += text;
  };
  unicode("d");
  p += '}';
  for (size_t i = 0; i < keys; ++i) {
    if (i % 1000 == 0) p += '(';
    unicode("k" + std::to_string(i));
    p += 'J';  // BININT
    for (int b = 0; b < 4; ++b) p += static_cast<char>(i >> (8 * b));
    if (i % 1000 == 999 || i + 1 == keys) p += 'u';
  }
  p += "u.";
  return MakeZip(
      {{"archive/data.pkl", p}, {"archive/data/0", Repeat('\1', 24)}, {"archive/version", "3\n"}});
}

// A dict of 200,000 keys (3.4 MB of pickle) goes through the reader, the merged layout
// and .ckptfs/metadata.json in linear time: ordered_json's own member lookup made it
// quadratic (100,000 keys took inspect 29 s; 200,000 would take ~2 min).
TEST(TorchFile, BigDictStaysLinear) {
  constexpr size_t kKeys = 200'000;
  const std::string zip = TorchFileWithBigDict(kKeys);
  // CPU time, not wall time: the bound is on the work, whatever else the machine runs.
  const std::clock_t start = std::clock();
  auto ckpt =
      OpenCheckpointIn(testing::MemoryDir({{"pytorch_model.bin", zip}}), testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  auto volume = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestContextPtr());
  const double cpu_seconds = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
  EXPECT_LT(cpu_seconds, 3.0);
  const Layout& layout = volume->layout();
  const uint64_t meta = layout.Lookup(layout.Lookup(Layout::kRoot, ".ckptfs"), "metadata.json");
  ASSERT_NE(meta, 0u);
  const std::string text = ReadWholeFile(*volume, meta);
  const auto json = nlohmann::json::parse(text);  // sorted keys: linear to parse
  ASSERT_EQ(json["d"].size(), kKeys);
  EXPECT_EQ(json["d"]["k0"], 0);
  EXPECT_EQ(json["d"]["k199999"], 199999);
  // Member order is the pickle's.
  const size_t k1 = text.find("\"k1\": 1,"), k2 = text.find("\"k2\": 2,");
  EXPECT_LT(text.find("\"k0\": 0,"), k1);
  EXPECT_LT(k1, k2);
  EXPECT_LT(k2, text.find("\"k10\": 10,"));
}

TEST(TorchLayout, SafetensorsSourceGetsAMergedBin) {
  auto ckpt = OpenCheckpointIn(
      testing::MemoryDir(
          {{"model.safetensors",
            testing::MakeSafetensors({{"a", Dtype::kF16, {3}}, {"u", Dtype::kU16, {2}}})}}),
      testing::TestContext());
  ASSERT_TRUE(ckpt.ok());
  auto volume = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestContextPtr());
  const Layout& layout = volume->layout();
  const uint64_t bin = layout.Lookup(Layout::kRoot, "pytorch_model.bin");
  const std::string bytes = ReadWholeFile(*volume, bin);
  MemorySource merged("merged.bin", bytes);
  auto file = ReadTorchFile(merged);
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ(file->tensors.size(), 1u);  // U16 has no torch 1.13 type: noted, left out
  EXPECT_EQ(layout.notes().size(), 1u);
  EXPECT_EQ(bytes.substr(file->storages[0].data_offset, 6),
            testing::TensorBytes({"a", Dtype::kF16, {3}}));
}

}  // namespace
}  // namespace ckptfs

namespace ckptfs {
namespace {

// Item 1 of issue 23: values no allowlist knows, read as data, their tensors served.
TEST(TorchFile, AnyPythonValueIsDataAndItsTensorsAreServed) {
  const std::string saved = FromHex(kAnyValuesProtocol4);
  MemorySource source("any.pt", saved);
  auto file = ReadTorchFile(source);
  ASSERT_TRUE(file.ok()) << file.status().message();
  std::map<std::string, const TorchTensor*> by_name;
  for (const TorchTensor& t : file->tensors) by_name[t.name] = &t;
  ASSERT_EQ(by_name.size(), 3u);
  // The tensor in the object's state is named by the object's path and the state key.
  ASSERT_TRUE(by_name.count("extra.w"));
  EXPECT_EQ(file->storages[by_name["extra.w"]->storage].dtype, Dtype::kF32);
  // complex64: a C64 storage of torch's ComplexFloatStorage record.
  ASSERT_TRUE(by_name.count("c"));
  EXPECT_EQ(file->storages[by_name["c"]->storage].dtype, Dtype::kC64);
  // The numpy array: a tensor over its bytes where they lie inside data.pkl (no CRC of
  // its own), [1.5, -2.0] little-endian.
  ASSERT_TRUE(by_name.count("arr"));
  const TorchTensor& arr = *by_name["arr"];
  const TorchStorage& s = file->storages[arr.storage];
  EXPECT_EQ(s.dtype, Dtype::kF64);
  EXPECT_EQ(arr.shape, std::vector<uint64_t>{2});
  EXPECT_FALSE(s.has_crc32);
  ASSERT_EQ(s.size, 16u);
  const double want[2] = {1.5, -2.0};
  EXPECT_EQ(saved.substr(s.data_offset, 16), std::string(reinterpret_cast<const char*>(want), 16));
  // The rest in the opaque form of docs/formats.md.
  const auto state = nlohmann::json::parse(file->state_json);
  EXPECT_EQ(state["extra"], nlohmann::json::parse(R"({"__object__": "__main__.Obj"})"));
  EXPECT_EQ(state["path"],
            nlohmann::json::parse(R"({"__object__": "pathlib.PosixPath", "args": ["a", "b"]})"));
  EXPECT_EQ(state["ns"], nlohmann::json::parse(R"({"__object__": "argparse.Namespace",
                                                  "state": {"lr": 0.5, "tags": ["x"]}})"));
  EXPECT_EQ(state["loss"], 0.25);  // a numpy scalar: its value
  EXPECT_FALSE(state.contains("arr"));
  EXPECT_FALSE(state.contains("c"));
}

// torch.save's default protocol 2 writes the array's bytes as latin-1 text
// (_codecs.encode): decoded once into TorchFile::decoded, the array is a tensor over them.
TEST(TorchFile, Protocol2NumpyArrayIsATensorOverDecodedBytes) {
  MemorySource source("any2.pt", FromHex(kAnyValuesProtocol2));
  auto file = ReadTorchFile(source);
  ASSERT_TRUE(file.ok()) << file.status().message();
  std::map<std::string, const TorchTensor*> by_name;
  for (const TorchTensor& t : file->tensors) by_name[t.name] = &t;
  ASSERT_EQ(by_name.size(), 3u);  // extra.w, c and arr
  ASSERT_TRUE(by_name.count("arr"));
  const TorchTensor& arr = *by_name["arr"];
  const TorchStorage& s = file->storages[arr.storage];
  EXPECT_TRUE(s.decoded);
  EXPECT_FALSE(s.has_crc32);
  EXPECT_EQ(s.dtype, Dtype::kF64);
  EXPECT_EQ(arr.shape, std::vector<uint64_t>{2});
  ASSERT_EQ(s.size, 16u);
  ASSERT_EQ(file->decoded.size(), 16u);
  const double want[2] = {1.5, -2.0};
  EXPECT_EQ(file->decoded.substr(s.data_offset, 16),
            std::string(reinterpret_cast<const char*>(want), 16));
  EXPECT_FALSE(file->storages[by_name["c"]->storage].decoded);
  const auto state = nlohmann::json::parse(file->state_json);
  EXPECT_FALSE(state.contains("arr"));
  EXPECT_EQ(state["ns"]["state"]["tags"], nlohmann::json::array({"x"}));  // set(['x'])
  EXPECT_EQ(state["loss"], 0.25);
}

// Hostile latin-1 text: a code point of 256 or more (U+0100 in place of U+00F8, same UTF-8
// length), or a byte count that disagrees with the shape, refuses the file naming the array.
TEST(TorchFile, Protocol2ArrayWithBadTextOrLengthIsRefused) {
  std::string wide = FromHex(kAnyValuesProtocol2);
  const size_t at = wide.find("\xc3\xb8?");
  ASSERT_NE(at, std::string::npos);
  wide[at] = '\xc4';
  wide[at + 1] = '\x80';
  MemorySource wide_source("wide.pt", wide);
  const Status st = ReadTorchFile(wide_source).status();
  EXPECT_EQ(st.code(), Status::Code::kCorruption);
  EXPECT_THAT(st.message(), HasSubstr("wide.pt: numpy array \"arr\": its data is not latin-1"));
  std::string shape = FromHex(kAnyValuesProtocol2);
  const size_t k = shape.find(std::string("K\x01K\x02\x85", 5));
  ASSERT_NE(k, std::string::npos);
  shape[k + 3] = '\x03';
  MemorySource shape_source("shape2.pt", shape);
  EXPECT_THAT(ReadTorchFile(shape_source).status().message(),
              HasSubstr("shape2.pt: numpy array \"arr\": 16 bytes of data"));
}

// A numpy array whose byte count disagrees with its shape, and a denied global inside a
// torch.save zip: refused, naming the file.
TEST(TorchFile, BrokenArraysAndDeniedGlobalsAreRefused) {
  std::string saved = FromHex(kAnyValuesProtocol4);
  // The array's shape (2,) is pickled as K\x02\x85 right after _reconstruct's state
  // version K\x01: make it 3 elements for 16 bytes.
  const size_t at = saved.find(std::string("K\x01K\x02\x85", 5));
  ASSERT_NE(at, std::string::npos);
  saved[at + 3] = '\x03';
  MemorySource bad_shape("shape.pt", saved);
  EXPECT_THAT(ReadTorchFile(bad_shape).status().message(),
              HasSubstr("shape.pt: numpy array \"arr\": 16 bytes of data"));
  // The Path's module renamed in place to one of the same length on the denylist.
  std::string denied = FromHex(kAnyValuesProtocol4);
  const size_t p = denied.find("pathlib");
  ASSERT_NE(p, std::string::npos);
  denied.replace(p, 7, "os.path");
  MemorySource os_source("os.pt", denied);
  const Status st = ReadTorchFile(os_source).status();
  EXPECT_EQ(st.code(), Status::Code::kUnsupported);
  EXPECT_THAT(st.message(),
              HasSubstr("os.pt: data.pkl: global os.path.PosixPath is not allowed (byte "));
}

// Two numpy arrays over one bytes object (memo), read as u1[16] and f8[2]: each keeps its
// own dtype, so neither is served as the other's type.
TEST(TorchFile, ArraysSharingBytesKeepTheirDtypes) {
  const std::string pickle = FromHex(
      "800495e5000000000000007d94288c027538948c156e756d70792e636f72652e6d756c7469617272617994"
      "8c0c5f7265636f6e7374727563749493948c056e756d7079948c076e6461727261799493944b0085944301"
      "629487945294284b014b10859468058c0564747970659493948c02753194898887945294284b038c017c94"
      "4e4e4e4affffffff4affffffff4b00749462894310000102030405060708090a0b0c0d0e0f947494628c02"
      "663894680468076808680987945294284b014b028594680e8c02663894898887945294284b038c013c944e"
      "4e4e4affffffff4affffffff4b00749462896814749462752e");
  MemorySource source("shared.pt", MakeZip({{"archive/data.pkl", pickle}}));
  auto file = ReadTorchFile(source);
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ(file->tensors.size(), 2u);
  ASSERT_EQ(file->storages.size(), 2u);
  for (const TorchTensor& t : file->tensors) {
    const TorchStorage& s = file->storages[t.storage];
    EXPECT_EQ(s.dtype, t.name == "u8" ? Dtype::kU8 : Dtype::kF64) << t.name;
    EXPECT_EQ(s.size, 16u);
    EXPECT_EQ(s.data_offset, file->storages[0].data_offset);  // the same bytes
  }
}

// np.asfortranarray(arange(6, int32).reshape(2, 3)) at protocol 4: the bytes are column
// by column (0 3 1 4 2 5), so the tensor gets column-major strides over them.
TEST(TorchFile, FortranOrderArrayGetsColumnMajorStrides) {
  const std::string pickle = FromHex(
      "800495a9000000000000007d948c0166948c156e756d70792e636f72652e6d756c74696172726179948c0c"
      "5f7265636f6e7374727563749493948c056e756d7079948c076e6461727261799493944b0085944301629487"
      "945294284b014b024b03869468058c0564747970659493948c02693494898887945294284b038c013c944e4e"
      "4e4affffffff4affffffff4b0074946288431800000000030000000100000004000000020000000500000094"
      "749462732e");
  MemorySource source("fortran.pt", MakeZip({{"archive/data.pkl", pickle}}));
  auto file = ReadTorchFile(source);
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ(file->tensors.size(), 1u);
  const TorchTensor& t = file->tensors[0];
  EXPECT_EQ(t.shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(t.stride, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(file->storages[t.storage].dtype, Dtype::kI32);
  EXPECT_FALSE(IsRowMajor(t.shape, t.stride));
}

// tensors/ serves complex tensors as .npy (<c8) and the array from inside data.pkl;
// model.safetensors leaves the complex tensor out with a note.
TEST(TorchLayout, OpaqueValuesComplexAndNumpyTensorsInTheViews) {
  auto ckpt = OpenCheckpointIn(testing::MemoryDir({{"state.pt", FromHex(kAnyValuesProtocol4)}}),
                               testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  auto volume = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestContextPtr());
  const Layout& layout = volume->layout();
  const uint64_t tensors = layout.Lookup(Layout::kRoot, "tensors");
  const uint64_t c = layout.Lookup(tensors, "c.npy");
  ASSERT_NE(c, 0u);
  const std::string c_npy = ReadWholeFile(*volume, c);
  EXPECT_THAT(c_npy, HasSubstr("'descr': '<c8'"));
  const float want_c[2] = {1.0f, 2.0f};
  EXPECT_EQ(c_npy.substr(c_npy.size() - 8), std::string(reinterpret_cast<const char*>(want_c), 8));
  const std::string arr = ReadWholeFile(*volume, layout.Lookup(tensors, "arr.npy"));
  const double want[2] = {1.5, -2.0};
  EXPECT_EQ(arr.substr(arr.size() - 16), std::string(reinterpret_cast<const char*>(want), 16));
  EXPECT_NE(layout.Lookup(layout.Lookup(tensors, "extra"), "w.npy"), 0u);
  bool noted = false;
  for (const std::string& n : layout.notes()) noted |= n.find("\"c\" is C64") != std::string::npos;
  EXPECT_TRUE(noted);
  const std::string merged =
      ReadWholeFile(*volume, layout.Lookup(Layout::kRoot, "model.safetensors"));
  EXPECT_THAT(merged, HasSubstr("\"arr\""));
  EXPECT_THAT(merged, ::testing::Not(HasSubstr("\"c\"")));
}

// The decoded array through every view: tensors/arr.npy, model.safetensors and
// pytorch_model.bin read it from the checkpoint's decoded data; shards/ lists only the
// stored file, and verify reads only stored bytes.
TEST(TorchLayout, Protocol2NumpyArrayIsServedFromDecodedData) {
  const std::string stored = FromHex(kAnyValuesProtocol2);
  auto ckpt = OpenCheckpointIn(testing::MemoryDir({{"state.pt", stored}}), testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  ASSERT_EQ(ckpt->shards.size(), 1u);
  ASSERT_EQ(ckpt->decoded.size(), 1u);
  const Tensor* arr = FindTensor(*ckpt, "arr");
  ASSERT_NE(arr, nullptr);
  EXPECT_EQ(arr->shard, 1u);  // past the one shard: decoded[0]
  EXPECT_EQ(ShardFile(*ckpt, arr->shard).name, "state.pt");
  std::vector<std::string> reports;
  const VerifyResult verified = VerifyCheckpoint(
      *ckpt, [&](const Status& s) { reports.push_back(s.message()); }, nullptr);
  EXPECT_TRUE(reports.empty()) << reports.front();
  EXPECT_EQ(verified.bytes_read, stored.size());
  auto volume = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestContextPtr());
  const Layout& layout = volume->layout();
  const double want[2] = {1.5, -2.0};
  const std::string want_bytes(reinterpret_cast<const char*>(want), 16);
  const std::string npy =
      ReadWholeFile(*volume, layout.Lookup(layout.Lookup(Layout::kRoot, "tensors"), "arr.npy"));
  EXPECT_THAT(npy, HasSubstr("'descr': '<f8'"));
  EXPECT_EQ(npy.substr(npy.size() - 16), want_bytes);
  const std::string merged =
      ReadWholeFile(*volume, layout.Lookup(Layout::kRoot, "model.safetensors"));
  EXPECT_THAT(merged, HasSubstr("\"arr\""));
  EXPECT_NE(merged.find(want_bytes), std::string::npos);
  const std::string bin = ReadWholeFile(*volume, layout.Lookup(Layout::kRoot, "pytorch_model.bin"));
  EXPECT_NE(bin.find(want_bytes), std::string::npos);
  const uint64_t shards = layout.Lookup(Layout::kRoot, "shards");
  ASSERT_EQ(layout.Children(shards).size(), 1u);
  EXPECT_EQ(layout.Find(layout.Children(shards)[0])->name(), "state.pt");
  EXPECT_EQ(ReadWholeFile(*volume, layout.Children(shards)[0]), stored);
}

}  // namespace
}  // namespace ckptfs

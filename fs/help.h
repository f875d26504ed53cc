// What `ckptfs --help` and each command's --help print, besides the options CLI11 lists:
// the formats SOURCE may be in, from the format table, and the text kept to 80 columns.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace CLI {
class Formatter;
}

namespace ckptfs {

// The formats ckptfs reads, as their titles in the format table (core/format/formats.h)
// in its order: "safetensors, torch.save, ..., per-key split torch.save". A format added to
// the table is named here with no more code.
std::string FormatTitles();

// `text` with every line longer than `width` columns broken at blanks. A continuation
// line is indented to where the broken line's text column starts (the text after the
// first run of two or more blanks that follows its indentation, as in an option's
// description or an environment variable's), or to its own indentation when there is no
// such column or it is past half the width. A word longer than the room
// left stays whole on a line of its own. Lines that fit are kept byte for byte.
std::string WrapHelp(const std::string& text, size_t width = 80);

// CLI11's formatter with its output passed through WrapHelp: set on the app before its
// subcommands are added, so that they inherit it.
std::shared_ptr<CLI::Formatter> WrappingHelpFormatter();

}  // namespace ckptfs

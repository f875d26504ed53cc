// Natural order for names shown to people: runs of digits compare as numbers, so
// "layers.2" comes before "layers.10" and "model-9" before "model-10".
//
// Everything else compares byte by byte. Digit runs of any length compare without
// overflow (by value: leading zeros dropped, then length, then digits); names that are
// equal that way ("a01" and "a1") fall back to plain byte order, so the order is total
// and strict: std::sort and std::set may use it. Only listings for people use it (inspect,
// verify's messages); the files ckptfs writes keep their own, format-defined order.
#pragma once

#include <string_view>

namespace ckptfs {

// True if `a` comes before `b` in natural order.
bool NaturalLess(std::string_view a, std::string_view b);

}  // namespace ckptfs

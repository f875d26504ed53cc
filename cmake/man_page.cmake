# Run at build time (cmake -P) whenever the ckptfs binary changes: writes OUT, the man page,
# with help2man from `ckptfs --help` and `--version`, plus one section holding each
# subcommand's `ckptfs CMD --help` (the subcommands are read from --help too), so the man
# page says what the binary says and nothing is written twice.
# In: CKPTFS (the binary), HELP2MAN, OUT.
cmake_minimum_required(VERSION 3.20)
execute_process(COMMAND ${CKPTFS} --help OUTPUT_VARIABLE help RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${CKPTFS} --help failed (${rc})")
endif()

# Roff-safe preformatted text: backslashes escaped, no line taken for a request.
function(roff_text text out)
  string(REPLACE "\\" "\\e" text "${text}")
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# The subcommands: lines of the "Subcommands:" block indented by exactly two spaces
# (deeper ones continue a description).
string(REGEX MATCH "Subcommands:\n(([ ]+[^\n]*\n)+)" _ "${help}")
string(REPLACE ";" "," block "${CMAKE_MATCH_1}")
string(REPLACE "\n" ";" lines "${block}")
set(names "")
foreach(line IN LISTS lines)
  if(line MATCHES "^  ([a-z][a-z0-9-]*)( |$)")
    list(APPEND names ${CMAKE_MATCH_1})
  endif()
endforeach()
if(names STREQUAL "")
  message(FATAL_ERROR "${CKPTFS} --help lists no subcommands")
endif()
set(include "[COMMANDS]\n")
foreach(name IN LISTS names)
  execute_process(COMMAND ${CKPTFS} ${name} --help OUTPUT_VARIABLE sub RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${CKPTFS} ${name} --help failed (${rc})")
  endif()
  roff_text("${sub}" sub)
  string(APPEND include ".SS \"ckptfs ${name}\"\n.nf\n${sub}.fi\n")
endforeach()
string(APPEND include "[SEE ALSO]\nfusermount3(1), mount.fuse3(8), fstab(5)\n")
file(WRITE ${OUT}.include "${include}")

execute_process(
  COMMAND ${HELP2MAN} --no-info --section=1
          "--name=mount sharded ML checkpoints as one read-only file system"
          --include=${OUT}.include --output=${OUT}.new ${CKPTFS}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "help2man failed (${rc})")
endif()
file(RENAME ${OUT}.new ${OUT})

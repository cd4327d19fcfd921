# Writes OUT, the C++ source of attnsim::build::git_commit() (experiments/common/git_commit.hpp),
# from the git checkout at SRC: `git rev-parse --short=12 HEAD`, with "-dirty" when tracked files
# differ from that commit, "unknown" outside a checkout. Run by the attnsim_git_commit target at
# every build (cmake -P), so that a build made after a new commit, or from an edited tree, says so
# in `attnsim info` and in every result file's provenance; the file is rewritten only when its
# text changes, so an unchanged commit rebuilds nothing.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY "${SRC}"
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT commit)
  set(commit "unknown")
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY "${SRC}"
                  OUTPUT_VARIABLE changes ERROR_QUIET RESULT_VARIABLE rc)
  if(rc EQUAL 0 AND changes)
    string(APPEND commit "-dirty")
  endif()
endif()
set(text "// Generated at build time by experiments/common/git_commit.cmake.\n\
#include \"experiments/common/git_commit.hpp\"\n\n\
const char* attnsim::build::git_commit() { return \"${commit}\"; }\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()

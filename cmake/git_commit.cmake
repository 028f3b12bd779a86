# Writes OUT, a header defining KVSTASH_GIT_COMMIT as SRC's HEAD commit (12 hex digits, or "unknown" for a
# tree without git), and rewrites it only when the commit changed. Run at every build (CMakeLists.txt,
# target kvstash_git_commit), so `kvstash --version` names the commit the binary was built from rather
# than the one its build directory was configured at, while an unchanged HEAD recompiles nothing.
execute_process(COMMAND git -C "${SRC}" rev-parse --short=12 HEAD OUTPUT_VARIABLE commit
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE result)
if(NOT result EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
endif()
set(text "#pragma once\n#define KVSTASH_GIT_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()

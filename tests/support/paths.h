// Where tests find the source tree, committed fixtures, the default model and the CLI binary.
#pragma once

#include <string>

namespace kvstash::test {

std::string source_dir();                               // repository root
std::string fixture_path(const std::string& relative);  // tests/fixtures/<relative>
// The default model (SmolLM2-135M-Instruct Q4_1): $KVSTASH_MODEL, else <repo>/models/<file>.
// Tests that need it call require_default_model(), which fails the test (not skips) when the file is
// missing, with a message naming the set-up command, unless KVSTASH_ALLOW_NO_MODEL=1.
// KVSTASH_SKIP_DEFAULT_MODEL_TESTS=1 skips them even when the model is there: scripts/test.sh sets it for
// the sanitizer stage, whose build runs the real model 5-10x slower, after the Release stage ran them.
std::string default_model_path();
enum class ModelStatus { present, missing_allowed, missing, skipped };
ModelStatus default_model_status();
std::string cli_path();  // the built `kvstash` binary

}  // namespace kvstash::test

// Use at the top of a TEST body that needs the default model.
#define KVSTASH_REQUIRE_DEFAULT_MODEL()                                                             \
    do {                                                                                            \
        switch (::kvstash::test::default_model_status()) {                                          \
            case ::kvstash::test::ModelStatus::present: break;                                      \
            case ::kvstash::test::ModelStatus::missing_allowed:                                     \
                GTEST_SKIP() << "default model missing (KVSTASH_ALLOW_NO_MODEL=1)";                 \
            case ::kvstash::test::ModelStatus::skipped:                                             \
                GTEST_SKIP() << "default-model tests skipped (KVSTASH_SKIP_DEFAULT_MODEL_TESTS=1)"; \
            case ::kvstash::test::ModelStatus::missing:                                             \
                FAIL() << "default model not found at " << ::kvstash::test::default_model_path()    \
                       << "; run scripts/setup.sh (or set KVSTASH_MODEL)";                          \
        }                                                                                           \
    } while (0)

// kvstash state info: what a state file holds, with its checksums verified (no model needed).
#include <cstdio>
#include <memory>
#include <string>

#include "kvstash/commands.h"
#include "kvstash/common.h"
#include "kvstash/error.h"
#include "kvstash/state_file.h"

namespace kvstash::cli {

void register_state(CLI::App& root, Action& action) {
    auto* state = root.add_subcommand("state", "Inspect state files");
    state->require_subcommand(1);
    auto path = std::make_shared<std::string>();
    auto no_verify = std::make_shared<bool>(false);
    auto* info = state->add_subcommand("info", "Print a state file's header and verify its checksums");
    info->add_option("STATE", *path, "state file")->required();  // missing: exit 3 from the read
    info->add_flag("--no-verify", *no_verify, "skip checksum verification");
    info->callback([&action, path, no_verify] {
        action = [path, no_verify] {
            const StateFileInfo i = inspect_state_file(*path, *no_verify ? Checksums::skip : Checksums::verify);
            std::printf("file:          %s (%llu bytes)\n", path->c_str(),
                        static_cast<unsigned long long>(i.file_bytes));
            std::printf("format:        version %u\n", i.format_version);
            std::printf("model:         %s (fingerprint %s)\n", i.model_name.c_str(), i.model_fingerprint.c_str());
            std::printf("tokens:        %lld (context %lld)\n", static_cast<long long>(i.n_tokens),
                        static_cast<long long>(i.n_ctx));
            std::printf(
                "kv:            %s, %llu bytes%s\n", std::string(kv_type_name(i.kv_type)).c_str(),
                static_cast<unsigned long long>(i.kv_bytes),
                i.lossy_kv ? " (quantized from the cache's type: continuation is not bit-exact)" : " (bit-exact)");
            std::printf("numerics:      %s%s\n", i.numerics.c_str(),
                        i.exact_here ? " (this process's: bit-exact here)"
                                     : (" (this process: " + process_numerics() +
                                        "; continues closely, not bit-identically with recomputing here)")
                                           .c_str());
            if (i.n_recurrent_layers > 0) {
                std::string positions;
                for (int64_t pos : i.checkpoint_positions)
                    positions += (positions.empty() ? "" : ", ") + std::to_string(pos);
                std::printf("recurrent:     %lld layers, %llu bytes per state (f32, bit-exact), %llu bytes stored\n",
                            static_cast<long long>(i.n_recurrent_layers),
                            static_cast<unsigned long long>(i.recurrent_state_bytes),
                            static_cast<unsigned long long>(i.recurrent_stored_bytes));
                std::printf("checkpoints:   %s\n", positions.empty() ? "none" : ("at " + positions).c_str());
                std::printf("evaluated:     %lld tokens (%lld evaluated again by the next eval)\n",
                            static_cast<long long>(i.n_evaluated), static_cast<long long>(i.n_tokens - i.n_evaluated));
            }
            if (i.sliding_window > 0) {
                std::printf("sliding:       window %lld; truncating below %lld tokens evaluates again from 0\n",
                            static_cast<long long>(i.sliding_window), static_cast<long long>(i.truncate_floor));
            }
            std::printf("compressed:    %s\n", i.compressed ? "zstd" : "no");
            std::printf("logits:        %s\n", i.has_logits ? "yes" : "no");
            std::printf("sampler:       %s\n", i.has_sampler ? "yes" : "no");
            std::printf("chat session:  %s\n", i.has_session ? "yes (resume with `kvstash chat --load`)" : "no");
            std::printf("checksums:     %s\n", *no_verify ? "not verified" : (i.checksums_ok ? "ok" : "MISMATCH"));
            return (*no_verify || i.checksums_ok) ? 0 : 3;
        };
    });
}

}  // namespace kvstash::cli

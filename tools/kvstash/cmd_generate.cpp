// kvstash generate: continue a prompt with greedy decoding (samplers and chat templates come with the
// text layer), streaming the text to stdout as it is produced.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include "kvstash/commands.h"
#include "kvstash/common.h"
#include "kvstash/error.h"
#include "kvstash/model.h"
#include "kvstash/tokenizer.h"

namespace kvstash::cli {
namespace {

struct GenerateOptions {
    std::string model_path;
    std::string prompt;
    std::string prompt_file;
    int64_t n_predict = 64;
    int threads = 0;
    bool timings = false;
};

int32_t argmax(std::span<const float> logits) {
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i) {
        if (logits[i] > logits[best]) best = i;
    }
    return static_cast<int32_t>(best);
}

// Length of the longest prefix of `s` that does not end inside a UTF-8 sequence.
size_t complete_utf8_prefix(const std::string& s) {
    size_t end = s.size();
    for (size_t back = 1; back <= 4 && back <= s.size(); ++back) {
        const auto c = static_cast<unsigned char>(s[s.size() - back]);
        if ((c & 0xC0) == 0x80) continue;  // continuation byte
        const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (need > back) end = s.size() - back;
        break;
    }
    return end;
}

int run_generate(const GenerateOptions& o) {
    auto model = Model::load(o.model_path);
    const std::string text = o.prompt_file.empty() ? o.prompt : read_text_file(o.prompt_file);
    if (text.empty()) throw Error(ErrorCode::invalid_argument, "the prompt is empty; give some text with -p or -f");
    const Tokenizer& tokenizer = model->tokenizer();
    const std::vector<int32_t> prompt = tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/true);
    State state(*model);
    if (static_cast<int64_t>(prompt.size()) + o.n_predict > state.n_ctx()) {
        throw Error(ErrorCode::out_of_range, "the prompt (" + std::to_string(prompt.size()) + " tokens) plus " +
                                                 std::to_string(o.n_predict) + " generated tokens exceeds the context of " +
                                                 std::to_string(state.n_ctx()) + " tokens");
    }
    Evaluator evaluator(model, o.threads);
    const auto t0 = std::chrono::steady_clock::now();
    evaluator.eval(state, prompt);
    const auto t1 = std::chrono::steady_clock::now();
    std::vector<int32_t> generated;
    size_t printed = 0;
    std::string out;
    for (int64_t i = 0; i < o.n_predict; ++i) {
        const int32_t next = argmax(state.last_logits());
        if (tokenizer.is_eog(next)) break;
        generated.push_back(next);
        out = tokenizer.decode(generated);
        const size_t ready = complete_utf8_prefix(out);
        if (ready > printed) {
            std::fwrite(out.data() + printed, 1, ready - printed, stdout);
            std::fflush(stdout);
            printed = ready;
        }
        if (i + 1 < o.n_predict) evaluator.eval(state, std::span<const int32_t>(&next, 1));
    }
    if (printed < out.size()) std::fwrite(out.data() + printed, 1, out.size() - printed, stdout);
    std::fputc('\n', stdout);
    const auto t2 = std::chrono::steady_clock::now();
    if (o.timings) {
        const double prompt_s = std::chrono::duration<double>(t1 - t0).count();
        const double gen_s = std::chrono::duration<double>(t2 - t1).count();
        std::fprintf(stderr, "prompt: %zu tokens in %.3f s (%.1f tok/s); generated: %zu tokens in %.3f s (%.1f tok/s)\n",
                     prompt.size(), prompt_s, static_cast<double>(prompt.size()) / prompt_s, generated.size(), gen_s,
                     static_cast<double>(generated.size()) / gen_s);
    }
    return 0;
}

}  // namespace

void register_generate(CLI::App& root, Action& action) {
    auto o = std::make_shared<GenerateOptions>();
    auto* cmd = root.add_subcommand("generate", "Continue a prompt (greedy decoding), streaming the text to stdout");
    add_model_option(*cmd, o->model_path);
    auto* p = cmd->add_option("-p,--prompt", o->prompt, "prompt text");
    auto* f = cmd->add_option("-f,--file", o->prompt_file, "read the prompt from a file")->check(CLI::ExistingFile);
    p->excludes(f);
    cmd->add_option("-n,--n-predict", o->n_predict, "maximum tokens to generate")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
        ->capture_default_str();
    add_threads_option(*cmd, o->threads);
    cmd->add_flag("--timings", o->timings, "print prompt and generation speed to stderr");
    cmd->callback([&action, o, p, f] {
        if (p->count() == 0 && f->count() == 0) throw CLI::RequiredError("one of -p/--prompt or -f/--file");
        action = [o] { return run_generate(*o); };
    });
}

}  // namespace kvstash::cli

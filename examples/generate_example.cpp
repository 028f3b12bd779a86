// Generating text with kvstash, start to finish: load a model, encode a prompt, sample with a seed,
// stream the answer as it is produced.
//
//   generate_example                          # the default model, a default question
//   generate_example model.gguf "Your question"
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/model.h"
#include "kvstash/sampler.h"
#include "kvstash/state.h"
#include "kvstash/tokenizer.h"

int main(int argc, char** argv) {
    const std::string model_path = argc > 1 ? argv[1] : KVSTASH_EXAMPLE_MODEL;
    const std::string question = argc > 2 ? argv[2] : "Write a haiku about the sea.";
    try {
        // The model is immutable and can be shared; the State is one sequence (tokens + KV cache);
        // the Evaluator runs the model over a state (0 threads = one per hardware thread).
        std::shared_ptr<const kvstash::Model> model = kvstash::Model::load(model_path);
        kvstash::State state(*model);
        kvstash::Evaluator evaluator(model, /*n_threads=*/0);

        // SmolLM2-Instruct's chat format, written out by hand (kvstash/chat.h renders it for you).
        // parse_special turns "<|im_start|>" into its control token instead of spelling it out.
        const std::string prompt = "<|im_start|>user\n" + question + "<|im_end|>\n<|im_start|>assistant\n";
        const std::vector<int32_t> tokens =
            model->tokenizer().encode(prompt, kvstash::AddSpecial::yes, kvstash::ParseSpecial::yes);
        evaluator.eval(state, tokens);  // prefill: the state now ends with the logits for the first answer token

        kvstash::SamplerParams params;  // temperature 0.8, top-k 40, top-p 0.95, min-p 0.05
        params.seed = 42;               // same seed, same prompt => same answer
        kvstash::Sampler sampler(params);

        kvstash::GenerateOptions options;
        options.max_tokens = 200;  // it also stops at <|im_end|> (an end-of-generation token)
        const kvstash::GenerateResult result =
            kvstash::generate(evaluator, state, sampler, options, [](int32_t /*token*/, std::string_view text) {
                std::cout << text << std::flush;  // whole UTF-8 characters only
                return true;                      // false would stop here
            });

        std::fprintf(stderr, "\n[%zu tokens in %.2f s, stopped by %s; the state holds %lld tokens]\n",
                     result.tokens.size(), result.seconds, kvstash::stop_reason_name(result.stop),
                     static_cast<long long>(state.n_tokens()));
        return 0;
    } catch (const kvstash::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}

#include "kvstash/conversation.h"

#include "kvstash/error.h"
#include "kvstash/tokenizer.h"

namespace kvstash {

State process_prefix(Evaluator& evaluator, std::string_view text, StateOptions options) {
    const Model& model = evaluator.model();
    State state(model, options);
    evaluator.eval(state, model.tokenizer().encode(text, /*add_special=*/true, /*parse_special=*/true));
    return state;
}

GenerateResult generate_with_prefix(Evaluator& evaluator, const State& prefix, std::string_view continuation,
                                    Sampler& sampler, const GenerateOptions& options, const TokenCallback& on_text) {
    State state = prefix.fork();
    evaluator.eval(state,
                   evaluator.model().tokenizer().encode(continuation, /*add_special=*/false, /*parse_special=*/true));
    return generate(evaluator, state, sampler, options, on_text);
}

}  // namespace kvstash

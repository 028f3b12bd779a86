#include "kvstash/shared_prefix.h"

#include "kvstash/error.h"
#include "kvstash/tokenizer.h"

namespace kvstash {

State evaluate_prefix(Evaluator& evaluator, std::string_view text, StateOptions options) {
    const Model& model = evaluator.model();
    State state(model, options);
    evaluator.eval(state, model.tokenizer().encode(text, AddSpecial::yes, ParseSpecial::yes));
    return state;
}

GenerateResult generate_from_prefix(Evaluator& evaluator, const State& prefix, std::string_view continuation,
                                    Sampler& sampler, const GenerateOptions& options, const TokenCallback& on_text) {
    State state = prefix.fork();
    evaluator.eval(state, evaluator.model().tokenizer().encode(continuation, AddSpecial::no, ParseSpecial::yes));
    return generate(evaluator, state, sampler, options, on_text);
}

}  // namespace kvstash

// kvstash_session_bench: the multi-turn chat case of issue 6 — a long system prompt and a conversation
// of many short turns — with kvstash sessions vs re-evaluating everything each turn. Markdown on stdout.
//
//   kvstash_session_bench -m models/SmolLM2-135M-Instruct.Q4_1.gguf -t 2 --mode session
//   kvstash_session_bench ... --mode baseline --turns 20
//   kvstash_session_bench ... --mode shared
//
// The system prompt: a one-line instruction, then the first --system-tokens tokens of
// tests/fixtures/text/persuasion_ch1-2.txt (decoded back to text: the tokenizer round-trips exactly).
// The user messages: 20 fixed questions about that text (kUserMessages). Greedy, --max-tokens per reply.
//   session   one kvstash::Session: the system block is evaluated once at construction ("setup" row),
//             then each turn evaluates only its new tokens.
//   baseline  no reuse: each turn renders the whole conversation (with the replies the baseline itself
//             generated), evaluates it from an empty State, generates, and drops the State.
//   shared    one PrefixCache, two sessions with the same system prompt: A's first turn computes the
//             system prompt, B's first turn takes it from the cache; then each goes on for --shared-turns.
// Per turn: prompt tokens, tokens computed (evaluated) and reused, the turn's wall time (prompt + reply),
// the reply's generation time, and the process's peak RSS (VmHWM) and current RSS (VmRSS) after it.
// Peak RSS is a per-process high-water mark: run one mode per process (as above).
#include <sys/resource.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kvstash/chat.h"
#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/model.h"
#include "kvstash/prefix_cache.h"
#include "kvstash/sampler.h"
#include "kvstash/session.h"
#include "kvstash/state.h"
#include "kvstash/tokenizer.h"

namespace {

using namespace kvstash;

const std::vector<std::string> kUserMessages = {
    "Who is Sir Walter Elliot?",
    "Where does he live?",
    "Which book does he like to read?",
    "How many daughters does he have?",
    "What is the name of his eldest daughter?",
    "Who is Anne?",
    "Who is Lady Russell?",
    "Why must Sir Walter reduce his expenses?",
    "Who is Mr Shepherd?",
    "What does Mr Shepherd suggest?",
    "Who was Lady Elliot?",
    "When did Lady Elliot die?",
    "Who is Mary?",
    "Whom did Mary marry?",
    "What is Kellynch Hall?",
    "What does Elizabeth think about economy?",
    "Is Sir Walter vain?",
    "What is the Baronetage?",
    "Summarise the first chapter in one sentence.",
    "Thank you, that is all.",
};

// kB from a "Name:   1234 kB" line of /proc/self/status.
double status_mib(const char* field) {
    std::ifstream in("/proc/self/status");
    for (std::string line; std::getline(in, line);) {
        if (line.rfind(field, 0) == 0) return std::stod(line.substr(std::string(field).size())) / 1024.0;
    }
    return 0.0;
}

SamplerParams greedy() {
    SamplerParams p;
    p.temperature = 0.0f;
    return p;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// User + system CPU time of all the process's threads: steadier than wall time on a loaded machine.
double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Wall and CPU time since construction.
struct Stopwatch {
    std::chrono::steady_clock::time_point wall = std::chrono::steady_clock::now();
    double cpu = cpu_seconds();
    double wall_s() const { return seconds_since(wall); }
    double cpu_s() const { return cpu_seconds() - cpu; }
};

struct Row {
    std::string who;
    int turn = 0;
    int64_t prompt = 0, computed = 0, reused = 0;
    size_t generated = 0;
    double seconds = 0.0, generate_seconds = 0.0, cpu = 0.0;
};

void print_header() {
    std::printf(
        "| session | turn | prompt tokens | computed | reused | generated | turn time (s) | of which reply (s) "
        "| CPU (s) | peak RSS (MiB) | RSS (MiB) |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
}

void print_row(const Row& r) {
    std::printf("| %s | %s | %lld | %lld | %lld | %zu | %.3f | %.3f | %.2f | %.1f | %.1f |\n", r.who.c_str(),
                r.turn == 0 ? "setup" : std::to_string(r.turn).c_str(), static_cast<long long>(r.prompt),
                static_cast<long long>(r.computed), static_cast<long long>(r.reused), r.generated, r.seconds,
                r.generate_seconds, r.cpu, status_mib("VmHWM:"), status_mib("VmRSS:"));
    std::fflush(stdout);
}

struct Bench {
    std::shared_ptr<const Model> model;
    std::unique_ptr<Evaluator> evaluator;
    ChatTemplate tmpl = ChatTemplate::named("chatml");
    std::string system;
    GenerateOptions options;
    int turns = 20;
    int shared_turns = 3;
};

Row session_turn(Session& s, const std::string& who, int turn, const std::string& message,
                 const GenerateOptions& options) {
    Sampler sampler(greedy());
    const Stopwatch clock;
    const GenerateResult result = s.reply(message, sampler, options);
    return {who,
            turn,
            s.last_turn().prompt_tokens,
            s.last_computed(),
            s.last_reused(),
            result.tokens.size(),
            clock.wall_s(),
            result.seconds,
            clock.cpu_s()};
}

void run_session(Bench& b) {
    print_header();
    const Stopwatch clock;
    Session s(*b.evaluator, b.tmpl, b.system);
    print_row({"A", 0, s.system_tokens(), s.system_tokens(), 0, 0, clock.wall_s(), 0.0, clock.cpu_s()});
    for (int t = 1; t <= b.turns; ++t) {
        print_row(session_turn(s, "A", t, kUserMessages[static_cast<size_t>(t - 1) % kUserMessages.size()], b.options));
    }
}

void run_baseline(Bench& b) {
    print_header();
    std::vector<ChatMessage> messages{{"system", b.system}};
    for (int t = 1; t <= b.turns; ++t) {
        messages.push_back({"user", kUserMessages[static_cast<size_t>(t - 1) % kUserMessages.size()]});
        const Stopwatch clock;
        const std::vector<int32_t> tokens = b.model->tokenizer().encode(
            b.tmpl.render(messages, AddGenerationPrompt::yes), AddSpecial::no, ParseSpecial::yes);
        Row r;
        {
            State state(*b.model);
            b.evaluator->eval(state, tokens);
            Sampler sampler(greedy());
            const GenerateResult result = generate(*b.evaluator, state, sampler, b.options);
            messages.push_back({"assistant", result.text});
            r = {"baseline",
                 t,
                 static_cast<int64_t>(tokens.size()),
                 static_cast<int64_t>(tokens.size()),
                 0,
                 result.tokens.size(),
                 clock.wall_s(),
                 result.seconds,
                 clock.cpu_s()};
        }
        print_row(r);
    }
}

void run_shared(Bench& b) {
    print_header();
    PrefixCache cache(*b.model);
    const SessionOptions options{StateOptions{}, &cache};
    const Stopwatch clock;
    Session a(*b.evaluator, b.tmpl, b.system, options);
    Session c(*b.evaluator, b.tmpl, b.system, options);
    print_row({"A, B", 0, a.system_tokens(), 0, 0, 0, clock.wall_s(), 0.0, clock.cpu_s()});
    for (int t = 1; t <= b.shared_turns; ++t) {
        print_row(session_turn(a, "A", t, kUserMessages[static_cast<size_t>(t - 1)], b.options));
        print_row(session_turn(c, "B", t, kUserMessages[kUserMessages.size() - static_cast<size_t>(t)], b.options));
    }
    const PrefixCacheStats st = cache.stats();
    std::printf("\ncache: %llu lookups, %llu hits, %llu tokens reused, %llu blocks held (%.1f MiB)\n",
                static_cast<unsigned long long>(st.lookups), static_cast<unsigned long long>(st.hits),
                static_cast<unsigned long long>(st.tokens_reused), static_cast<unsigned long long>(st.blocks_held),
                static_cast<double>(st.bytes_held) / (1024.0 * 1024.0));
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(ErrorCode::io, "cannot open '" + path + "'");
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"kvstash_session_bench: chat sessions vs no reuse (docs/benchmarks-history.md, \"Chat sessions\")"};
    std::string model_path = "models/SmolLM2-135M-Instruct.Q4_1.gguf",
                text_path = "tests/fixtures/text/persuasion_ch1-2.txt", mode;
    int threads = 2, system_tokens = 6000, max_tokens = 32;
    Bench b;
    app.add_option("-m,--model", model_path, "GGUF model")->capture_default_str();
    app.add_option("-t,--threads", threads)->capture_default_str();
    app.add_option("-f,--file", text_path, "text of the system prompt")->capture_default_str();
    app.add_option("--system-tokens", system_tokens, "tokens of the text put in the system prompt")
        ->capture_default_str();
    app.add_option("--mode", mode, "session, baseline or shared")
        ->required()
        ->check(CLI::IsMember({"session", "baseline", "shared"}));
    app.add_option("--turns", b.turns, "user turns (session, baseline)")
        ->capture_default_str()
        ->check(CLI::Range(1, 1000));
    app.add_option("--shared-turns", b.shared_turns, "turns of each session (shared)")
        ->capture_default_str()
        ->check(CLI::Range(1, 20));
    app.add_option("-n,--max-tokens", max_tokens, "reply length limit")->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    try {
        b.model = Model::load(model_path);
        b.evaluator = std::make_unique<Evaluator>(b.model, threads);
        b.tmpl = ChatTemplate::for_model(*b.model);
        const Tokenizer& tok = b.model->tokenizer();
        std::vector<int32_t> ids = tok.encode(read_file(text_path), AddSpecial::no, ParseSpecial::no);
        if (ids.size() > static_cast<size_t>(system_tokens)) ids.resize(static_cast<size_t>(system_tokens));
        b.system = "Answer questions about the following text in one short sentence.\n\n" + tok.decode(ids);
        b.options.max_tokens = max_tokens;
        std::printf(
            "mode %s, %d threads, system prompt: %zu tokens of %s, replies <= %d tokens (greedy), load average at "
            "start: ",
            mode.c_str(), threads, ids.size(), text_path.c_str(), max_tokens);
        double load[3] = {0, 0, 0};
        if (getloadavg(load, 3) == 3) std::printf("%.2f %.2f %.2f\n\n", load[0], load[1], load[2]);
        if (mode == "session") run_session(b);
        if (mode == "baseline") run_baseline(b);
        if (mode == "shared") run_shared(b);
        if (getloadavg(load, 3) == 3) std::printf("\nload average at end: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
    } catch (const Error& e) {
        std::fprintf(stderr, "kvstash_session_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}

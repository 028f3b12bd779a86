#include "kvstash/line_reader.h"

#include <histedit.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace kvstash::cli {
namespace {

volatile std::sig_atomic_t g_interrupts = 0;

extern "C" void on_sigint(int) { g_interrupts = g_interrupts + 1; }

struct sigaction g_previous {};

const char* prompt_first(EditLine*) { return "> "; }
const char* prompt_more(EditLine*) { return "... "; }

}  // namespace

Interrupts::Interrupts() {
    g_interrupts = 0;
    struct sigaction action {};
    action.sa_handler = on_sigint;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: a blocked read returns EINTR, so the prompt sees the Ctrl-C
    sigaction(SIGINT, &action, &g_previous);
}

Interrupts::~Interrupts() { sigaction(SIGINT, &g_previous, nullptr); }

int Interrupts::take() {
    const int n = g_interrupts;
    g_interrupts = 0;
    return n;
}

bool Interrupts::pending() const { return g_interrupts != 0; }

struct LineReader::Editor {
    EditLine* el = nullptr;
    History* hist = nullptr;
    HistEvent event{};
    bool more = false;  // continuation prompt

    Editor() {
        el = el_init("kvstash", stdin, stdout, stderr);
        hist = history_init();
        ::history(hist, &event, H_SETSIZE, 1000);
        ::history(hist, &event, H_SETUNIQUE, 1);
        el_set(el, EL_EDITOR, "emacs");
        el_set(el, EL_HIST, ::history, hist);
        el_set(el, EL_SIGNAL, 0);  // our SIGINT handler, not libedit's: it must interrupt the read
        el_source(el, nullptr);    // ~/.editrc, as every libedit program
    }
    ~Editor() {
        el_end(el);
        history_end(hist);
    }
};

LineReader::LineReader(bool interactive, std::string history_path)
    : interactive_(interactive), history_path_(std::move(history_path)) {
    if (!interactive_) return;
    editor_ = std::make_unique<Editor>();
    if (!history_path_.empty()) ::history(editor_->hist, &editor_->event, H_LOAD, history_path_.c_str());
}

LineReader::~LineReader() {
    if (editor_ && !history_path_.empty()) ::history(editor_->hist, &editor_->event, H_SAVE, history_path_.c_str());
}

std::optional<std::string> LineReader::read_line(bool continuation) {
    if (!interactive_) {
        std::string line;
        if (!std::getline(std::cin, line)) return std::nullopt;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return line;
    }
    el_set(editor_->el, EL_PROMPT, continuation ? prompt_more : prompt_first);
    int count = 0;
    errno = 0;
    const char* raw = el_gets(editor_->el, &count);
    if (raw == nullptr) {
        if (errno == EINTR || g_interrupts != 0) {
            interrupted_ = true;
            std::fputc('\n', stderr);
        }
        return std::nullopt;
    }
    if (g_interrupts != 0) {  // Ctrl-C while typing, the read restarted: drop this line
        interrupted_ = true;
        return std::nullopt;
    }
    std::string line(raw, static_cast<size_t>(count));
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    return line;
}

LineReader::Read LineReader::read() {
    interrupted_ = false;
    std::optional<std::string> line = read_line(false);
    if (!line) return {interrupted_ ? Status::interrupted : Status::end, {}};
    std::string message;
    if (*line == "\"\"\"") {  // a block, up to the next """ (end of input closes it too)
        bool first = true;
        while (true) {
            line = read_line(true);
            if (!line) {
                if (interrupted_) return {Status::interrupted, {}};
                break;
            }
            if (*line == "\"\"\"") break;
            if (!first) message += '\n';
            message += *line;
            first = false;
        }
    } else {
        message = *line;
        while (!message.empty() && message.back() == '\\') {  // trailing backslash: continue on the next line
            message.back() = '\n';
            line = read_line(true);
            if (!line) {
                if (interrupted_) return {Status::interrupted, {}};
                break;
            }
            message += *line;
        }
    }
    if (interactive_ && message.find_first_not_of(" \t\r\n") != std::string::npos) {
        ::history(editor_->hist, &editor_->event, H_ENTER, message.c_str());
    }
    return {Status::message, message};
}

std::string default_history_path() {
    if (const char* path = std::getenv("KVSTASH_HISTORY")) return path;
    if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.kvstash_history";
    return "";
}

}  // namespace kvstash::cli

#include "kvstash/line_reader.h"

#include <histedit.h>
#include <langinfo.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <clocale>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string_view>

namespace kvstash::cli {
namespace {

volatile std::sig_atomic_t g_interrupts = 0;

extern "C" void on_sigint(int) { g_interrupts = g_interrupts + 1; }

struct sigaction g_previous {};

// libedit's own reader retries a read() interrupted by a signal once, so a single Ctrl-C at the prompt
// would be swallowed. This one reads a UTF-8 character from stdin itself and reports an interruption
// (-1: el_gets returns null) as soon as our SIGINT handler has counted one — also one that arrived just
// before the wait began: SIGINT is blocked while the count is checked and let in only atomically with the
// wait (ppoll), so it cannot slip between the check and a blocking read.
int wait_for_input() {
    sigset_t block, previous;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &previous);
    int result = 1;
    if (g_interrupts != 0) {
        result = -1;
    } else {
        pollfd fd{STDIN_FILENO, POLLIN, 0};
        if (ppoll(&fd, 1, nullptr, &previous) < 0) result = g_interrupts != 0 || errno != EINTR ? -1 : 0;
    }
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    return result;  // 1: input ready, 0: woken by another signal (wait again), -1: interrupted or failed
}

int read_char(EditLine*, wchar_t* out) {
    unsigned char bytes[4];
    size_t have = 0, need = 1;
    while (have < need) {
        const int ready = wait_for_input();
        if (ready < 0) return -1;
        if (ready == 0) continue;
        const ssize_t n = ::read(STDIN_FILENO, &bytes[have], 1);
        if (n == 0) return 0;  // end of input
        if (n < 0) {
            if (errno == EINTR && g_interrupts == 0) continue;
            return -1;
        }
        if (have == 0) {
            const unsigned char b = bytes[0];
            need = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xe ? 3 : (b >> 3) == 0x1e ? 4 : 1;
        }
        ++have;
    }
    char32_t c = need == 1 ? bytes[0] : bytes[0] & (0x7f >> need);
    for (size_t i = 1; i < need; ++i) c = (c << 6) | (bytes[i] & 0x3f);
    *out = static_cast<wchar_t>(c);
    return 1;
}

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
        el_set(el, EL_GETCFN, read_char);
        el_source(el, nullptr);  // ~/.editrc, as every libedit program
    }
    ~Editor() {
        el_end(el);
        history_end(hist);
    }
};

LineReader::LineReader(bool interactive, std::string history_path)
    : interactive_(interactive), history_path_(std::move(history_path)) {
    if (!interactive_) return;
    // libedit converts between wide characters and the locale's encoding: make that UTF-8 (the
    // environment's if it is, else C.UTF-8), or non-ASCII input is lost.
    const char* locale = std::setlocale(LC_CTYPE, "");
    if (locale == nullptr || std::string_view(nl_langinfo(CODESET)) != "UTF-8") std::setlocale(LC_CTYPE, "C.UTF-8");
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

// The chat REPL's input: one message per read, from a terminal with line editing and history (libedit)
// or from piped stdin (plain lines). A message may span lines: a line ending in a backslash continues on
// the next (the backslash becomes a newline), and a line `"""` opens a block closed by the next `"""`.
// Ctrl-C is not fatal (see Interrupts): at the prompt it drops the line being typed, and a second
// Ctrl-C at an empty prompt quits.
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace kvstash::cli {

// SIGINT as a request, not a kill: while installed, Ctrl-C increments a counter that the REPL polls
// (to stop the answer being generated) and interrupts a blocked read. Restores the previous handler
// when destroyed.
class Interrupts {
public:
    Interrupts();
    ~Interrupts();
    Interrupts(const Interrupts&) = delete;
    Interrupts& operator=(const Interrupts&) = delete;
    // Ctrl-C presses since the last take(); resets the count.
    int take();
    // Whether one is pending (does not reset).
    bool pending() const;
};

class LineReader {
public:
    // `interactive`: stdin is a terminal (line editing, history in `history_path` if not empty).
    LineReader(bool interactive, std::string history_path);
    ~LineReader();
    LineReader(const LineReader&) = delete;
    LineReader& operator=(const LineReader&) = delete;

    enum class Status { message, interrupted, end };
    struct Read {
        Status status = Status::end;
        std::string text;  // the message (Status::message), joined lines with '\n'
    };
    // Reads the next message: Status::end at end of input, Status::interrupted when Ctrl-C was pressed
    // at the prompt (the partial input is dropped).
    Read read();

private:
    struct Editor;
    std::optional<std::string> read_line(bool continuation);
    bool interactive_;
    std::string history_path_;
    std::unique_ptr<Editor> editor_;
    bool interrupted_ = false;
};

// Where interactive chat keeps its history: $KVSTASH_HISTORY, else ~/.kvstash_history ("" = none: no
// HOME, or KVSTASH_HISTORY set empty).
std::string default_history_path();

}  // namespace kvstash::cli

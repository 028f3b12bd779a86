// `-m DIR`: a Hugging Face model directory (config.json, model.safetensors or sharded
// model-0000x-of-0000y.safetensors + model.safetensors.index.json, tokenizer.json, tokenizer_config.json) read as
// the GGUF llama.cpp's converter (convert_hf_to_gguf.py, --outtype the directory's dtype) would make of it: the
// same metadata keys and values, the same tensor names, shapes, types and bytes. So the rest of kvstash (config,
// weights, tokenizer, chat template, fingerprint) reads it through the one gguf::File interface, unchanged.
// Matrices stay memory-mapped in the safetensors files (F32, F16, BF16); what the converter transforms is made in
// owned memory at load: llama Q/K rows permuted to GGUF's interleaved RoPE pairs, GPT-2's Conv1D weights
// transposed, gemma3 norm weights stored as 1 + w, and every 1-D tensor and norm as F32.
#pragma once

#include <memory>
#include <string>

#include "format/gguf.h"
#include "kvstash/model.h"

namespace kvstash {

// True when `path` is a directory (a model directory to read with open_hf_directory).
bool is_model_directory(const std::string& path);

// Throws Error(io) for unreadable files, Error(bad_format) naming the file and what is wrong,
// Error(unsupported) for an architecture, dtype or tokenizer kvstash cannot read from a directory.
// `quantize` q8_0: every matrix the converter's --outtype q8_0 would quantize is quantized into owned memory (rows
// that are not whole 32-blocks become F16, as the converter falls back to).
std::unique_ptr<gguf::File> open_hf_directory(const std::string& dir,
                                              LoadQuantization quantize = LoadQuantization::none);

}  // namespace kvstash

// The run directory: a new one by default, never a previous run's without --overwrite.
#pragma once

#include <string>

namespace glint {

// "runs/2026-11-24_19-46-05" (local time), with "-2", "-3", ... appended when a run of
// the same second exists. Relative to the working directory.
std::string new_run_dir(const std::string& parent = "runs");

// Why `dir` must not receive a run's outputs, or "" when it may: it is a file, or a
// non-empty directory and overwrite is false (the message lists a few of its entries and
// says what to do).
std::string run_dir_problem(const std::string& dir, bool overwrite);

// Copies the tokenizer and generation files a Hugging Face model directory carries
// (tokenizer.json, tokenizer_config.json, special_tokens_map.json, vocab.json,
// merges.txt, tokenizer.model, chat_template.jinja, chat_template.json,
// generation_config.json) from `from` to `to`, those that exist. Returns how many.
int copy_tokenizer_files(const std::string& from, const std::string& to);

}  // namespace glint

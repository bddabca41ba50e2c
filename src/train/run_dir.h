// The run directory: a new one by default, never a previous run's without --overwrite.
#pragma once

#include <string>

namespace glint {

// "runs/2026-11-24_19-46-05" (local time), with "-2", "-3", ... appended when a run of
// the same second exists. Relative to the working directory.
std::string new_run_dir(const std::string& parent = "runs");

// Why `dir` must not receive a run's outputs, or "" when it may: it is a file, or a
// non-empty directory that holds more than an unstarted run (run_dir_unstarted) and
// overwrite is false (the message lists a few of its entries and says what to do).
std::string run_dir_problem(const std::string& dir, bool overwrite);

// Why `dir` must not receive a command's --output, or "" when it may: it is a file, or a
// non-empty directory and overwrite is false. The message lists a few of its entries and
// says what to do: a new --output (`alternative` adds to that), or --overwrite.
std::string output_dir_problem(const std::string& dir, bool overwrite, const std::string& alternative = "");

// Whether `dir` is an empty directory, or holds only what `glint train` writes before its
// first step ends (config.toml, an empty metrics.jsonl, report.html, base-model/ and an
// empty checkpoints/): a run that stopped before it trained anything, which may be re-used.
bool run_dir_unstarted(const std::string& dir);

// Removes an unstarted run's files (run_dir_unstarted): the directory too unless
// keep_directory. Reports nothing; a file it cannot remove stays.
void remove_unstarted_run(const std::string& dir, bool keep_directory);

// Copies the tokenizer and generation files a Hugging Face model directory carries
// (tokenizer.json, tokenizer_config.json, special_tokens_map.json, vocab.json,
// merges.txt, tokenizer.model, chat_template.jinja, chat_template.json,
// generation_config.json) from `from` to `to`, those that exist. Returns how many.
int copy_tokenizer_files(const std::string& from, const std::string& to);

}  // namespace glint

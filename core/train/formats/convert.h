// The commands that turn one model or checkpoint format into another
// (export, import, checkpoint --merge and --split), over the formats' readers
// and writers (train/formats/: checkpoint.h, sharded_checkpoint.h,
// llmc_hf.h; docs/formats.md).
#pragma once

#include <string>

namespace gpt2 {

// The `export` command: the checkpoint `ckpt` (any, training or model) as
// `format` "llmc" (a file at `out`) or "hf" (the folder `out`). `out` is
// checked first (util/files.h check_output: not the checkpoint, not an
// existing file or a folder that is not empty unless `overwrite`, not in a
// run's folder or a held one). Returns a one-line summary. Errors name the
// option.
std::string export_checkpoint(const std::string& ckpt, const std::string& format, const std::string& out,
                              bool overwrite = false);

// The `import` command: an llm.c model file as our model checkpoint at
// `out`, with GPT-2's tokenizer from `encoder_json` and `vocab_bpe` (whose
// vocabulary must fit the file's V). `out` follows check_output's rules
// (the inputs: the model file and the tokenizer's two), checked before
// anything is read; every tensor is checked finite.
// The `import --hf DIR` command: a Hugging Face GPT-2 folder (read_hf_gpt2)
// as our model checkpoint at `out`, with the folder's vocab.json and
// merges.txt as GPT-2's tokenizer (else `encoder_json` and `vocab_bpe`).
std::string import_hf(const std::string& dir, const std::string& encoder_json, const std::string& vocab_bpe,
                      const std::string& out, bool overwrite = false);

std::string import_llmc(const std::string& file, const std::string& encoder_json, const std::string& vocab_bpe,
                        const std::string& out, bool overwrite = false);

// `checkpoint --merge DIR --out FILE`: the sharded checkpoint DIR as one
// training checkpoint file (byte for byte what the one-file format writes
// for the same state). `checkpoint --split FILE --ranks N --out DIR`: a
// training checkpoint file as a sharded folder of N rank files (even
// shares of the whole model; the manifest written last). Both check --out
// as every writing command does (util/files.h check_output) and return the
// summary line they print.
std::string merge_checkpoint(const std::string& dir, const std::string& out, bool overwrite);
std::string split_checkpoint(const std::string& file, int ranks, const std::string& out, bool overwrite);

}  // namespace gpt2

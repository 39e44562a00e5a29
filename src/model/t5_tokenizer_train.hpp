// A T5 SentencePiece tokenizer made at run time, for random-weight Wan pipelines: no real
// vocabulary is shipped, so a unigram model is trained with SentencePiece's own trainer on a short
// English text built into vinf (scenes of the kind video prompts describe, with digits and
// punctuation). The ids are T5's: pad 0 `<pad>`, eos 1 `</s>`, unk 2 `<unk>`, no bos. Training is
// single-threaded and reads every sentence in order, so the same vocabulary size gives the same
// bytes on every run. The only code linked against libsentencepiece_train.
#pragma once

#include <string>

namespace vinf::model {

// The most pieces the built-in text supports (SentencePiece's unigram trainer refuses more).
constexpr int kBuiltinSpieceMaxVocab = 760;

// The serialized SentencePiece ModelProto (what spiece.model holds) of vocab_size pieces, special
// ones included. Throws vinf::Error when the trainer fails (a size outside [4, kBuiltinSpieceMaxVocab]
// is refused first).
std::string train_builtin_spiece_model(int vocab_size);

// DIR/spiece.model as above, DIR/tokenizer_config.json and DIR/special_tokens_map.json as
// transformers' T5Tokenizer writes them (legacy, no extra ids): what T5Tokenizer::load reads.
void write_builtin_t5_tokenizer(const std::string& dir, int vocab_size);

}  // namespace vinf::model

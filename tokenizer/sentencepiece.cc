// The SentencePiece half of tokenizer.h (sentencepiece.h) over SentencePiece's C++ classes.
// Every entry point catches every exception (allocation failures included) and turns it,
// like a non-OK sentencepiece::util::Status, into a tokenizer_status with a message.
#include "tokenizer/sentencepiece.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <mutex>
#include <streambuf>
#include <string>
#include <unordered_map>
#include <stdexcept>
#include <vector>

#include <unistd.h>

extern "C" {
#include "kernels/common/files.h"
}

struct spm_model {
    sentencepiece::SentencePieceProcessor processor;
    tokenizer_special_ids specials;
    std::string proto;  // the serialized ModelProto, for spm_model_proto
};

namespace {

tokenizer_status status_ok() {
    tokenizer_status s;
    s.ok = 1;
    s.message[0] = '\0';
    return s;
}

tokenizer_status status_error(const std::string &what) {
    tokenizer_status s;
    s.ok = 0;
    std::snprintf(s.message, sizeof s.message, "%s", what.c_str());
    return s;
}

tokenizer_status status_from(const sentencepiece::util::Status &st, const std::string &context) {
    if (st.ok()) return status_ok();
    return status_error(context + ": " + st.ToString());
}

// A failed training, in bertpre's terms: SentencePiece's advice for a vocabulary smaller than
// the characters to cover names its own flags (vocab_size, --character_coverage), which
// bertpre spells --vocab-size and --character-coverage.
tokenizer_status train_status(const sentencepiece::util::Status &st, const tokenizer_train_options *o) {
    const std::string text = st.ToString(), marker = "Vocabulary size is smaller than required_chars. ";
    size_t at = text.find(marker);
    int size = 0, required = 0;
    if (st.ok() || at == std::string::npos ||
        std::sscanf(text.c_str() + at + marker.size(), "%d vs %d", &size, &required) != 2)
        return status_from(st, "tokenizer train");
    char coverage[64];
    if (o->character_coverage > 0) std::snprintf(coverage, sizeof coverage, "%g", o->character_coverage);
    else std::snprintf(coverage, sizeof coverage, "0.9995, the default");
    return status_error("tokenizer train: --vocab-size " + std::to_string(size) + " is smaller than the " +
                        std::to_string(required) + " pieces required (one per character covered at " +
                        "--character-coverage " + coverage + ", and the special pieces): raise --vocab-size to " +
                        "at least " + std::to_string(required) + ", or lower --character-coverage to leave out " +
                        "the rarest characters");
}

// SentencePiece's trainer logs to std::cerr; while it trains with an on_pieces callback, its
// lines come here instead: the piece counts go to the callback, warnings and errors to the
// stream they were written for, the rest nowhere. Restored when it goes out of scope.
class PieceTap : public std::streambuf {
  public:
    explicit PieceTap(const tokenizer_train_options *o) : o_(o), saved_(std::cerr.rdbuf(this)) {}
    ~PieceTap() override { std::cerr.rdbuf(saved_); }

  protected:
    int overflow(int c) override {
        if (c == traits_type::eof()) return 0;
        char ch = (char)c;
        xsputn(&ch, 1);
        return c;
    }
    std::streamsize xsputn(const char *s, std::streamsize n) override {
        std::lock_guard<std::mutex> hold(mu_);  // the trainer's threads may log at once
        for (std::streamsize i = 0; i < n; i++) {
            line_ += s[i];
            if (s[i] == '\n') take_line();
        }
        return n;
    }

  private:
    void take_line() {
        const char *l = line_.c_str(), *at;
        long n, most;
        if ((at = std::strstr(l, "Found too long line (")) &&
            std::sscanf(at, "Found too long line (%ld > %ld)", &n, &most) == 2) {
            // SentencePiece's advice names its own flag: said in bertpre's option instead.
            char said[400];
            int len = std::snprintf(said, sizeof said,
                                    "bertpre: warning: tokenizer train: sentences longer than %ld bytes (the first "
                                    "of %ld) are left out of the tokenizer's training, not of the shards; bertpre "
                                    "tokenizer train --max-sentence-length N takes them\n", most, n);
            saved_->sputn(said, len);
        } else if (std::strstr(l, "Too long lines are skipped") || std::strstr(l, "--max_sentence_length")) {
            // the rest of that warning: said above
        } else if (std::strstr(l, "LOG(WARNING)") || std::strstr(l, "LOG(ERROR)") || std::strstr(l, "LOG(FATAL)")) {
            saved_->sputn(l, (std::streamsize)line_.size());
        } else if ((at = std::strstr(l, "Initialized ")) && std::sscanf(at, "Initialized %ld seed", &n) == 1) {
            o_->on_pieces(o_->pieces_ctx, n, 1);
        } else if ((at = std::strstr(l, "EM sub_iter=0 size=")) && std::sscanf(at, "EM sub_iter=0 size=%ld", &n) == 1) {
            o_->on_pieces(o_->pieces_ctx, n, 0);
        }
        line_.clear();
    }
    const tokenizer_train_options *o_;
    std::streambuf *saved_;
    std::string line_;
    std::mutex mu_;
};

// Feeds SentencePiece's trainer from the C callback.
class CallbackIterator : public sentencepiece::SentenceIterator {
  public:
    CallbackIterator(tokenizer_next_sentence next, void *ctx) : next_(next), ctx_(ctx) { Next(); }
    bool done() const override { return done_; }
    void Next() override {
        const char *text = nullptr;
        size_t len = 0;
        int r = next_(ctx_, &text, &len);
        if (r < 0) {
            status_ = sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal,
                                                  "the sentence source reported an error");
            done_ = true;
        } else if (r == 0) {
            done_ = true;
        } else {
            value_.assign(text, len);
        }
    }
    const std::string &value() const override { return value_; }
    sentencepiece::util::Status status() const override { return status_; }

  private:
    tokenizer_next_sentence next_;
    void *ctx_;
    bool done_ = false;
    std::string value_;
    sentencepiece::util::Status status_;
};

// What SentencePiece's trainer writes to PREFIX.vocab: each piece and its score.
std::string vocab_text(const std::string &serialized) {
    sentencepiece::SentencePieceProcessor sp;
    sentencepiece::util::Status st = sp.LoadFromSerializedProto(serialized);
    if (!st.ok()) throw std::runtime_error("reading back the trained model: " + st.ToString());
    std::string text;
    char score[64];
    for (int id = 0; id < sp.GetPieceSize(); id++) {
        std::snprintf(score, sizeof score, "%g", sp.GetScore(id));
        text += sp.IdToPiece(id) + "\t" + score + "\n";
    }
    return text;
}

// PREFIX.model and PREFIX.vocab written under temporary names beside them and linked into
// place only when both are whole: a full disk leaves neither a cut model nor an empty
// vocabulary, and an existing model is never replaced.
tokenizer_status write_trained(const char *prefix, const std::string &model, const std::string &vocab) {
    const std::string final_path[2] = {std::string(prefix) + ".model", std::string(prefix) + ".vocab"};
    const std::string *bytes[2] = {&model, &vocab};
    char tmp[2][1300];
    for (int i = 0; i < 2; i++) {
        staged_file_name(final_path[i].c_str(), tmp[i], sizeof tmp[i]);
        if (write_file_bytes(tmp[i], bytes[i]->data(), bytes[i]->size()) != 0) {
            int saved = errno;
            for (int k = 0; k <= i; k++) unlink(tmp[k]);
            char reason[128];
            return status_error("tokenizer train: writing " + final_path[i] + " (as " + tmp[i] + ") failed: " +
                                errno_text(saved, reason, sizeof reason) +
                                "; nothing was written under --model-prefix");
        }
    }
    for (int i = 0; i < 2; i++)
        if (staged_file_commit(tmp[i], final_path[i].c_str(), 0) != 0) {
            int saved = errno;
            if (i == 1) unlink(final_path[0].c_str());
            unlink(tmp[1]);
            char reason[128];
            return status_error("tokenizer train: putting " + final_path[i] + " in place failed: " +
                                errno_text(saved, reason, sizeof reason) +
                                (saved == EEXIST ? ": another process wrote it meanwhile" : "") +
                                "; nothing was written under --model-prefix");
        }
    return status_ok();
}

int lookup(const sentencepiece::SentencePieceProcessor &sp, const char *piece) {
    int id = sp.PieceToId(piece);
    // PieceToId answers unk_id for unknown pieces; only the piece itself is a real match.
    return sp.IdToPiece(id) == piece ? id : -1;
}

}  // namespace

extern "C" tokenizer_status spm_train(const tokenizer_train_options *o, const char *files,
                                            tokenizer_next_sentence next, void *ctx) {
    try {
        if (!o->model_prefix || !*o->model_prefix) return status_error("tokenizer train: no model prefix given");
        if (o->vocab_size < 6) return status_error("tokenizer train: vocab_size must be at least 6 (5 special tokens)");
        std::unordered_map<std::string, std::string> args = {
            {"vocab_size", std::to_string(o->vocab_size)},
            {"model_type", o->model_type && *o->model_type ? o->model_type : "unigram"},
            {"pad_id", "0"},
            {"unk_id", "1"},
            {"bos_id", "-1"},
            {"eos_id", "-1"},
            {"control_symbols", "[CLS],[SEP],[MASK]"},
            {"num_threads", std::to_string(o->num_threads > 0 ? o->num_threads : 1)},
            {"shuffle_input_sentence", "true"},
            {"minloglevel", o->verbose || o->on_pieces ? "0" : "2"},
        };
        std::unique_ptr<PieceTap> tap(o->on_pieces && !o->verbose ? new PieceTap(o) : nullptr);
        if (o->character_coverage > 0) args["character_coverage"] = std::to_string(o->character_coverage);
        if (o->input_sentence_size > 0) args["input_sentence_size"] = std::to_string(o->input_sentence_size);
        if (o->max_sentence_length > 0) args["max_sentence_length"] = std::to_string(o->max_sentence_length);
        sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned>(o->seed));
        // The trainer hands the model back instead of writing it (write_trained writes).
        std::string model;
        tokenizer_status s;
        if (next) {
            CallbackIterator it(next, ctx);
            s = train_status(sentencepiece::SentencePieceTrainer::Train(args, &it, &model), o);
        } else {
            if (!files || !*files) return status_error("tokenizer train: no input files given");
            args["input"] = files;
            s = train_status(sentencepiece::SentencePieceTrainer::Train(args, nullptr, &model), o);
        }
        if (!s.ok) return s;
        return write_trained(o->model_prefix, model, vocab_text(model));
    } catch (const std::exception &e) {
        return status_error(std::string("tokenizer train: ") + e.what());
    } catch (...) {
        return status_error("tokenizer train: unknown C++ exception");
    }
}

extern "C" tokenizer_status spm_load(spm_model **out, const char *model_path) {
    *out = nullptr;
    try {
        spm_model *tok = new spm_model();
        tokenizer_status s = status_from(tok->processor.Load(model_path), std::string(model_path));
        if (!s.ok) {
            delete tok;
            return s;
        }
        const auto &sp = tok->processor;
        tok->specials.pad = sp.pad_id();
        tok->specials.unk = sp.unk_id();
        tok->specials.cls = lookup(sp, "[CLS]");
        tok->specials.sep = lookup(sp, "[SEP]");
        tok->specials.mask = lookup(sp, "[MASK]");
        tok->proto = sp.serialized_model_proto();
        *out = tok;
        return status_ok();
    } catch (const std::exception &e) {
        return status_error(std::string(model_path) + ": " + e.what());
    } catch (...) {
        return status_error(std::string(model_path) + ": unknown C++ exception");
    }
}

extern "C" void spm_free(spm_model *tok) { delete tok; }

extern "C" const unsigned char *spm_model_proto(const spm_model *tok, size_t *size) {
    *size = tok->proto.size();
    return reinterpret_cast<const unsigned char *>(tok->proto.data());
}

extern "C" int spm_vocab_size(const spm_model *tok) { return tok->processor.GetPieceSize(); }

extern "C" tokenizer_special_ids spm_specials(const spm_model *tok) { return tok->specials; }

extern "C" int spm_piece_to_id(const spm_model *tok, const char *piece) {
    try {
        return lookup(tok->processor, piece);
    } catch (...) {
        return -1;
    }
}

extern "C" tokenizer_status spm_id_to_piece(const spm_model *tok, int id, char *buf, size_t size) {
    try {
        if (id < 0 || id >= tok->processor.GetPieceSize())
            return status_error("id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                std::to_string(tok->processor.GetPieceSize()) + ")");
        std::snprintf(buf, size, "%s", tok->processor.IdToPiece(id).c_str());
        return status_ok();
    } catch (const std::exception &e) {
        return status_error(std::string("id_to_piece: ") + e.what());
    } catch (...) {
        return status_error("id_to_piece: unknown C++ exception");
    }
}

extern "C" tokenizer_status spm_encode_append(const spm_model *tok, const char *text, size_t len, int **ids,
                                              size_t *n, size_t *cap) {
    try {
        // SentencePiece encodes into a SentencePieceText (a protobuf of pieces with their
        // strings; its Encode into a std::vector<int> builds one and reads the ids from it).
        // One per thread, kept across calls: clearing it keeps its pieces and their strings,
        // so a sentence costs no allocation once the buffers have grown.
        thread_local sentencepiece::ImmutableSentencePieceText spt;
        tokenizer_status s =
            status_from(tok->processor.Encode(std::string_view(text, len), spt.mutable_proto()), "encode");
        if (!s.ok) return s;
        size_t count = spt.pieces_size();
        if (*n + count > *cap) {
            size_t grown = (*n + count) * 2;
            int *p = static_cast<int *>(std::realloc(*ids, grown * sizeof(int)));
            if (!p) return status_error("encode: out of host memory");
            *ids = p;
            *cap = grown;
        }
        for (size_t i = 0; i < count; i++) (*ids)[*n + i] = static_cast<int>(spt.pieces(static_cast<int>(i)).id());
        *n += count;
        return status_ok();
    } catch (const std::exception &e) {
        return status_error(std::string("encode: ") + e.what());
    } catch (...) {
        return status_error("encode: unknown C++ exception");
    }
}

extern "C" tokenizer_status spm_decode(const spm_model *tok, const int *ids, size_t n, char **text) {
    *text = nullptr;
    try {
        int V = tok->processor.GetPieceSize();
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= V)
                return status_error("decode: id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                                    " is outside the vocabulary [0, " + std::to_string(V) + ")");
        std::string out;
        tokenizer_status s =
            status_from(tok->processor.Decode(std::vector<int>(ids, ids + n), &out), "decode");
        if (!s.ok) return s;
        char *p = static_cast<char *>(std::malloc(out.size() + 1));
        if (!p) return status_error("decode: out of host memory");
        std::memcpy(p, out.c_str(), out.size() + 1);
        *text = p;
        return status_ok();
    } catch (const std::exception &e) {
        return status_error(std::string("decode: ") + e.what());
    } catch (...) {
        return status_error("decode: unknown C++ exception");
    }
}

// Any valid JSON through jansson. jansson refuses integers beyond 64 bits ("too big
// integer"), which users' files hold in fields bertpre never reads: a tokenizer_config.json
// saved by transformers without a maximum length holds "model_max_length":
// 1000000000000000019884624838656, and deduplicated JSONL corpora hold uint64 hashes above
// 2^63. Such a text is loaded again with every number as a real, and each real that holds an
// integer exactly is made an integer again: the values bertpre reads (sizes, flags, ids) are
// unchanged, the huge ones stay reals. Header-only, at the ground floor, for the tokenizer,
// data and engine layers alike.
#pragma once
#include <jansson.h>
#include <math.h>
#include <string.h>

static inline json_t *json_any_integers_back(json_t *v) {
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == floor(d) && fabs(d) < 9007199254740992.0) {  // 2^53: exact in a double
            json_decref(v);
            return json_integer((json_int_t)d);
        }
        return v;
    }
    if (json_is_array(v))
        for (size_t i = 0; i < json_array_size(v); i++)
            json_array_set_new(v, i, json_any_integers_back(json_incref(json_array_get(v, i))));
    if (json_is_object(v)) {
        const char *key;
        json_t *item;
        void *tmp;
        json_object_foreach_safe(v, tmp, key, item) json_object_set_new(v, key, json_any_integers_back(json_incref(item)));
    }
    return v;
}

// Whether a failed load is worth the second try with every number as a real.
static inline int json_any_too_big(const json_t *first, const json_error_t *err) {
    return !first && strstr(err->text, "too big integer") != NULL;
}

// json_loadb and json_load_file for any valid JSON.
static inline json_t *json_any_loadb(const char *buf, size_t len, size_t flags, json_error_t *err) {
    json_t *v = json_loadb(buf, len, flags, err);
    if (!json_any_too_big(v, err)) return v;
    v = json_loadb(buf, len, flags | JSON_DECODE_INT_AS_REAL, err);
    return v ? json_any_integers_back(v) : NULL;
}
static inline json_t *json_any_load_file(const char *path, size_t flags, json_error_t *err) {
    json_t *v = json_load_file(path, flags, err);
    if (!json_any_too_big(v, err)) return v;
    v = json_load_file(path, flags | JSON_DECODE_INT_AS_REAL, err);
    return v ? json_any_integers_back(v) : NULL;
}

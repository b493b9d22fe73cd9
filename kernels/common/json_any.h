// Any valid JSON through jansson: jansson refuses integers beyond 64 bits ("too big integer"),
// which valid files carry in fields bertpre never reads (transformers writes
// "model_max_length": 1000000000000000019884624838656 into tokenizer_config.json; JSONL
// corpora carry uint64 hashes above 2^63). Such a text is loaded again with every number as
// a real, and each real that holds an integer jansson can store is made an integer again: the
// values bertpre reads (vocab sizes, flags, ids) are unchanged, the huge ones stay reals.
// Header-only, at the ground floor, for the tokenizer, data and engine layers alike.
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

static inline json_t *json_any_retry(json_t *first, json_error_t *err, json_t *(*again)(const void *, size_t, size_t,
                                                                                       json_error_t *),
                                     const void *src, size_t len, size_t flags) {
    if (first || !strstr(err->text, "too big integer")) return first;
    json_t *all_reals = again(src, len, flags | JSON_DECODE_INT_AS_REAL, err);
    return all_reals ? json_any_integers_back(all_reals) : NULL;
}

static inline json_t *json_any_loadb_(const void *buf, size_t len, size_t flags, json_error_t *err) {
    return json_loadb((const char *)buf, len, flags, err);
}
static inline json_t *json_any_load_file_(const void *path, size_t len, size_t flags, json_error_t *err) {
    (void)len;
    return json_load_file((const char *)path, flags, err);
}

// json_loadb and json_load_file for any valid JSON.
static inline json_t *json_any_loadb(const char *buf, size_t len, size_t flags, json_error_t *err) {
    return json_any_retry(json_loadb(buf, len, flags, err), err, json_any_loadb_, buf, len, flags);
}
static inline json_t *json_any_load_file(const char *path, size_t flags, json_error_t *err) {
    return json_any_retry(json_load_file(path, flags, err), err, json_any_load_file_, path, 0, flags);
}

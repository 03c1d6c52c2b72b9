/* The expressions of a decoder family's description (cfg_family.c): a small, pure subset of
 * Python's, over JSON values (libjansson's json_t), so that a config.json's fields flow in
 * as they are.
 *
 *   numbers (64-bit integers, doubles), 'strings' or "strings", true false null (and
 *   True False None), [lists], names, (groups)
 *   a.b (an object's member), a[i] (a list's item, a string's character, an object's
 *   member), f(x, ...) with len, int, float, str, min, max, range, sqrt, bool
 *   unary - and not; ** * / // % + -; == != < <= > >= in, not in; and, or (short-circuit);
 *   x if c else y
 *
 * Integer arithmetic is checked: an overflow, a division by zero, a name that is not
 * defined or a value of the wrong type is an error naming it, never a wrong number. */
#ifndef LAYERBENCH_HF_EXPR_H
#define LAYERBENCH_HF_EXPR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* A name's value (a new reference the evaluator releases), or NULL where it has none. */
typedef json_t *(*hf_expr_lookup)(void *user, const char *name);

/* The value of the expression text (a new reference; caller json_decref's it), or NULL
 * with "what is wrong" in err. */
json_t *hf_expr_eval(const char *text, hf_expr_lookup lookup, void *user, char *err, size_t errlen);

/* The truth of a value, as Python's: false, null, 0, 0.0, "", [] and {} are false. */
bool hf_expr_truthy(const json_t *v);

/* A value as text: an integer as digits, a real as the shortest %.17g that reads back,
 * true/false/null, a string as it is, a list or object as compact JSON. Caller frees. */
char *hf_expr_text(const json_t *v);

#endif

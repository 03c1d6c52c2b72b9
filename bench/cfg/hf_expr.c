#include "hf_expr.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* ---- tokens -------------------------------------------------------------------------- */

typedef enum { T_END, T_NUM, T_STR, T_NAME, T_OP } tok_kind;

typedef struct parser {
    const char *text, *p;
    tok_kind kind;
    char tok[512];       /* the current token's text (a string's contents, unescaped) */
    hf_expr_lookup lookup;
    void *user;
    char *err;
    size_t errlen;
    bool failed;
    int depth;
    int skip;            /* > 0: inside an operand that short-circuit logic leaves unused: it is
                          * parsed, not evaluated (no name looked up, no operation done) */
} parser;

#define EXPR_MAX_DEPTH 64

static json_t *fail(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static json_t *fail(parser *ps, const char *fmt, ...)
{
    if (!ps->failed) {
        char msg[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(ps->err, ps->errlen, "expression '%.120s': %s", ps->text, msg);
    }
    ps->failed = true;
    return NULL;
}

/* What an operand is worth where it is skipped: a placeholder, never an error. */
#define SKIPPED(ps) ((ps)->skip > 0)

static void next(parser *ps)
{
    const char *p = ps->p;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    ps->tok[0] = 0;
    if (!*p) {
        ps->kind = T_END;
    } else if (isdigit((unsigned char)*p) || (*p == '.' && isdigit((unsigned char)p[1]))) {
        size_t n = strspn(p, "0123456789.eE_");
        while (n && (p[n - 1] == 'e' || p[n - 1] == 'E') && (p[n] == '+' || p[n] == '-')) /* 1e-6 */
            n += 1 + strspn(p + n + 1, "0123456789");
        snprintf(ps->tok, sizeof ps->tok, "%.*s", (int)(n < sizeof ps->tok ? n : sizeof ps->tok - 1), p);
        ps->kind = T_NUM;
        p += n;
    } else if (*p == '\'' || *p == '"') {
        char q = *p++;
        size_t n = 0;
        while (*p && *p != q && n + 1 < sizeof ps->tok) {
            if (*p == '\\' && p[1])
                p++;
            ps->tok[n++] = *p++;
        }
        ps->tok[n] = 0;
        if (*p != q) {
            fail(ps, "a string that is not closed");
            ps->kind = T_END;
            ps->p = p;
            return;
        }
        p++;
        ps->kind = T_STR;
    } else if (isalpha((unsigned char)*p) || *p == '_') {
        size_t n = 0;
        while ((isalnum((unsigned char)p[n]) || p[n] == '_') && n + 1 < sizeof ps->tok)
            n++;
        memcpy(ps->tok, p, n);
        ps->tok[n] = 0;
        ps->kind = T_NAME;
        p += n;
    } else {
        static const char *const two[] = {"**", "//", "==", "!=", "<=", ">=", NULL};
        size_t n = 1;
        for (int i = 0; two[i]; i++)
            if (strncmp(p, two[i], 2) == 0)
                n = 2;
        if (n == 1 && !strchr("+-*/%<>()[],.", *p)) {
            fail(ps, "'%c' is not part of an expression", *p);
            ps->kind = T_END;
            ps->p = p;
            return;
        }
        memcpy(ps->tok, p, n);
        ps->tok[n] = 0;
        ps->kind = T_OP;
        p += n;
    }
    ps->p = p;
}

static bool is_op(const parser *ps, const char *op) { return ps->kind == T_OP && strcmp(ps->tok, op) == 0; }
static bool is_word(const parser *ps, const char *w) { return ps->kind == T_NAME && strcmp(ps->tok, w) == 0; }

static bool expect(parser *ps, const char *op)
{
    if (!is_op(ps, op)) {
        fail(ps, "expected '%s'%s%s", op, ps->kind == T_END ? " at the end" : " before '", ps->kind == T_END ? "" : ps->tok);
        if (ps->kind != T_END && !ps->failed)
            ps->failed = true;
        return false;
    }
    next(ps);
    return true;
}

/* ---- values -------------------------------------------------------------------------- */

bool hf_expr_truthy(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_TRUE: return true;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_STRING: return json_string_length(v) != 0;
    case JSON_ARRAY: return json_array_size(v) != 0;
    case JSON_OBJECT: return json_object_size(v) != 0;
    default: return false;
    }
}

char *hf_expr_text(const json_t *v)
{
    char buf[64];
    switch (json_typeof(v)) {
    case JSON_INTEGER: return xasprintf("%lld", (long long)json_integer_value(v));
    case JSON_REAL: {
        double d = json_real_value(v);
        for (int prec = 1; prec <= 17; prec++) { /* the shortest that reads back */
            snprintf(buf, sizeof buf, "%.*g", prec, d);
            if (strtod(buf, NULL) == d)
                break;
        }
        if (!strpbrk(buf, ".eEn")) /* a real stays a real: 2 -> 2.0 */
            strcat(buf, ".0");
        return xstrdup(buf);
    }
    case JSON_TRUE: return xstrdup("true");
    case JSON_FALSE: return xstrdup("false");
    case JSON_NULL: return xstrdup("null");
    case JSON_STRING: return xstrdup(json_string_value(v));
    default: {
        char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        char *r = xstrdup(t ? t : "");
        free(t);
        return r;
    }
    }
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "true or false";
    case JSON_NULL: return "null";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "a list";
    default: return "an object";
    }
}

static bool number(const json_t *v, double *d)
{
    if (json_is_integer(v))
        *d = (double)json_integer_value(v);
    else if (json_is_real(v))
        *d = json_real_value(v);
    else if (json_is_boolean(v))
        *d = json_is_true(v);
    else
        return false;
    return true;
}

static bool integer(const json_t *v, long long *i)
{
    if (json_is_integer(v))
        *i = (long long)json_integer_value(v);
    else if (json_is_boolean(v))
        *i = json_is_true(v);
    else
        return false;
    return true;
}

/* -1, 0, 1; *ok false where the two cannot be ordered */
static int compare(const json_t *a, const json_t *b, bool *ok)
{
    double x, y;
    *ok = true;
    if (json_is_string(a) && json_is_string(b))
        return strcmp(json_string_value(a), json_string_value(b));
    if (number(a, &x) && number(b, &y))
        return (x > y) - (x < y);
    *ok = false;
    return 0;
}

static bool equal(const json_t *a, const json_t *b)
{
    bool ok;
    int c = compare(a, b, &ok);
    return ok ? c == 0 : json_equal((json_t *)a, (json_t *)b);
}

/* ---- the grammar --------------------------------------------------------------------- */

static json_t *ternary(parser *ps);

static json_t *call(parser *ps, const char *fn)
{
    json_t *args[4] = {NULL};
    int n = 0;
    if (!is_op(ps, ")"))
        for (;;) {
            json_t *a = ternary(ps);
            if (!a)
                goto out;
            if (n == 4) {
                json_decref(a);
                fail(ps, "%s() takes at most 4 arguments", fn);
                goto out;
            }
            args[n++] = a;
            if (!is_op(ps, ","))
                break;
            next(ps);
        }
    if (!expect(ps, ")"))
        goto out;
    json_t *r = NULL;
    double d;
    long long i;
    if (SKIPPED(ps))
        r = json_null();
    else if (!strcmp(fn, "len") && n == 1 && (json_is_array(args[0]) || json_is_string(args[0]) || json_is_object(args[0])))
        r = json_integer(json_is_array(args[0]) ? (json_int_t)json_array_size(args[0])
                         : json_is_string(args[0]) ? (json_int_t)json_string_length(args[0])
                                                   : (json_int_t)json_object_size(args[0]));
    else if (!strcmp(fn, "int") && n == 1 && number(args[0], &d) && fabs(d) < 9.2e18)
        r = json_integer((json_int_t)d);
    else if (!strcmp(fn, "float") && n == 1 && number(args[0], &d))
        r = json_real(d);
    else if (!strcmp(fn, "bool") && n == 1)
        r = json_boolean(hf_expr_truthy(args[0]));
    else if (!strcmp(fn, "str") && n == 1) {
        char *t = hf_expr_text(args[0]);
        r = json_string(t);
        free(t);
    } else if (!strcmp(fn, "sqrt") && n == 1 && number(args[0], &d) && d >= 0)
        r = json_real(sqrt(d));
    else if ((!strcmp(fn, "min") || !strcmp(fn, "max")) && n >= 1) {
        /* of the arguments, or of one list's items, as Python's */
        bool one_list = n == 1 && json_is_array(args[0]);
        size_t count = one_list ? json_array_size(args[0]) : (size_t)n;
        json_t *best = count ? (one_list ? json_array_get(args[0], 0) : args[0]) : NULL;
        bool ok = best != NULL;
        for (size_t k = 1; k < count && ok; k++) {
            json_t *x = one_list ? json_array_get(args[0], k) : args[k];
            int c = compare(x, best, &ok);
            if (ok && (strcmp(fn, "min") == 0 ? c < 0 : c > 0))
                best = x;
        }
        r = ok ? json_incref(best) : NULL;
    } else if (!strcmp(fn, "set") && n == 1 && json_is_array(args[0])) {
        /* a list's distinct items, in first-seen order (a list here: len and in are what a
         * description asks of a set) */
        r = json_array();
        size_t k, j;
        json_t *x, *y;
        json_array_foreach(args[0], k, x) {
            bool seen = false;
            json_array_foreach(r, j, y) seen = seen || json_equal(x, y);
            if (!seen)
                json_array_append(r, x);
        }
    } else if (!strcmp(fn, "range") && n == 1 && integer(args[0], &i) && i >= 0 && i <= 100000) {
        r = json_array();
        for (long long k = 0; k < i; k++)
            json_array_append_new(r, json_integer(k));
    }
    if (!r)
        fail(ps, "%s() of %s: not a call this language has (len, int, float, bool, str, sqrt, min, max, set, range)", fn,
             n ? type_name(args[0]) : "nothing");
    for (int k = 0; k < n; k++)
        json_decref(args[k]);
    return r;
out:
    for (int k = 0; k < n; k++)
        json_decref(args[k]);
    return NULL;
}

/* A number token: an integer (int64) or a float; '_' separates digits, as Python's. */
static json_t *number_literal(parser *ps)
{
    char *end, clean[512];
    size_t k = 0;
    json_t *v;
    for (const char *s = ps->tok; *s && k + 1 < sizeof clean; s++)
        if (*s != '_')
            clean[k++] = *s;
    clean[k] = 0;
    if (strpbrk(clean, ".eE")) {
        double d = strtod(clean, &end);
        v = *end ? NULL : json_real(d);
    } else {
        long long i = strtoll(clean, &end, 10);
        v = *end || (i == LLONG_MAX && strcmp(clean, "9223372036854775807")) ? NULL : json_integer(i);
    }
    if (!v)
        return fail(ps, "'%s' is not a number", ps->tok);
    next(ps);
    return v;
}

/* A name: a constant, a call, or what the description or the config.json defines. */
static json_t *name_value(parser *ps)
{
    char name[512];
    json_t *v;
    snprintf(name, sizeof name, "%s", ps->tok);
    next(ps);
    if (!strcmp(name, "true") || !strcmp(name, "True"))
        return json_true();
    if (!strcmp(name, "false") || !strcmp(name, "False"))
        return json_false();
    if (!strcmp(name, "null") || !strcmp(name, "None"))
        return json_null();
    if (is_op(ps, "(")) {
        next(ps);
        return call(ps, name);
    }
    if (SKIPPED(ps))
        return json_null();
    if (!(v = ps->lookup(ps->user, name)))
        return fail(ps, "'%s' is not a name the description or the config.json defines", name);
    return v;
}

/* [a, b, ...], the '[' read. */
static json_t *list_literal(parser *ps)
{
    json_t *v = json_array();
    while (!is_op(ps, "]") && !ps->failed) {
        json_t *item = ternary(ps);
        if (!item)
            break;
        json_array_append_new(v, item);
        if (!is_op(ps, ","))
            break;
        next(ps);
    }
    if (ps->failed || !expect(ps, "]")) {
        json_decref(v);
        v = NULL;
    }
    return v;
}

/* v.name or v[i] (a member, an item, a character), consuming v. */
static json_t *member(parser *ps, json_t *v)
{
    json_t *key = NULL, *got = NULL;
    if (is_op(ps, ".")) {
        next(ps);
        if (ps->kind != T_NAME) {
            json_decref(v);
            return fail(ps, "a name after '.'");
        }
        key = json_string(ps->tok);
        next(ps);
    } else {
        next(ps);
        key = ternary(ps);
        if (!key || !expect(ps, "]")) {
            json_decref(key), json_decref(v);
            return NULL;
        }
    }
    long long i;
    if (SKIPPED(ps))
        got = json_null();
    else if (json_is_object(v) && json_is_string(key))
        got = json_object_get(v, json_string_value(key)), got = got ? json_incref(got) : json_null();
    else if (json_is_array(v) && integer(key, &i)) {
        long long n = (long long)json_array_size(v);
        got = i >= -n && i < n ? json_incref(json_array_get(v, (size_t)(i < 0 ? i + n : i))) : NULL;
    } else if (json_is_string(v) && integer(key, &i)) {
        long long n = (long long)json_string_length(v);
        char c[2] = {i >= -n && i < n ? json_string_value(v)[i < 0 ? i + n : i] : 0, 0};
        got = c[0] ? json_string(c) : NULL;
    }
    if (!got)
        fail(ps, "%s of %s: no such member or item", json_is_string(key) ? json_string_value(key) : "an index",
             type_name(v));
    json_decref(key), json_decref(v);
    return got;
}

static json_t *primary(parser *ps)
{
    if (++ps->depth > EXPR_MAX_DEPTH)
        return fail(ps, "nested more than %d deep", EXPR_MAX_DEPTH);
    json_t *v = NULL;
    if (ps->kind == T_NUM) {
        if (!(v = number_literal(ps)))
            return NULL;
    } else if (ps->kind == T_STR) {
        v = json_string(ps->tok);
        next(ps);
    } else if (ps->kind == T_NAME) {
        v = name_value(ps);
    } else if (is_op(ps, "(")) {
        next(ps);
        v = ternary(ps);
        if (v && !expect(ps, ")")) {
            json_decref(v);
            v = NULL;
        }
    } else if (is_op(ps, "[")) {
        next(ps);
        v = list_literal(ps);
    } else {
        return fail(ps, "%s where a value was expected", ps->kind == T_END ? "the end" : ps->tok);
    }
    while (v && (is_op(ps, ".") || is_op(ps, "["))) /* postfix: a.b, a[i] */
        v = member(ps, v);
    ps->depth--;
    return v;
}

/* a ** b, right-associative */
static json_t *unary(parser *ps);

/* The operand of a prefix or right-recursive operator (-x, not x, a ** b, x if c else y), one level
 * deeper: "- - - ... x" recurses as parentheses do, bounded as they are. NULL after an
 * error. */
static json_t *deeper(parser *ps, json_t *(*operand)(parser *))
{
    if (++ps->depth > EXPR_MAX_DEPTH)
        return fail(ps, "nested more than %d deep", EXPR_MAX_DEPTH);
    json_t *v = operand(ps);
    ps->depth--;
    return v;
}

static json_t *power(parser *ps)
{
    json_t *a = primary(ps);
    if (!a || !is_op(ps, "**"))
        return a;
    next(ps);
    json_t *b = deeper(ps, unary);
    double x, y;
    json_t *r = NULL;
    if (b && SKIPPED(ps))
        r = json_null();
    else if (b && number(a, &x) && number(b, &y)) {
        long long i, j;
        double p = pow(x, y);
        if (integer(a, &i) && integer(b, &j) && j >= 0 && fabs(p) < 9e18)
            r = json_integer((json_int_t)llround(p));
        else if (isfinite(p))
            r = json_real(p);
    }
    if (!r && b)
        fail(ps, "%s ** %s", type_name(a), type_name(b));
    json_decref(a), json_decref(b);
    return r;
}

static json_t *unary(parser *ps)
{
    if (is_op(ps, "-")) {
        next(ps);
        json_t *a = deeper(ps, unary);
        long long i;
        double d;
        json_t *r = !a ? NULL : SKIPPED(ps) ? json_null() : json_is_integer(a) && integer(a, &i) && i != LLONG_MIN ? json_integer(-i)
                       : json_is_real(a) && number(a, &d)                               ? json_real(-d)
                                                                                        : NULL;
        if (a && !r)
            fail(ps, "-%s", type_name(a));
        json_decref(a);
        return r;
    }
    return power(ps);
}

/* + - * / // % of two values: integers checked for overflow, '+' also joins strings and lists */
static json_t *arith(parser *ps, const char *op, json_t *a, json_t *b)
{
    long long i, j, k;
    double x, y;
    json_t *r = NULL;
    if (SKIPPED(ps))
        return json_null();
    if (!strcmp(op, "+") && json_is_string(a) && json_is_string(b)) {
        char *s = xasprintf("%s%s", json_string_value(a), json_string_value(b));
        r = json_string(s);
        free(s);
    } else if (!strcmp(op, "+") && json_is_array(a) && json_is_array(b)) {
        r = json_deep_copy(a);
        json_array_extend(r, b);
    } else if (json_is_integer(a) && json_is_integer(b) && integer(a, &i) && integer(b, &j) && strcmp(op, "/")) {
        bool over = false;
        if (!strcmp(op, "+"))
            over = __builtin_add_overflow(i, j, &k);
        else if (!strcmp(op, "-"))
            over = __builtin_sub_overflow(i, j, &k);
        else if (!strcmp(op, "*"))
            over = __builtin_mul_overflow(i, j, &k);
        else if (j == 0)
            return fail(ps, "%s by zero", op);
        else if (i == LLONG_MIN && j == -1)
            over = true;
        else if (!strcmp(op, "//"))
            k = i / j - ((i % j != 0) && ((i < 0) != (j < 0))); /* floor, as Python's */
        else
            k = i % j + ((i % j != 0) && ((i < 0) != (j < 0)) ? j : 0);
        r = over ? NULL : json_integer(k);
        if (over)
            return fail(ps, "%lld %s %lld overflows", i, op, j);
    } else if (number(a, &x) && number(b, &y) && !json_is_boolean(a) && !json_is_boolean(b)) {
        if ((!strcmp(op, "/") || !strcmp(op, "//") || !strcmp(op, "%")) && y == 0)
            return fail(ps, "%s by zero", op);
        double d = !strcmp(op, "+") ? x + y : !strcmp(op, "-") ? x - y : !strcmp(op, "*") ? x * y : !strcmp(op, "/") ? x / y
                   : !strcmp(op, "//") ? floor(x / y) : fmod(x, y);
        r = isfinite(d) ? json_real(d) : NULL;
    }
    if (!r)
        fail(ps, "%s %s %s", type_name(a), op, type_name(b));
    return r;
}

/* operand (op operand)*, left to right: the operators of one level of precedence. */
static json_t *arith_chain(parser *ps, const char *const *ops, json_t *(*operand)(parser *))
{
    json_t *a = operand(ps);
    for (;;) {
        int k = 0;
        while (ops[k] && !is_op(ps, ops[k]))
            k++;
        if (!a || !ops[k])
            return a;
        next(ps);
        json_t *b = operand(ps), *r = b ? arith(ps, ops[k], a, b) : NULL;
        json_decref(a), json_decref(b);
        a = r;
    }
}

static json_t *term(parser *ps)
{
    static const char *const ops[] = {"*", "/", "//", "%", NULL};
    return arith_chain(ps, ops, unary);
}

static json_t *sum(parser *ps)
{
    static const char *const ops[] = {"+", "-", NULL};
    return arith_chain(ps, ops, term);
}

static json_t *comparison(parser *ps)
{
    json_t *a = sum(ps);
    if (!a)
        return NULL;
    static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">=", NULL};
    int which = -1;
    bool in = false, not_in = false;
    for (int k = 0; ops[k]; k++)
        which = is_op(ps, ops[k]) ? k : which;
    if (is_word(ps, "in"))
        in = true;
    else if (is_word(ps, "not")) { /* not in */
        const char *save = ps->p;
        next(ps);
        if (!is_word(ps, "in")) {
            json_decref(a);
            (void)save;
            return fail(ps, "'not' where 'not in' was expected");
        }
        not_in = true;
    }
    if (which < 0 && !in && !not_in)
        return a;
    next(ps);
    json_t *b = sum(ps);
    if (!b) {
        json_decref(a);
        return NULL;
    }
    json_t *r = NULL;
    if (SKIPPED(ps)) {
        r = json_null();
    } else if (in || not_in) {
        bool found = false;
        if (json_is_array(b)) {
            size_t k;
            json_t *x;
            json_array_foreach(b, k, x) found = found || equal(a, x);
            r = json_boolean(found != not_in);
        } else if (json_is_object(b) && json_is_string(a)) {
            r = json_boolean((json_object_get(b, json_string_value(a)) != NULL) != not_in);
        } else if (json_is_string(b) && json_is_string(a)) {
            r = json_boolean((strstr(json_string_value(b), json_string_value(a)) != NULL) != not_in);
        } else {
            fail(ps, "%s in %s", type_name(a), type_name(b));
        }
    } else if (which <= 1) {
        r = json_boolean(equal(a, b) == (which == 0));
    } else {
        bool ok;
        int c = compare(a, b, &ok);
        if (!ok)
            fail(ps, "%s %s %s: they cannot be ordered", type_name(a), ops[which], type_name(b));
        else
            r = json_boolean(which == 2 ? c < 0 : which == 3 ? c <= 0 : which == 4 ? c > 0 : c >= 0);
    }
    json_decref(a), json_decref(b);
    return r;
}

static json_t *not_expr(parser *ps)
{
    if (is_word(ps, "not")) {
        next(ps);
        json_t *a = deeper(ps, not_expr);
        json_t *r = a ? json_boolean(!hf_expr_truthy(a)) : NULL;
        json_decref(a);
        return r;
    }
    return comparison(ps);
}

/* and / or: Python's short circuit, the deciding operand's value; the operand it does
 * not need is parsed only (x is not None and x > 3 looks at x > 3 only where x is one) */
static json_t *logic(parser *ps, bool is_or)
{
    json_t *a = is_or ? logic(ps, false) : not_expr(ps);
    while (a && is_word(ps, is_or ? "or" : "and")) {
        next(ps);
        bool decided = hf_expr_truthy(a) == is_or && !SKIPPED(ps);
        ps->skip += decided;
        json_t *b = is_or ? logic(ps, false) : not_expr(ps);
        ps->skip -= decided;
        if (!b) {
            json_decref(a);
            return NULL;
        }
        json_decref(decided ? b : a);
        a = decided ? a : b;
    }
    return a;
}

/* Where the value before a top-level 'if' ends: the tokens are scanned, not parsed, to the
 * first 'if' outside brackets, or to what ends the expression ('else', ',', a closing
 * bracket, the end). True with *at at that 'if'. Scanning, not parsing, keeps nested
 * conditional expressions linear: each is parsed once. */
static bool find_if(const parser *ps, parser *at)
{
    *at = *ps;
    at->err = NULL; /* a token error is reported when the value is parsed for real */
    at->errlen = 0;
    int open = 0;
    for (; at->kind != T_END && !at->failed; next(at)) {
        if (is_op(at, "(") || is_op(at, "["))
            open++;
        else if (is_op(at, ")") || is_op(at, "]") || (is_op(at, ",") && open == 0)) {
            if (open-- == 0)
                return false;
        } else if (open == 0 && is_word(at, "else"))
            return false;
        else if (open == 0 && is_word(at, "if"))
            return true;
    }
    return false;
}

/* x if c else y: the condition first, then the value and the other branch, the one not
 * taken parsed only */
static json_t *ternary(parser *ps)
{
    parser cond;
    if (!find_if(ps, &cond))
        return logic(ps, true); /* no condition: the value itself */
    cond.err = ps->err;
    cond.errlen = ps->errlen;
    next(&cond);
    json_t *c = logic(&cond, true);
    if (!c || !is_word(&cond, "else")) {
        json_decref(c);
        ps->failed = cond.failed;
        return c ? fail(ps, "'if' without 'else'") : NULL;
    }
    bool take_a = SKIPPED(ps) || hf_expr_truthy(c);
    json_decref(c);
    ps->skip += !take_a;
    json_t *a = logic(ps, true);
    ps->skip -= !take_a;
    if (!a)
        return NULL;
    if (!is_word(ps, "if")) { /* the scan and the parse disagree: a value that ends early */
        json_decref(a);
        return fail(ps, "'%s' where 'if' was expected", ps->kind == T_END ? "the end" : ps->tok);
    }
    ps->p = cond.p; /* past the condition, parsed above */
    ps->kind = cond.kind;
    memcpy(ps->tok, cond.tok, sizeof ps->tok);
    next(ps); /* else */
    ps->skip += take_a;
    json_t *b = deeper(ps, ternary); /* a chain of else ... if: bounded, each link scanned once more */
    ps->skip -= take_a;
    if (!b) {
        json_decref(a);
        return NULL;
    }
    json_decref(take_a ? b : a);
    return take_a ? a : b;
}

json_t *hf_expr_eval(const char *text, hf_expr_lookup lookup, void *user, char *err, size_t errlen)
{
    parser ps = {.text = text, .p = text, .lookup = lookup, .user = user, .err = err, .errlen = errlen};
    next(&ps);
    json_t *v = ps.failed ? NULL : ternary(&ps);
    if (v && ps.kind != T_END) {
        json_decref(v);
        v = fail(&ps, "'%s' after the value", ps.tok);
    }
    if (!v && !ps.failed)
        fail(&ps, "no value");
    return ps.failed ? (json_decref(v), NULL) : v;
}

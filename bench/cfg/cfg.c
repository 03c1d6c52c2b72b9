/* The config parser's entry points: reads the file, parses it with libyaml's document API
 * (whose nodes carry their line and column, so that every error names the node it is
 * about), then builds the model (cfg_model.c). */
#include "cfg_internal.h"

#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void mark_of_offset(const char *text, size_t offset, yaml_mark_t *mark)
{
    mark->line = mark->column = 0;
    for (size_t i = 0; i < offset && text[i]; i++) {
        if (text[i] == '\n')
            mark->line++, mark->column = 0;
        else
            mark->column++;
    }
}

bench_status cfg_load(const char *path, int64_t batch, model **out, char *err, size_t errlen)
{
    return cfg_load_shaped(path, batch, CFG_SHAPE_KEEP, out, err, errlen);
}

/* A folder, or a file named *.json that starts as a JSON object does (after a UTF-8
 * byte-order mark, as some editors save it): a Hugging Face config (a YAML config may be
 * named anything, and begin with a comment or a key). Only a regular file is looked
 * into (a FIFO is never waited on: fileio.h). */
bool cfg_is_hf(const char *path)
{
    struct stat s;
    size_t n = strlen(path);
    if (stat(path, &s) == 0 && S_ISDIR(s.st_mode))
        return true;
    if (n < 5 || strcmp(path + n - 5, ".json") != 0)
        return false;
    char err[64], head[512];
    int fd = fileio_open(path, (size_t)-1, NULL, &s, NULL, err, sizeof err);
    if (fd < 0)
        return false;
    ssize_t got = read(fd, head, sizeof head);
    close(fd);
    size_t i = got >= 3 && memcmp(head, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    while (got > 0 && i < (size_t)got && head[i] && strchr(" \t\n\r", head[i]))
        i++;
    return got > 0 && i < (size_t)got && head[i] == '{';
}

bench_status cfg_load_shaped(const char *path, int64_t batch, cfg_shape shape, model **out, char *err,
                             size_t errlen)
{
    *out = NULL;
    if (cfg_is_hf(path))
        return cfg_load_hf(path, batch, shape, out, err, errlen);
    strbuf text = {0};
    char why[1200];
    bench_status st = fileio_read(path, CFG_MAX_FILE_BYTES, 0, NULL, &text, NULL, why, sizeof why);
    if (st == BENCH_OK)
        st = cfg_load_text_shaped(path, text.data, text.len, batch, shape, out, err, errlen);
    else
        snprintf(err, errlen, "%s%s", why, strstr(why, "larger than") ? " (use 'repeat' for long stacks)" : "");
    strbuf_free(&text);
    return st;
}

bench_status cfg_load_text(const char *path, const char *text, size_t len, int64_t batch, model **out, char *err,
                           size_t errlen)
{
    return cfg_load_text_shaped(path, text, len, batch, CFG_SHAPE_KEEP, out, err, errlen);
}

bench_status cfg_load_text_shaped(const char *path, const char *text, size_t len, int64_t batch, cfg_shape shape,
                                  model **out, char *err, size_t errlen)
{
    *out = NULL;
    if (len > CFG_MAX_FILE_BYTES) {
        snprintf(err, errlen, "%s: the config is larger than 1 MiB (use 'repeat' for long stacks)", path);
        return BENCH_ERR_USAGE;
    }
    return cfg_load_built(path, text, len, batch, shape, out, err, errlen);
}

bench_status cfg_load_built(const char *path, const char *text, size_t len, int64_t batch, cfg_shape shape,
                            model **out, char *err, size_t errlen)
{
    cfg_ctx c = {.path = path, .err = err, .errlen = errlen, .shape = shape};
    yaml_parser_t parser;
    *out = NULL;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s: cannot initialise the YAML parser", path);
        return BENCH_ERR_USAGE;
    }
    bench_status st = BENCH_ERR_USAGE;
    yaml_document_t doc;
    yaml_mark_t deep;
    if (cfg_yaml_too_deep(text, len, &deep)) {
        cfg_fail_at(&c, deep, "nesting is deeper than %d levels", CFG_MAX_DEPTH);
        goto out_parser;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        yaml_mark_t mark = parser.problem_mark;
        if (parser.error == YAML_READER_ERROR)
            mark_of_offset(text, parser.problem_offset, &mark);
        cfg_fail_at(&c, mark, "YAML syntax error: %s%s%s", parser.problem ? parser.problem : "unknown problem",
                parser.context ? " " : "", parser.context ? parser.context : "");
        goto out_parser;
    }
    if (!yaml_document_get_root_node(&doc)) {
        yaml_mark_t start = {0, 0, 0};
        cfg_fail_at(&c, start, "the config is empty; expected a mapping with name, input and layers");
        yaml_document_delete(&doc);
        goto out_parser;
    }
    yaml_document_t second;
    if (!yaml_parser_load(&parser, &second)) {
        cfg_fail_at(&c, parser.problem_mark, "YAML syntax error: %s", parser.problem ? parser.problem : "unknown problem");
        yaml_document_delete(&doc);
        goto out_parser;
    }
    bool more = yaml_document_get_root_node(&second) != NULL;
    yaml_mark_t second_mark = second.start_mark;
    yaml_document_delete(&second);
    if (more) {
        cfg_fail_at(&c, second_mark, "only one YAML document is allowed in a config");
        yaml_document_delete(&doc);
        goto out_parser;
    }
    st = cfg_build_document(path, &doc, batch, shape, out, err, errlen);
out_parser:
    yaml_parser_delete(&parser);
    return st;
}

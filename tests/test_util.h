/* Minimal test helpers: count checks, print failures with their place. */
#ifndef LAYERBENCH_TEST_UTIL_H
#define LAYERBENCH_TEST_UTIL_H

#include <stdio.h>

static int test_failures, test_checks;

#define EXPECT(cond, ...)                                                                    \
    do {                                                                                     \
        test_checks++;                                                                       \
        if (!(cond)) {                                                                       \
            test_failures++;                                                                 \
            fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
        }                                                                                    \
    } while (0)

/* Prints the tally in the plain "N passed, N failed" form and returns the exit code. */
static inline int test_summary(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, test_checks - test_failures, test_failures);
    return test_failures ? 1 : 0;
}

#endif

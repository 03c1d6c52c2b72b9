/* Build identity, recorded in every run context. */
#ifndef LAYERBENCH_VERSION_H
#define LAYERBENCH_VERSION_H

#ifndef LAYERBENCH_VERSION
#define LAYERBENCH_VERSION "0.1.0"
#endif
#ifndef LAYERBENCH_BUILD_TYPE
#define LAYERBENCH_BUILD_TYPE "unknown"
#endif

/* The git revision the binary was built from ("abc1234", "abc1234-dirty", or
 * "unknown" outside a checkout); generated at build time. */
const char *layerbench_git_revision(void);

#endif

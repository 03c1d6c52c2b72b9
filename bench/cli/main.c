/* The bench command line: parses it (cli.c), then runs the command (commands.c,
 * cmd_measure.c), with the OpenMP and stdout set-up every command shares. */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "log.h"
#include "procs.h"
#include "report.h"
#include "schedstat.h"
#include "signals.h"

/* libgomp spins for GOMP_SPINCOUNT (300000 by default) before a worker sleeps. On the
 * 2-core machine we measure on, that default made convolutions run 2x slower for
 * seconds at a time, in and out of phase, while 10000 was stable and fastest (the
 * measurements are in results/README.md). libgomp reads the setting when it loads, so
 * it must be in the environment before the process starts: for the commands that time
 * (run, sweep), set it and exec ourselves once. A user's own OMP_WAIT_POLICY or
 * GOMP_SPINCOUNT is left alone, and so is a process under valgrind (whose
 * /proc/self/exe is valgrind itself): set GOMP_SPINCOUNT=10000 yourself there. */
static void set_openmp_spin(char **argv)
{
    const char *preload = getenv("LD_PRELOAD");
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || (preload && strstr(preload, "vgpreload")))
        return;
    setenv("GOMP_SPINCOUNT", "10000", 1);
    execv("/proc/self/exe", argv); /* returns only on failure: go on with the default */
}

/* Output that could not be written (a full disk, a closed pipe) is a failure. */
static int finish_stdout(int rc)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        log_msg("writing to standard output failed: %s", strerror(errno));
        return rc ? rc : 1;
    }
    return rc;
}

/* The address space OpenBLAS's constructor takes (ulimit -v): it maps a 128 MiB buffer as
 * the program loads, and under a limit that does not leave room it retries forever
 * (measured: `bench --version` needs 310 MiB on Debian 12's OpenBLAS 0.3.21). */
#define MAIN_MIN_ADDRESS_SPACE ((rlim_t)384 << 20)

/* Runs before every library's constructor (an executable's .preinit_array comes first):
 * a limit under what OpenBLAS's takes is said and the process ends, where it would
 * otherwise hang before main. */
static void check_address_space(int argc, char **argv, char **envp)
{
    (void)argc, (void)argv, (void)envp;
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= MAIN_MIN_ADDRESS_SPACE)
        return;
    char msg[300];
    int n = snprintf(msg, sizeof msg, "bench: the address-space limit (ulimit -v) is %llu MiB, under the %llu MiB that "
                                      "OpenBLAS takes as it loads (it would wait forever): raise ulimit -v\n",
                     (unsigned long long)(rl.rlim_cur >> 20), (unsigned long long)(MAIN_MIN_ADDRESS_SPACE >> 20));
    if (n > 0 && write(STDERR_FILENO, msg, (size_t)n) < 0)
        _exit(2);
    _exit(2);
}
__attribute__((section(".preinit_array"), used)) static void (*const preinit)(int, char **, char **) = check_address_space;

static int run_command(int argc, char **argv);

int main(int argc, char **argv) { return finish_stdout(run_command(argc, argv)); }

static int run_command(int argc, char **argv)
{
    /* a file past `ulimit -f` is a write that fails with EFBIG, said and handled like a
     * full disk, not a SIGXFSZ that kills the process after its work is done */
    signal(SIGXFSZ, SIG_IGN);
    if (argc == 3 && strcmp(argv[1], "--worker") == 0) { /* a worker process: its set comes through a pipe */
        signals_catch();
        return cmd_worker();
    }
    cli c;
    int rc = cli_parse(argc, argv, &c);
    if (rc >= 0) {
        cli_free(&c);
        return rc;
    }
    if (strcmp(c.command, "run") == 0 || (strcmp(c.command, "sweep") == 0 && !c.slurm.dir)) {
        set_openmp_spin(argv);
        /* before the config is read and the backends start (a second or more): a signal
         * that comes then stops the run before its first set, not never */
        signals_catch();
    }
    if (strcmp(c.command, "schema") == 0)
        return cmd_schema();
    if (strcmp(c.command, "compare") == 0)
        return cmd_compare(&c.cmp);
    if (strcmp(c.command, "merge") == 0)
        return cmd_merge(&c.merge);
    const cli_model *m = &c.model;
    if (!strcmp(c.command, "list"))
        rc = cmd_list(&c, m->batches[0]);
    else if (!strcmp(c.command, "check"))
        rc = cmd_check(&c, m->batches[0]);
    else if (c.slurm.dir)
        rc = cmd_slurm_sweep(argc, argv, &c, m->batches, m->n_batches);
    else
        rc = cmd_measure(argc, argv, &c, m->batches, m->n_batches, strcmp(c.command, "sweep") == 0);
    cli_free(&c);
    return rc;
}

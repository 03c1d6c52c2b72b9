/* Sweeps on a Slurm cluster (docs/slurm.md): what `bench sweep --slurm` writes into its
 * folder and `bench merge` and `--resume` read back.
 *
 * The folder holds
 *   shards.tsv            the sweep: its shared options and one line per shard (config,
 *                         batch, backend, dtype, pass, tokens, kv_len); written once, and what
 *                         --resume compares to refuse a folder of another sweep
 *   jobs.tsv              every array and merge job submitted, one line each
 *   array-R-I.sbatch      the scripts (R: 0 for the first submission, then one per --resume)
 *   part-A_T.csv, .json   array job A's task T: one shard's results (bench sweep --csv)
 *   part-A_T.status       the task's state, written by its script: shard, running or done,
 *                         bench's exit status, host, node, job ids
 *   A_T.out               the task's output (sbatch --output)
 */
#ifndef LAYERBENCH_SLURM_H
#define LAYERBENCH_SLURM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strbuf.h"
#include "util.h"

#define SLURM_SHARDS_FILE "shards.tsv"
#define SLURM_JOBS_FILE "jobs.tsv"
/* The largest shards.tsv or jobs.tsv read back, and the largest status file. */
#define SLURM_LIST_MAX_BYTES ((size_t)64 << 20)
#define SLURM_STATUS_MAX_BYTES ((size_t)64 << 10)
/* The longest folder path a sweep takes (its files' names are built beside it). */
#define SLURM_MAX_DIR 900

typedef struct slurm_shard {
    char *config;        /* absolute path; owned */
    int64_t batch;
    char backend[16];
    char dtype[8];
    char pass[12];       /* forward or backward (a shards.tsv of seven columns, from before passes: forward) */
    int64_t tokens;      /* -1: not an axis of the sweep */
    int64_t kv_len;      /* -1: not an axis of the sweep */
} slurm_shard;

typedef enum slurm_outcome {
    SLURM_OK,          /* a part whose task finished with exit status 0 */
    SLURM_FAILED,      /* its task finished with another status */
    SLURM_UNFINISHED,  /* its task started and never said it finished: killed, or still running */
    SLURM_MISSING,     /* no task of it started (cancelled, pending, never submitted) */
} slurm_outcome;

/* One task's status file. */
typedef struct slurm_attempt {
    int shard;
    bool done;             /* state=done (else running) */
    int exit_code;         /* bench's exit status when done */
    long long array_job;   /* the array job's id: the later submission has the larger */
    char task[16];
    char host[128], node[128], job_id[32];
    char stem[1200];       /* DIR/part-A_T */
} slurm_attempt;

/* What a folder says of each shard: the attempt chosen (a finished one with status 0,
 * the latest such; else the latest attempt), or NULL. */
typedef struct slurm_state {
    slurm_attempt *attempts;
    int n_attempts;
    const slurm_attempt **chosen;  /* per shard */
    slurm_outcome *outcome;        /* per shard */
    int n_unreadable;              /* status files that are none (malformed, another sweep's shard) */
    char unreadable[1300];         /* the first of them */
} slurm_state;

/* shards.tsv's text for these shards and the options every shard repeats (one line,
 * shell-quoted). Caller frees. */
char *slurm_shards_text(const char *options, const slurm_shard *shards, int n);

/* Reads DIR/shards.tsv: its text (owned by the caller) and its shards (free with
 * slurm_shards_free). BENCH_ERR_USAGE with the reason in err when it is missing or not
 * such a file. */
bench_status slurm_shards_read(const char *dir, char **text, slurm_shard **shards, int *n, char *err, size_t errlen);

void slurm_shards_free(slurm_shard *shards, int n);

/* Scans DIR's status files for the n shards. Free with slurm_state_free. */
void slurm_state_scan(const char *dir, int n, slurm_state *st);

void slurm_state_free(slurm_state *st);

/* "configs/a.yaml, batch 8, cpu, fp32[, tokens 128][, kv_len 4096]" into buf. */
const char *slurm_shard_describe(const slurm_shard *s, char *buf, size_t len);

/* What happened to shard i, for messages: "failed (exit 2): see DIR/12_3.out". */
const char *slurm_outcome_describe(const slurm_state *st, int i, const char *dir, char *buf, size_t len);

/* s quoted for a POSIX shell (single quotes where needed), appended to b. */
void slurm_shell_quote(strbuf *b, const char *s);

#endif

/* Signals: an interruption stops long work at the next layer and keeps what was finished. */
#ifndef LAYERBENCH_SIGNALS_H
#define LAYERBENCH_SIGNALS_H

/* Set by SIGINT, SIGTERM and SIGHUP once signals_catch() ran (0: none): long work
 * stops at the next layer and what was finished is kept. A second signal ends the
 * process at once. */
extern volatile int signals_interrupted;
void signals_catch(void);

#endif

// normgrow: shared helpers for status reporting and invariants.
//
// Functions that can fail on input (files, configs, shapes) return 0 on success
// and -1 on failure, after setting one message (ng_error) that names the file,
// tensor or field. The CLI prints that message on one line and exits non-zero.
// A broken internal invariant is a programming error: NG_ASSERT aborts with
// file:line.
#ifndef NORMGROW_COMMON_H
#define NORMGROW_COMMON_H

#include <stddef.h>
#include <stdint.h>

#define NG_VERSION "0.7.0"

#if defined(__GNUC__)
#define NG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define NG_PRINTF(a, b)
#endif

// Record the current error message (replaces the previous one); returns -1.
// Control characters in it (a tensor name holding a newline or a terminal
// escape) are written as \n, \t, \r or \xHH, so that it stays one line.
int ng_fail(const char *fmt, ...) NG_PRINTF(1, 2);
// The last message recorded by ng_fail in this thread ("" if none).
const char *ng_error(void);
// Prefix the current message with "<prefix>: " (for adding the file name)
// unless it already starts so; returns -1.
int ng_fail_prefix(const char *prefix);

_Noreturn void ng_abort_at(const char *file, int line, const char *what);
#define NG_ASSERT(cond) \
  do { if (!(cond)) ng_abort_at(__FILE__, __LINE__, #cond); } while (0)

// Allocation that aborts on out-of-memory (a programming/environment failure,
// not an input error: sizes are validated before anything is allocated).
void *ng_xmalloc(size_t n);
void *ng_xcalloc(size_t n, size_t size);
void *ng_xrealloc(void *p, size_t n);
char *ng_xstrdup(const char *s);

// Seconds on a monotonic clock (for rates and ETAs, never for results).
double ng_now(void);

// Peak resident memory of this process in bytes (Linux: VmHWM of
// /proc/self/status; elsewhere getrusage's ru_maxrss).
int64_t ng_peak_rss(void);
// Start a new peak at the current resident size (Linux: /proc/self/clear_refs
// "5"); returns -1 where the peak cannot be reset.
int ng_peak_rss_reset(void);

// Checked size arithmetic for sizes that come from files: returns -1 on overflow.
int ng_mul_size(size_t a, size_t b, size_t *out);

// Bytes of memory this machine has (physical pages x page size).
double ng_machine_memory(void);
// 0 when `bytes` (what `what`, a phrase naming the fields that set it, would
// allocate) fit in the machine's memory; else -1 with "<what> needs X GiB, more
// than the Y GiB of memory of this machine".
int ng_check_memory(double bytes, const char *what);

#endif

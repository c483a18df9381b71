// normgrow: error messages, checked allocation, size arithmetic, clock and peak memory.
#include "normgrow/common.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define NG_ERROR_LEN 1024
static _Thread_local char ng_err_buf[NG_ERROR_LEN];

// src into dst [n] with control characters written as \n, \t, \r or \xHH
// (C1 controls, UTF-8 c2 80..9f, as both bytes): a message stays one line and
// cannot drive the terminal, whatever names and paths a file holds.
static void escape_controls(char *dst, size_t n, const char *src) {
  size_t j = 0;
  for (const unsigned char *p = (const unsigned char *)src; *p && j + 9 < n; p++) {
    bool c1 = p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f;
    if (*p >= 0x20 && *p != 0x7f && !c1) {
      dst[j++] = (char)*p;
      continue;
    }
    const char *named = *p == '\n' ? "\\n" : *p == '\t' ? "\\t" : *p == '\r' ? "\\r" : NULL;
    if (named) j += (size_t)snprintf(dst + j, n - j, "%s", named);
    else if (c1) j += (size_t)snprintf(dst + j, n - j, "\\x%02x\\x%02x", p[0], p[1]), p++;
    else j += (size_t)snprintf(dst + j, n - j, "\\x%02x", *p);
  }
  dst[j] = '\0';
}

int ng_fail(const char *fmt, ...) {
  char raw[NG_ERROR_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  escape_controls(ng_err_buf, sizeof ng_err_buf, raw);
  return -1;
}

const char *ng_error(void) { return ng_err_buf; }

int ng_fail_prefix(const char *prefix) {
  size_t n = strlen(prefix);
  if (strncmp(ng_err_buf, prefix, n) == 0 && strncmp(ng_err_buf + n, ": ", 2) == 0)
    return -1;  // already names it
  char old[NG_ERROR_LEN], raw[NG_ERROR_LEN];
  memcpy(old, ng_err_buf, sizeof old);
  escape_controls(raw, sizeof raw, prefix);  // old is escaped already
  if (snprintf(ng_err_buf, sizeof ng_err_buf, "%s: %s", raw, old) >= (int)sizeof ng_err_buf)
    memcpy(ng_err_buf + sizeof ng_err_buf - 4, "...", 4);  // keep the line, mark the cut
  return -1;
}

_Noreturn void ng_abort_at(const char *file, int line, const char *what) {
  fprintf(stderr, "normgrow: internal error at %s:%d: %s\n", file, line, what);
  abort();
}

void *ng_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) ng_abort_at(__FILE__, __LINE__, "out of memory");
  return p;
}

void *ng_xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) ng_abort_at(__FILE__, __LINE__, "out of memory");
  return p;
}

void *ng_xrealloc(void *p, size_t n) {
  p = realloc(p, n ? n : 1);
  if (!p) ng_abort_at(__FILE__, __LINE__, "out of memory");
  return p;
}

char *ng_xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = ng_xmalloc(n);
  memcpy(d, s, n);
  return d;
}

double ng_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int64_t ng_peak_rss(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long long kib = -1;
  while (f && kib < 0 && fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %lld kB", &kib) != 1) kib = -1;
  if (f) fclose(f);
  if (kib < 0) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    kib = ru.ru_maxrss;  // KiB on Linux
  }
  return (int64_t)kib * 1024;
}

int ng_peak_rss_reset(void) {
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (!f) return -1;
  bool ok = fputs("5", f) >= 0;
  return fclose(f) == 0 && ok ? 0 : -1;
}

double ng_machine_memory(void) {
  return (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
}

int ng_check_memory(double bytes, const char *what) {
  double have = ng_machine_memory(), gib = (double)(1 << 30);
  if (bytes <= have) return 0;
  return ng_fail("%s needs %.1f GiB, more than the %.1f GiB of memory of this machine", what,
                 bytes / gib, have / gib);
}

int ng_mul_size(size_t a, size_t b, size_t *out) {
  if (a != 0 && b > SIZE_MAX / a) return -1;
  *out = a * b;
  return 0;
}

// normgrow: whole-file I/O: mapping, reading, atomic replacement (fileio.h).
#include "normgrow/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "normgrow/common.h"

// ---------------------------------------------------------------- paths

char *ng_path_join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = ng_xmalloc(n);
  snprintf(p, n, "%s/%s", dir, name);
  return p;
}

// One level: `dir` made, or already a directory.
static int make_one_dir(const char *dir) {
  if (mkdir(dir, 0777) == 0) return 0;
  int err = errno;
  struct stat st;
  if (err == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
  if (err == EEXIST) return ng_fail("%s: exists and is not a directory", dir);
  return ng_fail("%s: cannot create directory: %s", dir, strerror(err));
}

int ng_make_dir(const char *dir) {
  char *path = ng_xstrdup(dir);
  int rc = 0;
  for (char *p = path + 1; *p && rc == 0; p++) {  // every parent, as mkdir -p
    if (*p != '/') continue;
    *p = 0;
    rc = make_one_dir(path);
    *p = '/';
  }
  if (rc == 0) rc = make_one_dir(path);
  free(path);
  return rc;
}

// ---------------------------------------------------------------- reading

int ng_map_file(const char *path, size_t min_size, const char *what, uint8_t **map,
                size_t *size) {
  NG_ASSERT(min_size > 0);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO is refused, not waited on
  if (fd < 0) return ng_fail("%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  int rc = 0;
  if (fstat(fd, &st) != 0) {
    rc = ng_fail("%s: cannot stat: %s", path, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    rc = ng_fail("%s: not a regular file", path);
  } else if (st.st_size < (off_t)min_size) {
    rc = ng_fail("%s: file is %lld bytes, too short for the %zu-byte %s", path,
                 (long long)st.st_size, min_size, what);
  } else {
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      rc = ng_fail("%s: cannot mmap: %s", path, strerror(errno));
    } else {
      *map = m;
      *size = (size_t)st.st_size;
    }
  }
  close(fd);  // the mapping stays valid
  return rc;
}

void ng_unmap_file(uint8_t *map, size_t size) {
  if (map) munmap(map, size);
}

int ng_read_file(const char *path, size_t max_size, char **text, size_t *len) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return ng_fail("%s: cannot open: %s", path, strerror(errno));
  size_t n = 0, cap = 1 << 16;
  char *buf = ng_xmalloc(cap);
  int rc = 0;
  // Always ask for at least one byte, keeping one for the NUL.
  for (size_t got; rc == 0 && (got = fread(buf + n, 1, cap - 1 - n, fp)) > 0;) {
    n += got;
    if (n > max_size) {
      rc = ng_fail("%s: larger than %zu bytes", path, max_size);
    } else if (n == cap - 1) {
      NG_ASSERT(cap <= SIZE_MAX / 2);
      cap *= 2;
      buf = ng_xrealloc(buf, cap);
    }
  }
  if (rc == 0 && ferror(fp)) rc = ng_fail("%s: cannot read: %s", path, strerror(errno));
  fclose(fp);
  if (rc != 0) {
    free(buf);
    return -1;
  }
  buf[n] = '\0';
  *text = buf;
  if (len) *len = n;
  return 0;
}

// ---------------------------------------------------------------- writing

static int write_error(const char *path, int err) {
  return ng_fail("%s: cannot write: %s", path, err ? strerror(err) : "write error");
}

int ng_temp_create(ng_temp_file *t, const char *path) {
  size_t cap = strlen(path) + 32;
  t->tmp = ng_xmalloc(cap);
  snprintf(t->tmp, cap, "%s.tmp.%ld", path, (long)getpid());
  t->path = path;
  t->fp = fopen(t->tmp, "wb");
  if (t->fp) return 0;
  ng_fail("%s: cannot create %s: %s", path, t->tmp, strerror(errno));
  free(t->tmp);
  memset(t, 0, sizeof *t);
  return -1;
}

// fsync of the directory holding `path`, so that a rename in it is on disk.
static int sync_dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? ng_xstrdup(path) : ng_xstrdup(".");
  if (slash) dir[slash == path ? 1 : slash - path] = 0;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), err = 0;
  if (fd < 0 || fsync(fd) != 0) err = errno;
  if (fd >= 0) close(fd);
  free(dir);
  return err ? ng_fail("%s: renamed, but cannot sync its directory: %s", path, strerror(err)) : 0;
}

int ng_temp_commit(ng_temp_file *t, int rc) {
  if (rc == 0 && (fflush(t->fp) != 0 || fsync(fileno(t->fp)) != 0))
    rc = write_error(t->path, errno);
  if (fclose(t->fp) != 0 && rc == 0) rc = write_error(t->path, errno);
  if (rc == 0 && rename(t->tmp, t->path) != 0) rc = write_error(t->path, errno);
  if (rc != 0) remove(t->tmp);
  if (rc == 0) rc = sync_dir_of(t->path);
  free(t->tmp);
  memset(t, 0, sizeof *t);
  return rc;
}

int ng_write_atomic(const char *path, ng_write_fn fill, void *ctx) {
  ng_temp_file t;
  if (ng_temp_create(&t, path) != 0) return -1;
  errno = 0;  // a fill that fails without errno still gets a message
  int rc = fill(t.fp, ctx) ? 0 : write_error(path, errno);
  return ng_temp_commit(&t, rc);
}

// ng_write_fn for ng_write_text_atomic: ctx is the NUL-terminated text.
static bool put_text(FILE *fp, void *ctx) {
  const char *text = ctx;
  size_t n = strlen(text);
  if (fwrite(text, 1, n, fp) != n) return false;
  return (n > 0 && text[n - 1] == '\n') || fputc('\n', fp) != EOF;
}

int ng_write_text_atomic(const char *path, const char *text) {
  return ng_write_atomic(path, put_text, (void *)text);  // put_text only reads it
}

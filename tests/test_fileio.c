// Tests for ref/fileio.c: mapping and reading whole files (and their one-line
// errors), atomic replacement (contents, no temp file left, the old file kept
// on failure), directories and path joining.
#include "normgrow/common.h"
#include "normgrow/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static char g_dir[] = "/tmp/ng_test_fileio_XXXXXX";

// "<test dir>/<name>" (malloc'd).
static char *tmp_path(const char *name) { return ng_path_join(g_dir, name); }

static void write_bytes(const char *path, const char *data, size_t n) {
  FILE *fp = fopen(path, "wb");
  NG_ASSERT(fp && fwrite(data, 1, n, fp) == n && fclose(fp) == 0);
}

// The file's contents, NUL-terminated (test helper: asserts it can be read).
static char *contents(const char *path) {
  char *text;
  NG_ASSERT(ng_read_file(path, SIZE_MAX, &text, NULL) == 0);
  return text;
}

static bool has_temp_file(void) {
  DIR *d = opendir(g_dir);
  NG_ASSERT(d);
  bool found = false;
  for (struct dirent *e; (e = readdir(d)) != NULL;) found |= strstr(e->d_name, ".tmp.") != NULL;
  closedir(d);
  return found;
}

// The call failed and its message contains `want`.
static void expect_error(const char *name, int rc, const char *want) {
  CHECK(rc == -1 && strstr(ng_error(), want), name, "rc %d, message \"%s\", want \"%s\"", rc,
        ng_error(), want);
}

static void test_map(void) {
  char *path = tmp_path("map.bin"), *missing = tmp_path("absent.bin");
  write_bytes(path, "0123456789", 10);
  uint8_t *map = NULL;
  size_t size = 0;
  int rc = ng_map_file(path, 10, "test header", &map, &size);
  CHECK(rc == 0 && size == 10 && memcmp(map, "0123456789", 10) == 0, "map a whole file",
        "rc %d, size %zu: %s", rc, size, ng_error());
  if (rc == 0) ng_unmap_file(map, size);
  ng_unmap_file(NULL, 0);  // a no-op, as for a reader that never mapped

  char want[600];
  snprintf(want, sizeof want, "%s: file is 10 bytes, too short for the 11-byte test header", path);
  expect_error("map refuses a short file, naming the minimum",
               ng_map_file(path, 11, "test header", &map, &size), want);
  snprintf(want, sizeof want, "%s: cannot open: ", missing);
  expect_error("map names a missing file", ng_map_file(missing, 1, "x", &map, &size), want);
  snprintf(want, sizeof want, "%s: not a regular file", g_dir);
  expect_error("map refuses a directory", ng_map_file(g_dir, 1, "x", &map, &size), want);
  free(path);
  free(missing);
}

static void test_read(void) {
  char *path = tmp_path("read.txt"), *missing = tmp_path("absent.txt");
  write_bytes(path, "ab\0cd", 5);
  char *text = NULL;
  size_t len = 0;
  int rc = ng_read_file(path, 5, &text, &len);
  CHECK(rc == 0 && len == 5 && memcmp(text, "ab\0cd", 6) == 0,
        "read a whole file (NUL bytes kept, NUL-terminated)", "rc %d, len %zu", rc, len);
  free(text);
  expect_error("read refuses a file over the limit", ng_read_file(path, 4, &text, &len),
               "read.txt: larger than 4 bytes");
  expect_error("read names a missing file", ng_read_file(missing, 9, &text, &len),
               "absent.txt: cannot open: ");
  expect_error("read names a directory", ng_read_file(g_dir, 9, &text, &len), ": cannot read: ");

  // Past the first buffer, so that it grows.
  size_t big = 200000;
  char *data = ng_xmalloc(big);
  for (size_t i = 0; i < big; i++) data[i] = (char)('a' + i % 26);
  write_bytes(path, data, big);
  rc = ng_read_file(path, big, &text, &len);
  CHECK(rc == 0 && len == big && memcmp(text, data, big) == 0 && text[big] == 0,
        "read a file larger than the first buffer", "rc %d, len %zu", rc, len);
  free(text);
  free(data);
  free(path);
  free(missing);
}

// ng_write_fn that writes some bytes and then fails (as a full disk would).
static bool failing_fill(FILE *fp, void *ctx) {
  (void)ctx;
  fputs("partial", fp);
  errno = ENOSPC;
  return false;
}

static void test_write(void) {
  char *path = tmp_path("out.txt");
  CHECK(ng_write_text_atomic(path, "one") == 0, "write a text file", "%s", ng_error());
  char *text = contents(path);
  CHECK(strcmp(text, "one\n") == 0, "a newline ends the text", "got \"%s\"", text);
  free(text);
  CHECK(ng_write_text_atomic(path, "two\n") == 0, "replace a text file", "%s", ng_error());
  text = contents(path);
  CHECK(strcmp(text, "two\n") == 0, "no second newline after one", "got \"%s\"", text);
  free(text);
  CHECK(!has_temp_file(), "a write leaves no temp file", "found *.tmp.* in %s", g_dir);

  expect_error("a failed fill names the path and the error",
               ng_write_atomic(path, failing_fill, NULL), "out.txt: cannot write: No space left");
  text = contents(path);
  CHECK(strcmp(text, "two\n") == 0 && !has_temp_file(),
        "a failed write keeps the old file and removes its temp file", "got \"%s\"", text);
  free(text);

  // The writer's own message survives when it reports the failure itself.
  ng_temp_file t;
  NG_ASSERT(ng_temp_create(&t, path) == 0);
  expect_error("commit keeps the writer's message",
               ng_temp_commit(&t, ng_fail("writer: broken on purpose")),
               "writer: broken on purpose");
  CHECK(!has_temp_file(), "an abandoned temp file is removed", "found *.tmp.* in %s", g_dir);

  char *nodir = tmp_path("no/such/dir.txt");
  expect_error("write names a path whose directory is missing", ng_write_text_atomic(nodir, "x"),
               "no/such/dir.txt: cannot create ");
  free(nodir);

  // rename() cannot replace a directory: the contents were written, then refused.
  char *sub = tmp_path("sub");
  NG_ASSERT(mkdir(sub, 0777) == 0);
  expect_error("write over a directory fails", ng_write_text_atomic(sub, "x"),
               "sub: cannot write: ");
  CHECK(!has_temp_file(), "a failed rename removes the temp file", "found *.tmp.* in %s", g_dir);
  NG_ASSERT(rmdir(sub) == 0);
  free(sub);
  free(path);
}

static void test_dirs(void) {
  char *path = ng_path_join("a/b", "c.txt");
  CHECK(strcmp(path, "a/b/c.txt") == 0, "join a directory and a name", "got \"%s\"", path);
  free(path);
  char *dir = tmp_path("made"), *file = tmp_path("file");
  struct stat st;
  CHECK(ng_make_dir(dir) == 0 && stat(dir, &st) == 0 && S_ISDIR(st.st_mode), "make a directory",
        "%s", ng_error());
  CHECK(ng_make_dir(dir) == 0, "an existing directory is fine", "%s", ng_error());
  write_bytes(file, "x", 1);
  expect_error("a file in the way is refused", ng_make_dir(file),
               "file: exists and is not a directory");
  char *deep = tmp_path("no/such"), *parent = tmp_path("no"), *under_file = tmp_path("file/sub");
  CHECK(ng_make_dir(deep) == 0 && stat(deep, &st) == 0 && S_ISDIR(st.st_mode),
        "missing parents are made (mkdir -p)", "%s", ng_error());
  expect_error("a file in the way of a parent is refused", ng_make_dir(under_file),
               "file: exists and is not a directory");
  NG_ASSERT(rmdir(deep) == 0 && rmdir(parent) == 0);
  free(parent);
  free(under_file);
  NG_ASSERT(rmdir(dir) == 0 && unlink(file) == 0);
  free(dir);
  free(file);
  free(deep);
}

// Removes the (flat) test directory.
static void remove_dir(void) {
  DIR *d = opendir(g_dir);
  NG_ASSERT(d);
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char *p = tmp_path(e->d_name);
    unlink(p);
    free(p);
  }
  closedir(d);
  rmdir(g_dir);
}

int main(void) {
  NG_ASSERT(mkdtemp(g_dir));
  test_map();
  test_read();
  test_write();
  test_dirs();
  remove_dir();
  return TEST_RESULT();
}

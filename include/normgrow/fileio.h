// normgrow: whole-file I/O shared by every reader and writer of files.
//
// Reading: a file is memory-mapped (binary formats) or read into memory (text).
// Writing: a file is replaced atomically: its contents go to the temp file
// "<path>.tmp.<pid>", which is flushed, fsync'ed and renamed over `path`, so a
// reader sees the old file or the complete new one, never a partial one. On
// failure the temp file is removed and `path` is left as it was. After the
// rename the directory is fsync'ed too, so that the new name is on disk.
//
// Like everything in normgrow, these return 0 on success and -1 after one
// message (ng_error) that names the path.
#ifndef NORMGROW_FILEIO_H
#define NORMGROW_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// normgrow's binary formats (safetensors, token shards, top-k caches) are
// little-endian, and their readers and writers copy values as host values.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "normgrow assumes a little-endian host"
#endif

// The most bytes a JSON config file (a run's, a model's) may hold: a few KB.
#define NG_MAX_CONFIG_BYTES (1 << 20)

// ---------------------------------------------------------------- paths

// "<dir>/<name>", malloc'd.
char *ng_path_join(const char *dir, const char *name);
// Creates the directory `dir` and any missing parents (as mkdir -p); an existing
// directory is fine.
int ng_make_dir(const char *dir);

// ---------------------------------------------------------------- reading

// Maps the whole regular file at `path` read-only into *map, its size into
// *size. A file under `min_size` bytes (> 0: mmap refuses empty files) is
// refused with "<path>: file is N bytes, too short for the <min_size>-byte
// <what>". Release the mapping with ng_unmap_file.
int ng_map_file(const char *path, size_t min_size, const char *what, uint8_t **map,
                size_t *size);
// Unmaps what ng_map_file mapped; a NULL map is ignored.
void ng_unmap_file(uint8_t *map, size_t size);

// The whole file at `path` (read in chunks: pipes work too) into *text,
// malloc'd and NUL-terminated; its length, without the NUL, into *len (if
// not NULL). A file of more than `max_size` bytes is refused.
int ng_read_file(const char *path, size_t max_size, char **text, size_t *len);

// ---------------------------------------------------------------- writing

// Writes a file's contents to fp; returns false on a write error (errno set).
typedef bool (*ng_write_fn)(FILE *fp, void *ctx);

// Replaces `path` atomically by what fill(fp, ctx) writes.
int ng_write_atomic(const char *path, ng_write_fn fill, void *ctx);
// Replaces `path` atomically by `text`, with a newline added unless it ends
// with one.
int ng_write_text_atomic(const char *path, const char *text);

// The same, for a writer that does not fit ng_write_fn (e.g. one that writes
// at offsets with pwrite on fileno(fp)): ng_temp_create opens the temp file
// for `path` (which must outlive it), and ng_temp_commit ends the write.
typedef struct {
  FILE *fp;          // the temp file, open for writing
  char *tmp;         // its name
  const char *path;  // the file it replaces
} ng_temp_file;

int ng_temp_create(ng_temp_file *t, const char *path);
// `rc` is the writer's result. When 0, flushes, fsyncs and closes the temp
// file and renames it over the path; when -1 (the writer has set its message)
// or if one of those steps fails, closes and removes it. Returns 0 on success,
// else -1 with the writer's message or "<path>: cannot write: <error>".
// Releases `t` either way.
int ng_temp_commit(ng_temp_file *t, int rc);

#endif

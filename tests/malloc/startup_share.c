/* Run with the face preloaded: a process's first requests come from the
 * bootstrap arena and build no pool (no arena reservation in its maps); the
 * first request past the start-up share builds it; a bootstrap block is
 * freed (a no-op) and reallocated (moved, bytes kept) like any other.
 * C, not C++: libstdc++ allocates its own emergency buffer at load, and
 * this checks the process that allocates little. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* Mappings of at least 1 GiB: the pool's arena reservation (64 GiB by
 * default). Read with open(2) and read(2) into a static buffer: stdio would
 * allocate, and this must not. */
static int big_reservations(void) {
  static char text[1 << 20];
  const int fd = open("/proc/self/maps", O_RDONLY);
  CHECK(fd >= 0);
  size_t n = 0;
  for (ssize_t got; (got = read(fd, text + n, sizeof(text) - 1 - n)) > 0;) n += (size_t)got;
  close(fd);
  text[n] = '\0';
  int count = 0;
  for (char* line = text; *line != '\0';) {
    unsigned long long lo = 0, hi = 0;
    if (sscanf(line, "%llx-%llx", &lo, &hi) == 2 && hi - lo >= (1ull << 30)) ++count;
    while (*line != '\0' && *line++ != '\n') {
    }
  }
  return count;
}

int main(void) {
  CHECK(dlsym(RTLD_DEFAULT, "unipool_malloc_face_version") != NULL); /* the face is preloaded */
  const int before = big_reservations();
  unsigned char* early = malloc(100);
  CHECK(early != NULL);
  for (int i = 0; i < 100; ++i) early[i] = (unsigned char)i;
  CHECK(big_reservations() == before); /* served without a pool */
  void* blocks[256];
  for (int i = 0; i < 256; ++i) blocks[i] = malloc(1024); /* past the 128 KiB share */
  CHECK(big_reservations() == before + 1);
  unsigned char* moved = realloc(early, 5000);
  CHECK(moved != NULL && moved != early);
  for (int i = 0; i < 100; ++i) CHECK(moved[i] == i);
  free(moved);
  for (int i = 0; i < 256; ++i) free(blocks[i]);
  printf("start-up share ok\n");
  return 0;
}

/* The C ABI from C: unipool.h must compile as C99 and link against the
 * installed library, the way a C runtime would use it. */
#include <stdio.h>
#include <string.h>

#include <unipool/unipool.h>

int main(void) {
  unipool_host_pool_t* pool = NULL;
  void* p = NULL;
  unipool_host_stats_t st;
  if (unipool_host_create("reserve=1GiB", &pool) != UNIPOOL_OK) return 1;
  if (unipool_host_alloc(pool, 1000, &p) != UNIPOOL_OK || p == NULL) return 2;
  memset(p, 7, 1000);
  memset(&st, 0, sizeof st);
  st.size = sizeof st;
  if (unipool_host_stats(pool, &st) != UNIPOOL_OK || st.size != sizeof st || st.requested_bytes == 0) return 3;
  if (unipool_host_free(pool, p) != UNIPOOL_OK) return 4;
  if (unipool_host_free(pool, p) != UNIPOOL_NOT_LIVE) return 5; /* a double free is refused */
  if (strlen(unipool_last_error()) == 0) return 6;
  if (unipool_host_validate(pool) != UNIPOOL_OK) return 7;
  unipool_host_destroy(pool);
  puts("unipool C consumer: ok");
  return 0;
}

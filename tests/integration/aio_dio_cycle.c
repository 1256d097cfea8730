/* aio_dio_cycle: the shape of xfstests generic/451 (aio-dio-cycle-write with buffered
 * readers). Buffered readers read the whole file again and again from their own fds
 * while the main process rewrites it, cycle after cycle, with one asynchronous
 * O_DIRECT write (Linux AIO: io_submit, then io_getevents) of the other pattern.
 * After each write has completed, a fresh buffered open must read the new pattern,
 * and so must a fresh O_DIRECT open.
 *
 *   aio_dio_cycle FILE [CYCLES [READERS [SIZE]]]     defaults: 400 cycles, 2 readers,
 *                                                     655360 bytes (generic/451's size)
 *
 * Prints one line: "cycles=N stale_buffered=N stale_direct=N first_stale_cycle=N";
 * exits 0 when it ran (stale reads are counted, not errors), 2 on a system error.
 * Linux AIO through raw system calls: no libaio needed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define PATTERN1 0x55
#define PATTERN2 0xaa

static void die(const char *what) {
  fprintf(stderr, "aio_dio_cycle: %s: %s\n", what, strerror(errno));
  exit(2);
}

static void *aligned(size_t size, int fill) {
  void *p;
  if (posix_memalign(&p, 4096, size) != 0) die("posix_memalign");
  memset(p, fill, size);
  return p;
}

/* One whole-file read through a fresh open with `flags`; 1 if it differs from `want`. */
static int stale(const char *file, int flags, const char *want, char *buf, size_t size) {
  int fd = open(file, flags);
  if (fd < 0) die("open for the check");
  ssize_t n = pread(fd, buf, size, 0);
  if (n < 0) die("pread for the check");
  close(fd);
  return (size_t)n != size || memcmp(buf, want, size) != 0;
}

/* A reader: the whole file through a fresh buffered open, until killed. */
static void reader(const char *file, size_t size) {
  char *buf = aligned(size, 0);
  for (;;) {
    int fd = open(file, O_RDONLY);
    if (fd < 0) _exit(2);
    if (pread(fd, buf, size, 0) < 0) _exit(2);
    close(fd);
  }
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 5) {
    fprintf(stderr, "usage: aio_dio_cycle FILE [CYCLES [READERS [SIZE]]]\n");
    return 2;
  }
  const char *file = argv[1];
  long cycles = argc > 2 ? atol(argv[2]) : 400;
  int readers = argc > 3 ? atoi(argv[3]) : 2;
  size_t size = argc > 4 ? (size_t)atol(argv[4]) : 655360;
  if (cycles < 1 || readers < 0 || readers > 64 || size == 0 || size % 4096)
    return fprintf(stderr, "aio_dio_cycle: bad arguments\n"), 2;

  char *pattern[2] = {aligned(size, PATTERN1), aligned(size, PATTERN2)};
  char *check = aligned(size, 0);

  /* The file holds PATTERN1, written with O_DIRECT and synced (as generic/451's
   * init_test). */
  int fd = open(file, O_DIRECT | O_CREAT | O_RDWR, 0600);
  if (fd < 0) die("open");
  if (ftruncate(fd, (off_t)size) != 0) die("ftruncate");
  if (pwrite(fd, pattern[0], size, 0) != (ssize_t)size) die("pwrite");
  if (fsync(fd) != 0) die("fsync");
  close(fd);

  pid_t pids[64];
  for (int r = 0; r < readers; r++) {
    pids[r] = fork();
    if (pids[r] < 0) die("fork");
    if (pids[r] == 0) reader(file, size);
  }

  aio_context_t ctx = 0;
  if (syscall(SYS_io_setup, 1, &ctx) != 0) die("io_setup");
  long stale_buffered = 0, stale_direct = 0, first = -1, done = 0;
  for (long c = 1; c <= cycles; c++) {
    const char *want = pattern[c % 2];
    fd = open(file, O_DIRECT | O_RDWR);
    if (fd < 0) die("open O_DIRECT");
    struct iocb cb;
    memset(&cb, 0, sizeof cb);
    cb.aio_fildes = (uint32_t)fd;
    cb.aio_lio_opcode = IOCB_CMD_PWRITE;
    cb.aio_buf = (uint64_t)(uintptr_t)want;
    cb.aio_nbytes = size;
    cb.aio_offset = 0;
    struct iocb *cbs[1] = {&cb};
    if (syscall(SYS_io_submit, ctx, 1, cbs) != 1) die("io_submit");
    struct io_event ev;
    if (syscall(SYS_io_getevents, ctx, 1, 1, &ev, NULL) != 1) die("io_getevents");
    if (ev.res != (int64_t)size) {
      errno = ev.res < 0 ? (int)-ev.res : EIO;
      die("the aio write");
    }
    close(fd);
    done = c;
    int b = stale(file, O_RDONLY, want, check, size);
    int d = stale(file, O_RDONLY | O_DIRECT, want, check, size);
    stale_buffered += b;
    stale_direct += d;
    if ((b || d) && first < 0) first = c;
  }
  syscall(SYS_io_destroy, ctx);
  for (int r = 0; r < readers; r++) kill(pids[r], SIGKILL);
  for (int r = 0; r < readers; r++) waitpid(pids[r], NULL, 0);
  printf("cycles=%ld stale_buffered=%ld stale_direct=%ld first_stale_cycle=%ld\n", done,
         stale_buffered, stale_direct, first);
  return 0;
}

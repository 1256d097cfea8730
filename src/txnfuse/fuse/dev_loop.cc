#include "txnfuse/fuse/dev_loop.h"

#include <pthread.h>
#include <semaphore.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "txnfuse/fuse/park.h"

namespace txnfs {

namespace {

struct Loop {
  fuse_session *se;
  sem_t finished;  // a worker stopped reading: the session ends
  std::atomic<int> error{0};
};

void *worker(void *arg) {
  Loop &l = *static_cast<Loop *>(arg);
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, nullptr);
  fuse_buf buf{};
  park::LoopBuffer lb;
  park::set_loop_buffer(&lb);
  while (!fuse_session_exited(l.se)) {
    // Cancelled (by the main thread, once the session ends) only while reading.
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, nullptr);
    int res = fuse_session_receive_buf(l.se, &buf);
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, nullptr);
    if (res == -EINTR) continue;
    if (res <= 0) {
      if (res < 0) l.error = res;
      break;
    }
    // The request is in `buf`'s memory: op_init turns FUSE_CAP_SPLICE_READ off, so no
    // request after INIT arrives in a pipe (which libfuse would copy into a temporary
    // buffer, freed when the handler returns, that a parked request could not keep).
    lb.mem = (buf.flags & FUSE_BUF_IS_FD) ? nullptr : buf.mem;
    lb.taken = false;
    fuse_session_process_buf(l.se, &buf);
    if (lb.taken) buf.mem = nullptr;  // a parked request owns it now
    lb.mem = nullptr;
  }
  park::set_loop_buffer(nullptr);
  std::free(buf.mem);
  fuse_session_exit(l.se);
  sem_post(&l.finished);
  return nullptr;
}

}  // namespace

int serve_dev_fuse(fuse_session *se, unsigned threads) {
  Loop l{se, {}, {}};
  sem_init(&l.finished, 0, 0);
  std::vector<pthread_t> pool;
  for (unsigned k = 0; k < threads; k++) {
    pthread_t t;
    if (pthread_create(&t, nullptr, worker, &l) != 0) break;
    pthread_setname_np(t, "txnfs-fuse");
    pool.push_back(t);
  }
  if (pool.empty()) return -EAGAIN;
  // Until a worker stops (unmount: every read fails) or a signal handler ends the
  // session (fuse_session_exit does not wake readers: look every second).
  while (!fuse_session_exited(se)) {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    sem_timedwait(&l.finished, &ts);
  }
  for (pthread_t t : pool) pthread_cancel(t);
  for (pthread_t t : pool) pthread_join(t, nullptr);
  sem_destroy(&l.finished);
  return l.error;
}

}  // namespace txnfs

/* A diagnostic for bench/service/run.py --server-tcp-nodelay: preloaded into glint serve
 * (LD_PRELOAD), it sets TCP_NODELAY on every accepted connection, which the server's
 * HTTP library (cpp-httplib, CPPHTTPLIB_TCP_NODELAY false) leaves off. With Nagle's
 * algorithm on, a response written in two pieces (headers, then body) waits for the
 * client's delayed ACK: ~40 ms per request on a keep-alive connection.
 * Build: cc -shared -fPIC -O2 -o nodelay.so nodelay.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

static int nodelay(int fd) {
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

int accept(int s, struct sockaddr* addr, socklen_t* len) {
  static int (*real)(int, struct sockaddr*, socklen_t*);
  if (!real) real = (int (*)(int, struct sockaddr*, socklen_t*))dlsym(RTLD_NEXT, "accept");
  return nodelay(real(s, addr, len));
}

int accept4(int s, struct sockaddr* addr, socklen_t* len, int flags) {
  static int (*real)(int, struct sockaddr*, socklen_t*, int);
  if (!real) real = (int (*)(int, struct sockaddr*, socklen_t*, int))dlsym(RTLD_NEXT, "accept4");
  return nodelay(real(s, addr, len, flags));
}

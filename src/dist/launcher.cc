#include "dist/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "core/error.h"

namespace glint {

namespace {

volatile sig_atomic_t g_stop_signal = 0, g_stop_count = 0;
void on_signal(int sig) {
  g_stop_signal = sig;
  g_stop_count = g_stop_count + 1;
}

struct Rank {
  pid_t pid = -1;
  int out_fd = -1;      // read end of the rank's stdout+stderr pipe
  std::string partial;  // output after the last newline
  bool exited = false;
  int status = 0;
};

void emit(int rank, const std::string& line) {
  std::string s = "[rank " + std::to_string(rank) + "] " + line + "\n";
  (void)!::write(STDOUT_FILENO, s.data(), s.size());
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "stopped";
}

}  // namespace

void LaunchOptions::validate() const {
  GLINT_USAGE_CHECK(nproc >= 1, "launch: -n must be at least 1, got ", nproc);
  GLINT_USAGE_CHECK(nnodes >= 1, "launch: --nnodes must be at least 1, got ", nnodes);
  GLINT_USAGE_CHECK(node_rank >= 0 && node_rank < nnodes, "launch: --node-rank ", node_rank, " is not in [0, ",
              nnodes, ") (--nnodes ", nnodes, ")");
  GLINT_USAGE_CHECK(nnodes == 1 || (master_addr != "localhost" && master_addr.rfind("127.", 0) != 0),
              "launch: with --nnodes ", nnodes, ", --master-addr must be an address every node reaches "
              "(node 0's), not ", master_addr);
  GLINT_USAGE_CHECK(master_port >= 0 && master_port < 65536, "launch: --master-port ", master_port,
              " is not a TCP port");
  GLINT_USAGE_CHECK(!command.empty(), "launch: no command given (usage: glint launch -n N -- CMD ...)");
}

ReservedPort::ReservedPort() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  GLINT_CHECK(fd_ >= 0, "launch: socket() failed: ", std::strerror(errno));
  int on = 1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  bool ok = ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) == 0 &&
            ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
            ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  if (!ok) {
    int err = errno;
    ::close(fd_);
    fail("launch: cannot find a free port: ", std::strerror(err));
  }
  port_ = ntohs(addr.sin_port);
}

ReservedPort::~ReservedPort() { ::close(fd_); }

int launch(const LaunchOptions& o) {
  o.validate();
  // One node picks a free port; the nodes of a multi-node job must agree on one without
  // talking, so they take torchrun's default.
  std::optional<ReservedPort> reserved;
  if (!o.master_port && o.nnodes == 1) reserved.emplace();
  int port = o.master_port ? o.master_port : o.nnodes > 1 ? 29500 : reserved->port();
  const int world = o.nnodes * o.nproc, first = o.node_rank * o.nproc;
  if (o.nnodes > 1)
    std::fprintf(stderr, "glint launch: node %d of %d: ranks %d-%d of %d, rendezvous at %s:%d\n", o.node_rank,
                 o.nnodes, first, first + o.nproc - 1, world, o.master_addr.c_str(), port);
  std::vector<Rank> ranks(o.nproc);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  const pid_t launcher = ::getpid();
  for (int r = 0; r < o.nproc; ++r) {
    int fds[2];
    GLINT_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "launch: pipe() failed: ", std::strerror(errno));
    pid_t pid = ::fork();
    GLINT_CHECK(pid >= 0, "launch: fork() failed: ", std::strerror(errno));
    if (pid == 0) {
      // Each rank leads a process group of its own, so that stopping it stops what it
      // started too (a child left running would hold its output open); and it dies with
      // the launcher.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) ::_exit(127);  // the launcher is already gone
      ::dup2(fds[1], STDOUT_FILENO);
      ::dup2(fds[1], STDERR_FILENO);
      ::setenv("RANK", std::to_string(first + r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
      ::setenv("GROUP_RANK", std::to_string(o.node_rank).c_str(), 1);
      ::setenv("GROUP_WORLD_SIZE", std::to_string(o.nnodes).c_str(), 1);
      ::setenv("ROLE_RANK", std::to_string(first + r).c_str(), 1);
      ::setenv("ROLE_WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("GLINT_LAUNCH", "1", 1);  // the ranks know who started them (World::launcher)
      std::vector<char*> argv;
      for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "cannot run '%s': %s\n", argv[0], std::strerror(errno));
      std::fflush(stderr);
      ::_exit(127);
    }
    ::close(fds[1]);
    ::setpgid(pid, pid);  // also here: a signal sent before the child runs reaches its group
    ranks[r].pid = pid;
    ranks[r].out_fd = fds[0];
  }

  int failed_rank = -1, failed_status = 0;
  bool stopping = false;
  auto stop_started = std::chrono::steady_clock::now();
  bool killed = false;
  sig_atomic_t forwarded = 0;  // stop signals passed on so far
  // To every rank's process group: a rank that exited may have left processes in it.
  auto stop_all = [&](int sig) {
    for (auto& rk : ranks) ::kill(-rk.pid, sig);
  };
  for (;;) {
    std::vector<pollfd> pfds;
    std::vector<int> who;
    for (int r = 0; r < o.nproc; ++r)
      if (ranks[r].out_fd >= 0) {
        pfds.push_back({ranks[r].out_fd, POLLIN, 0});
        who.push_back(r);
      }
    if (!pfds.empty()) ::poll(pfds.data(), pfds.size(), 100);
    else ::usleep(20000);
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Rank& rk = ranks[who[i]];
      char buf[65536];
      ssize_t n = ::read(rk.out_fd, buf, sizeof buf);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        if (!rk.partial.empty()) emit(first + who[i], rk.partial);
        rk.partial.clear();
        ::close(rk.out_fd);
        rk.out_fd = -1;
        continue;
      }
      rk.partial.append(buf, size_t(n));
      size_t pos;
      while ((pos = rk.partial.find('\n')) != std::string::npos) {
        emit(first + who[i], rk.partial.substr(0, pos));
        rk.partial.erase(0, pos + 1);
      }
    }
    for (int r = 0; r < o.nproc; ++r) {
      Rank& rk = ranks[r];
      if (rk.exited) continue;
      int status;
      if (::waitpid(rk.pid, &status, WNOHANG) == rk.pid) {
        rk.exited = true;
        rk.status = status;
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && failed_rank < 0 && !stopping) {
          failed_rank = r;
          failed_status = status;
        }
      }
    }
    // A stop signal goes to every rank, which finish their step, save and exit 0 (glint
    // train); a second one kills them at once.
    if (g_stop_count > forwarded && !killed) {
      if (forwarded == 0) {
        std::fprintf(stderr, "glint launch: received signal %d, passing it to all ranks\n", int(g_stop_signal));
        stop_all(g_stop_signal);
      } else {
        std::fprintf(stderr, "glint launch: second signal %d, killing all ranks\n", int(g_stop_signal));
        stop_all(SIGKILL);
        killed = true;
        if (failed_rank < 0) {
          failed_rank = -2;
          failed_status = 128 + g_stop_signal;
        }
      }
      forwarded = g_stop_count;
    }
    if ((failed_rank != -1) && !stopping) {
      stopping = true;
      stop_started = std::chrono::steady_clock::now();
      stop_all(SIGTERM);
    }
    if (stopping && !killed &&
        std::chrono::steady_clock::now() - stop_started > std::chrono::duration<double>(o.grace_seconds)) {
      stop_all(SIGKILL);
      killed = true;
    }
    bool all_done = true;
    for (const auto& rk : ranks) all_done &= rk.exited && rk.out_fd < 0;
    if (all_done) break;
  }
  if (failed_rank == -2) return failed_status;
  if (failed_rank >= 0) {
    std::string where = o.nnodes > 1 ? " (node " + std::to_string(o.node_rank) + ")" : "";
    std::fprintf(stderr, "glint launch: rank %d%s %s; stopped the other ranks%s\n", first + failed_rank,
                 where.c_str(), describe(failed_status).c_str(), o.nnodes > 1 ? " of this node" : "");
    if (WIFEXITED(failed_status)) return WEXITSTATUS(failed_status);
    return 128 + WTERMSIG(failed_status);
  }
  return 0;
}

}  // namespace glint

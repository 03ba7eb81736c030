// Tests of the free-port finder (loopback only).
#include "launcher/workers/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

// 127.0.0.1:port.
sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return a;
}

// A TCP socket with SO_REUSEADDR, as a server binds.
int ReusingSocket() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  return fd;
}

TEST(Ports, FreePortIsBindableAndBusyPortIsNot) {
  auto finder = NewRealPortFinder();
  auto port = finder->FindFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
  // Held, not listened on: a listener that reuses addresses (a worker's
  // TCPStore, the rendezvous server) may still take it.
  EXPECT_TRUE(PortIsFree("127.0.0.1", *port));
  finder->ReleaseHeld();
  EXPECT_TRUE(PortIsFree("127.0.0.1", *port));

  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(*port);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  EXPECT_FALSE(PortIsFree("127.0.0.1", *port));
  // While it is held, the finder never hands it out.
  for (int i = 0; i < 50; ++i) {
    auto other = finder->FindFreePort("127.0.0.1");
    ASSERT_TRUE(other.ok());
    EXPECT_NE(*other, *port);
  }
  close(fd);
}

// A port whose server closed its connections first: they wait in
// TIME_WAIT for a minute, and a plain bind fails (EADDRINUSE), but a
// relaunched rendezvous server (SO_REUSEADDR) can listen there at once, so
// the probe says free (issue 32: a job relaunched on the same endpoint).
TEST(Ports, APortInTimeWaitIsFreeToAServer) {
  int listener = ReusingSocket();
  sockaddr_in a = Loopback(0);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);
  int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  int served = accept(listener, nullptr, nullptr);
  ASSERT_GE(served, 0);
  // The server's side closes first: its end (port `port`) enters TIME_WAIT.
  close(served);
  char byte;
  ASSERT_EQ(read(client, &byte, 1), 0) << "the client sees the server's FIN";
  close(client);
  close(listener);

  int plain = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_NE(bind(plain, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0)
      << "a bind without SO_REUSEADDR is refused while the connection is in TIME_WAIT";
  EXPECT_EQ(errno, EADDRINUSE);
  close(plain);
  EXPECT_TRUE(PortIsFree("127.0.0.1", port));
}

TEST(Ports, AHeldPortIsStillBindableByAWorkerThatReusesAddresses) {
  // As a worker's TCPStore does at MASTER_PORT: SO_REUSEADDR, bind, listen.
  auto finder = NewRealPortFinder();
  auto port = finder->FindFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok());
  int fd = ReusingSocket();
  sockaddr_in a = Loopback(*port);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
  EXPECT_EQ(listen(fd, 1), 0) << strerror(errno);
  close(fd);
}

TEST(Ports, Ipv6LoopbackWhenAvailable) {
  int probe = socket(AF_INET6, SOCK_STREAM, 0);
  if (probe < 0) GTEST_SKIP() << "no IPv6 sockets on this machine";
  close(probe);
  auto port = NewRealPortFinder()->FindFreePort("::1");
  if (!port.ok()) GTEST_SKIP() << "::1 not configured: " << port.status();
  EXPECT_GT(*port, 0);
}

TEST(Ports, UnresolvableHostIsAnError) {
  auto port = NewRealPortFinder()->FindFreePort("no-such-host.invalid");
  EXPECT_FALSE(port.ok());
}

}  // namespace
}  // namespace cpptorchrun::launcher

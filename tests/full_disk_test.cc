// A real rkv-server whose data dir is a small tmpfs: PUTs fill it until they
// fail with RESOURCE_EXHAUSTED, GETs go on, and once the file system grows
// (mount -o remount,size=...) PUTs succeed again without a restart, with
// every acknowledged write intact, then and after a restart.
//
// Mounting needs root (CI runs the suite as root). The test makes its own
// mount namespace first, so the tmpfs is private to this process and the
// server it starts, and disappears with them whatever happens. Where the
// machine cannot give it that (not root, no mount namespaces, no mount it
// can make private), the test is skipped with the reason; CI, which must run
// it, counts a skip as a failure (deploy/test.sh, RKV_NO_SKIP).
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "rkv/client.h"
#include "tests/server_process.h"
#include "tests/wait_for.h"

namespace rkv::testing {
namespace {

constexpr uint64_t kSmallFsBytes = 2 << 20;
constexpr uint64_t kGrownFsBytes = 32 << 20;
constexpr size_t kValueBytes = 16 << 10;
// Bounds a hang only: the server retries its recovery within about a second.
constexpr auto kRecoveryDeadline = std::chrono::seconds(120);

std::string SizeOption(uint64_t bytes) { return "size=" + std::to_string(bytes) + ",mode=0700"; }

// The mount points this process sees, as paths from its root
// (/proc/self/mountinfo's fifth field, the kernel's octal escapes undone).
std::vector<std::string> VisibleMountPoints() {
  std::vector<std::string> points;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point;
    if (!(fields >> id >> parent >> device >> root >> point)) continue;
    std::string decoded;
    for (size_t i = 0; i < point.size(); ++i) {
      if (point[i] == '\\' && i + 3 < point.size()) {
        decoded.push_back(static_cast<char>(std::stoi(point.substr(i + 1, 3), nullptr, 8)));
        i += 3;
      } else {
        decoded.push_back(point[i]);
      }
    }
    points.push_back(decoded);
  }
  return points;
}

// The deepest mount point this process sees that holds `dir`, or "" when
// `dir` lies on a mount whose mount point is outside this process's root
// (a directory of a chroot that is not itself a mount point).
std::string MountPointHolding(const std::string& dir) {
  std::error_code ec;
  const std::string path = std::filesystem::weakly_canonical(dir, ec).string();
  if (ec) return "";
  std::string best;
  for (const std::string& point : VisibleMountPoints()) {
    const bool holds = point == "/" || path == point || path.rfind(point + "/", 0) == 0;
    if (holds && point.size() > best.size()) best = point;
  }
  return best;
}

// Makes the mount at `point` and every mount below it private to this
// mount namespace: nothing mounted under it propagates to another namespace.
bool MakePrivate(const std::string& point) {
  return ::mount(nullptr, point.c_str(), nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
}

std::string ErrnoText(const std::string& call) { return call + ": " + std::strerror(errno); }

// Gives this thread a mount namespace of its own and returns a directory,
// `temp_dir` or else the test binary's, under which a mount stays in that
// namespace; or sets `*skip` to why this machine cannot give the test one.
// Mounts made here must not reach the host's namespace, so the mount they go
// under is made private first. That is "/" where it is a mount point. In a
// chroot it is not, and the chroot's own root cannot be named; the deepest
// mount point inside it that holds the directory stands in (a bind mount of
// the source tree, a tmpfs /tmp).
std::string PrivateMountParent(const std::string& temp_dir, std::string* skip) {
  if (::geteuid() != 0) {
    *skip = "mounting a tmpfs needs root, and this runs as uid " + std::to_string(::geteuid());
    return "";
  }
  // Read before unsharing: after it, the executable's path is named from the
  // old namespace's root, outside a chroot's.
  std::error_code ec;
  const std::string binary_dir = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().string();
  if (::unshare(CLONE_NEWNS) != 0) {
    *skip = "no mount namespace of its own: " + ErrnoText("unshare(CLONE_NEWNS)");
    return "";
  }
  if (MakePrivate("/")) return temp_dir;
  const bool root_not_a_mount = errno == EINVAL;
  std::string root_error = ErrnoText("making / private");
  if (root_not_a_mount) root_error += " (/ is not a mount point, as in a chroot)";
  std::string tried;
  for (const std::string& dir : {temp_dir, binary_dir}) {
    if (dir.empty()) continue;
    if (::access(dir.c_str(), W_OK) != 0) {
      tried += "; " + ErrnoText(dir + " is not writable");
      continue;
    }
    const std::string point = MountPointHolding(dir);
    if (point.empty()) {
      tried += "; " + dir + " lies on no mount point below /";
      continue;
    }
    if (MakePrivate(point)) return dir;
    tried += "; " + ErrnoText("making " + point + " (holding " + dir + ") private");
  }
  *skip = "no mount it can make private for its tmpfs: " + root_error + tried +
          ". It runs where / is a mount point, or with TEST_TMPDIR on a mount point";
  return "";
}

std::string ValueFor(int i) {
  std::string v(kValueBytes, '\0');
  for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<char>('a' + (i * 7 + j) % 26);
  return v;
}

class FullDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string skip;
    const std::string parent = PrivateMountParent(dir_.path(), &skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    data_dir_ = parent + "/rkv-full-disk-fs-" + std::to_string(::getpid());
    std::filesystem::create_directories(data_dir_);
    if (::mount("tmpfs", data_dir_.c_str(), "tmpfs", 0, SizeOption(kSmallFsBytes).c_str()) != 0) {
      const int error = errno;
      const std::string why = ErrnoText("mounting a tmpfs on " + data_dir_);
      if (error != EPERM && error != EACCES) FAIL() << why;
      GTEST_SKIP() << why;
    }
    mounted_ = true;
    token_file_ = dir_.path() + "/token";
    WriteFile(token_file_, "full-disk-token\n");
    server_ = std::make_unique<ServerProcess>(data_dir_, token_file_);
    const Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s;
  }

  void TearDown() override {
    server_.reset();  // kills the server before its file system goes
    if (mounted_) ::umount2(data_dir_.c_str(), MNT_DETACH);
    // Outside dir_ when the binary's directory held the mount.
    if (!data_dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(data_dir_, ec);
    }
  }

  std::unique_ptr<Client> NewClient() {
    ClientOptions o;
    o.server = server_->address();
    o.token = "full-disk-token";
    o.transport = TestTransport();
    o.timeout = std::chrono::milliseconds(10000);
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status() << "\nserver log:\n" << server_->Log();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // Every acknowledged write reads back with its value and version.
  void ExpectAllAcknowledged(Client& client, const std::map<std::string, std::pair<std::string, uint64_t>>& acked) {
    for (const auto& [key, want] : acked) {
      std::string value;
      uint64_t version = 0;
      const Status s = client.Get(key, &value, &version);
      ASSERT_TRUE(s.ok()) << key << ": " << s;
      EXPECT_EQ(value, want.first) << key;
      EXPECT_EQ(version, want.second) << key;
    }
  }

  TempDir dir_;
  std::string data_dir_;
  bool mounted_ = false;
  std::string token_file_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(FullDiskTest, PutsRecoverWithoutRestartOnceTheFileSystemGrows) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  std::map<std::string, std::pair<std::string, uint64_t>> acked;

  // Fill the file system until a PUT is refused.
  Status refused;
  int i = 0;
  for (; i < static_cast<int>(4 * kSmallFsBytes / kValueBytes); ++i) {
    const std::string key = "key" + std::to_string(i);
    StatusOr<uint64_t> v = client->Put(key, ValueFor(i));
    if (!v.ok()) {
      refused = v.status();
      break;
    }
    acked[key] = {ValueFor(i), *v};
  }
  ASSERT_FALSE(refused.ok()) << "a " << kSmallFsBytes << "-byte file system never filled up";
  ASSERT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused << "\nserver log:\n" << server_->Log();
  EXPECT_NE(refused.message().find("No space left on device"), std::string::npos) << refused;
  ASSERT_GT(acked.size(), 0u);

  // Full: PUTs and DELETEs stay refused, GETs are served.
  for (int j = 0; j < 5; ++j) {
    StatusOr<uint64_t> v = client->Put("while-full-" + std::to_string(j), ValueFor(j));
    EXPECT_EQ(v.status().code(), StatusCode::kResourceExhausted) << v.status();
    // Spread over time on purpose: the refusal holds, not just at one moment.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(client->Delete("key0").code(), StatusCode::kResourceExhausted);
  ExpectAllAcknowledged(*client, acked);

  // Grow the file system: PUTs succeed again, the same process serving.
  ASSERT_EQ(::mount("tmpfs", data_dir_.c_str(), "tmpfs", MS_REMOUNT, SizeOption(kGrownFsBytes).c_str()), 0)
      << "growing the tmpfs: " << std::strerror(errno);
  StatusOr<uint64_t> v = ResourceExhausted("not tried");
  const std::string key = "key" + std::to_string(i);
  // Refused as full until the server sees the room, and never otherwise.
  WaitFor(
      "a PUT accepted after the file system grew",
      [&] {
        v = client->Put(key, ValueFor(i));
        return v.status().code() != StatusCode::kResourceExhausted;
      },
      kRecoveryDeadline, std::chrono::milliseconds(50));
  ASSERT_TRUE(v.ok()) << "PUTs still refused after the file system grew: " << v.status() << "\nserver log:\n"
                      << server_->Log();
  acked[key] = {ValueFor(i), *v};
  for (int j = i + 1; j < i + 20; ++j) {
    const std::string k = "key" + std::to_string(j);
    StatusOr<uint64_t> put = client->Put(k, ValueFor(j));
    ASSERT_TRUE(put.ok()) << put.status();
    acked[k] = {ValueFor(j), *put};
  }
  ExpectAllAcknowledged(*client, acked);
  const std::string log = server_->Log();
  EXPECT_NE(log.find("refuses writes until it recovers"), std::string::npos) << log;
  EXPECT_NE(log.find("accepts writes again"), std::string::npos) << log;

  // And after a restart, from the store alone.
  client.reset();
  server_->Kill9();
  const Status started = server_->Start();
  ASSERT_TRUE(started.ok()) << started;
  client = NewClient();
  ASSERT_NE(client, nullptr);
  ExpectAllAcknowledged(*client, acked);
  for (int j = 0; j < 5; ++j) {
    std::string value;
    EXPECT_EQ(client->Get("while-full-" + std::to_string(j), &value).code(), StatusCode::kNotFound);
  }
}

}  // namespace
}  // namespace rkv::testing

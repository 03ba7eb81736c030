// Tests of the program's argv for each mode, with a fake file system.
#include "launcher/config/program.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct FakeFs {
  std::set<std::string> executables;
  std::set<std::string> files;
  IsExecutableFn exe() const {
    return [this](const std::string& p) { return executables.count(p) > 0; };
  }
  ExistsFn exists() const {
    return [this](const std::string& p) { return executables.count(p) > 0 || files.count(p) > 0; };
  }
};

LaunchConfig Config(const std::string& script, std::vector<std::string> args = {}) {
  LaunchConfig c;
  c.training_script = script;
  c.training_script_args = std::move(args);
  return c;
}

TEST(Program, ExecutableOnPath) {
  FakeFs fs{{"/opt/bin/train", "/usr/bin/python3"}, {}};
  std::map<std::string, std::string> env = {{"PATH", "/usr/local/bin:/opt/bin"}};
  auto argv = ResolveProgram(Config("train", {"--epochs", "1"}), env, fs.exe(), fs.exists());
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_THAT(*argv, ElementsAre("/opt/bin/train", "--epochs", "1"));
}

TEST(Program, PyFileUnderPythonExec) {
  FakeFs fs{{"/usr/bin/python3", "/py/bin/python"}, {"s.py"}};
  std::map<std::string, std::string> env = {{"PATH", "/usr/bin"}};
  auto argv = ResolveProgram(Config("s.py", {"a"}), env, fs.exe(), fs.exists());
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_THAT(*argv, ElementsAre("/usr/bin/python3", "-u", "s.py", "a"));
  env["PYTHON_EXEC"] = "/py/bin/python";
  argv = ResolveProgram(Config("s.py"), env, fs.exe(), fs.exists());
  ASSERT_TRUE(argv.ok());
  EXPECT_THAT(*argv, ElementsAre("/py/bin/python", "-u", "s.py"));
}

TEST(Program, ModuleAndNoPython) {
  FakeFs fs{{"/usr/bin/python3", "/usr/bin/true"}, {}};
  std::map<std::string, std::string> env = {{"PATH", "/usr/bin"}};
  LaunchConfig m = Config("pkg.main", {"x"});
  m.module = true;
  auto argv = ResolveProgram(m, env, fs.exe(), fs.exists());
  ASSERT_TRUE(argv.ok());
  EXPECT_THAT(*argv, ElementsAre("/usr/bin/python3", "-u", "-m", "pkg.main", "x"));
  LaunchConfig n = Config("true");
  n.no_python = true;
  argv = ResolveProgram(n, env, fs.exe(), fs.exists());
  ASSERT_TRUE(argv.ok());
  EXPECT_THAT(*argv, ElementsAre("/usr/bin/true"));
}

TEST(Program, Errors) {
  FakeFs fs{{"/usr/bin/python3"}, {"/data/notexec"}};
  std::map<std::string, std::string> env = {{"PATH", "/usr/bin"}};
  auto a = ResolveProgram(Config("nosuch"), env, fs.exe(), fs.exists());
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("training_script"));
  auto b = ResolveProgram(Config("/data/notexec"), env, fs.exe(), fs.exists());
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("not an executable"));
  auto c = ResolveProgram(Config("missing.py"), env, fs.exe(), fs.exists());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("not found"));
  env["PYTHON_EXEC"] = "nopython";
  auto d = ResolveProgram(Config("x.py"), env, fs.exe(), fs.exists());
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("PYTHON_EXEC"));
}

TEST(Program, RealFileSystem) {
  auto argv = ResolveProgram(Config("true"), {{"PATH", "/usr/bin:/bin"}});
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_TRUE(IsExecutableFile((*argv)[0]));
}

}  // namespace
}  // namespace cpptorchrun::launcher

"""local_cuda: finds CUDA and NCCL on this machine, without downloading.

Looks in $CUDA_HOME, then /usr/local/cuda. Where both the CUDA runtime and
NCCL are there, @local_cuda//:cuda and @local_cuda//:nccl wrap them and
@local_cuda//:config.bzl says HAS_CUDA = True. Elsewhere the two targets are
empty libraries and HAS_CUDA = False: BUILD files load config.bzl and
declare the targets that need NCCL only where HAS_CUDA is True.
"""

def _local_cuda_impl(ctx):
    home = ctx.os.environ.get("CUDA_HOME", "/usr/local/cuda")
    root = ctx.path(home)
    has = (root.get_child("include").get_child("nccl.h").exists and
           root.get_child("include").get_child("cuda_runtime_api.h").exists)
    libdir = None
    if has:
        for d in ["lib64", "lib", "targets/x86_64-linux/lib"]:
            p = ctx.path(home + "/" + d)
            if p.get_child("libnccl.so").exists or p.get_child("libnccl.so.2").exists:
                libdir = home + "/" + d
                break
        if libdir == None:
            has = False
    if has:
        ctx.symlink(home + "/include", "include")
        build = """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda",
    hdrs = glob(["include/*.h", "include/crt/*.h", "include/crt/*.hpp"]),
    includes = ["include"],
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcudart"],
)

cc_library(
    name = "nccl",
    hdrs = ["include/nccl.h"],
    includes = ["include"],
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-l:libnccl.so.2"],
    deps = [":cuda"],
)
""".format(lib = libdir)
    else:
        build = """
package(default_visibility = ["//visibility:public"])

# No CUDA/NCCL on this machine: empty stand-ins; HAS_CUDA is False.
cc_library(name = "cuda")

cc_library(name = "nccl")
"""
    ctx.file("BUILD.bazel", build)
    ctx.file("config.bzl", "HAS_CUDA = %s\nCUDA_HOME = %r\n" % (has, home if has else ""))

local_cuda = repository_rule(
    implementation = _local_cuda_impl,
    environ = ["CUDA_HOME"],
    local = True,
)

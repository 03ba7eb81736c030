"""cc_grpc_proto: C++ messages and gRPC stubs from one .proto, through the
system protoc and grpc_cpp_plugin (Debian's protobuf-compiler and
protobuf-compiler-grpc), exposed as one cc_library.

Bazel's own cc_proto_library/cc_grpc_library want protobuf and gRPC as source
repositories, which cannot be downloaded here.
"""

def cc_grpc_proto(name, src, deps = [], visibility = None):
    base = src[:-len(".proto")]
    pkg = native.package_name()
    outs = [base + ".pb.h", base + ".pb.cc", base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    native.genrule(
        name = name + "_gen",
        srcs = [src],
        outs = outs,
        cmd = " ".join([
            "plugin=$$(command -v grpc_cpp_plugin) ||",
            "{ echo 'grpc_cpp_plugin not found: run tools/bootstrap' >&2; exit 1; };",
            "protoc",
            "--proto_path=.",
            "--cpp_out=$(GENDIR)",
            "--grpc_out=$(GENDIR)",
            "--plugin=protoc-gen-grpc=$$plugin",
            "$(location " + src + ")",
        ]),
    )
    native.cc_library(
        name = name,
        srcs = [base + ".pb.cc", base + ".grpc.pb.cc"],
        hdrs = [base + ".pb.h", base + ".grpc.pb.h"],
        deps = deps + ["//tools/deps:grpc", "//tools/deps:protobuf"],
        copts = ["-Wno-unused-parameter"],
        visibility = visibility,
    )

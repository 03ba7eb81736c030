"""fuzz_test: a libFuzzer-style target (LLVMFuzzerTestOneInput) run two ways.

- `<name>`: a cc_test linking tools/fuzz:driver (any compiler): the seed
  corpus, then mutated inputs for a bounded count and time; part of
  `bazel test //...`.
- `<name>_libfuzzer`: the same target linked with libFuzzer (tagged manual;
  built by tools/fuzz/run with clang, -fsanitize=fuzzer,address).
"""

def fuzz_test(name, srcs, deps = [], **kwargs):
    """The seeds are tools/fuzz/corpus/<name>/* (filegroup //tools/fuzz:corpus_<name>)."""
    native.cc_test(
        name = name,
        srcs = srcs,
        deps = deps + ["//tools/fuzz:driver"],
        data = ["//tools/fuzz:corpus_" + name],
        args = ["--corpus", "tools/fuzz/corpus/" + name],
        size = "small",
        **kwargs
    )
    native.cc_binary(
        name = name + "_libfuzzer",
        srcs = srcs,
        deps = deps,
        copts = ["-fsanitize=fuzzer-no-link"],
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual"],
    )

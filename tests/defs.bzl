"""scenario_test: a Python scenario (tests/<name>.py) run as a Bazel test."""

def scenario_test(name, data = [], size = "medium", tags = [], **kwargs):
    native.sh_test(
        name = name,
        srcs = ["run_py.sh"],
        args = ["tests/%s.py" % name],
        data = [name + ".py", "harness.py"] + data,
        size = size,
        tags = tags,
        **kwargs
    )

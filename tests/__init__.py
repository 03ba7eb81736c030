"""The scenario tests and the helpers they share with bench/ and tools/
(harness, jobs, rdzv_wire): a package, imported as `tests.<module>` with the
repository root as the working folder (`python3 -m tests.<name>`)."""

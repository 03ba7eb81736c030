"""The reference launcher: Debian's torchrun (torch 1.13) with its one
start-up fault on Python 3.11 mended, nothing else changed.

torch 1.13's Std.from_str finds the flag for "0" by iterating the IntFlag
Std, and Python 3.11 no longer yields the zero member, so the default
--redirects/--tee of "0" become None and torchrun crashes before it starts
anything. This shim makes from_str map "0" to Std.NONE, then runs torchrun's
own main(). Usage: /usr/bin/python3 bench/torchrun_ref.py <torchrun args>.
"""
import re
import sys

from torch.distributed.elastic.multiprocessing import api

_original = api.Std.from_str.__func__


def _from_str(cls, vm):
    if re.fullmatch(r"\d+", vm):
        return cls(int(vm))
    if re.match(api._MAPPING_REGEX, vm):
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    return _original(cls, vm)


api.Std.from_str = classmethod(_from_str)

if __name__ == "__main__":
    from torch.distributed.run import main
    sys.exit(main())

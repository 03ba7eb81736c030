"""A worker with no heartbeats (no agent socket), as any Python script: on
the first attempt rank 1 stops itself (SIGSTOP, as a job-control stop or a
misbehaving library would); nothing but the launcher can end it. On the next
attempt each rank writes done.<rank>.<restart> into the folder given."""
import os
import signal
import sys

out = sys.argv[1]
rank = int(os.environ["RANK"])
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])


def stop_here():
    os.kill(os.getpid(), signal.SIGSTOP)


if rank == 1 and restart == 0:
    stop_here()  # the launcher takes its stack (faulthandler) before it kills it
if restart == 0:
    signal.pause()  # rank 0 waits as a peer in a collective would; the restart stops it
with open(os.path.join(out, "done.%d.%d" % (rank, restart)), "w") as f:
    f.write("ok")
